"""Smoke run of bench/cold_1m.py on a small store: it is built once, then every mode's first search in a
fresh interpreter takes its indexes from the snapshot files in the loaded case and from the database with
the files moved aside, with the same hits; the files are put back and nothing the second case wrote stays."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from bench import cold_1m
from bench.store_data import make_corpus


def test_first_searches_with_and_without_the_files(capsys, tmp_path):
    store = tmp_path / "s.db"
    query = " ".join(make_corpus(0, 1500, 20_000).texts[700].split()[:4])  # words the store holds
    argv = [
        "--store",
        str(store),
        "--n",
        "1500",
        "--cases",
        "loaded,without",
        "--repeats",
        "1",
        "--query",
        query,
    ]
    cold_1m.main(argv)
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert set(out["build"]) >= {"insert_s", "close_s"} and out["index_mb"] > 0
    files = sorted(p.name for p in Path(f"{store}.index").iterdir())
    for mode in cold_1m.MODES:
        row = out[mode]
        assert row["same_results"] and row["hits"] > 0, mode
        loaded, without = row["loaded"], row["without"]
        assert loaded["first_ms"] > 0 and without["first_ms"] > 0 and loaded["warm_p50_ms"] > 0
        assert 0 < loaded["rss_anon_mb"] <= loaded["rss_mb"] <= loaded["rss_peak_mb"]
        if mode == "dense":  # exact below the graph's threshold: numpy's top 10
            assert loaded["dense_recall_at_10"] == without["dense_recall_at_10"] == 1.0
        if mode in ("dense", "default", "hybrid"):
            assert (loaded["from_files"]["dense"], without["from_files"]["dense"]) == ("snapshot", "store")
        if mode != "dense":  # the facts: every mode but plain vector search reads them
            assert (loaded["from_files"]["facts"], without["from_files"]["facts"]) == ("snapshot", "store")
        if mode in ("bm25", "hybrid"):
            assert (loaded["from_files"]["terms"], without["from_files"]["terms"]) == ("snapshot", "store")
    assert sorted(p.name for p in Path(f"{store}.index").iterdir()) == files
    assert not Path(f"{store}.index.aside").exists()


def test_a_postgres_store_first_writes_then_loads_this_machines_files(
    capsys, tmp_path, monkeypatch, pg_server
):
    """On Postgres the terms and facts files are this machine's (``$MEMRL_CACHE_DIR/index/``): the first
    process writes them, later ones load them; with an empty cache a process reads the database again."""
    monkeypatch.setenv("MEMRL_CACHE_DIR", str(tmp_path / "cache"))
    url = pg_server.create_database("cold1m")
    query = " ".join(make_corpus(0, 1500, 20_000).texts[700].split()[:4])
    argv = ["--store", url, "--n", "1500", "--cases", "loaded,without", "--repeats", "1", "--query", query,
            "--warm", "3"]  # fmt: skip
    cold_1m.main(argv)  # builds the store: the building process's searches and close write the files
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert "build" in out and "primed_first_ms" not in out and out["index_mb"] > 0
    shutil.rmtree(tmp_path / "cache")  # another machine's cache: its first process writes its own
    cold_1m.main(argv)
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert "build" not in out and set(out["primed_first_ms"]) == set(cold_1m.MODES) and out["index_mb"] > 0
    files = sorted(p.name for p in cold_1m.index_dir(url).iterdir())
    assert len(files) == 2 and cold_1m.index_dir(url).is_relative_to(tmp_path / "cache")  # facts and terms
    for mode in cold_1m.MODES:
        row = out[mode]
        assert row["same_results"] and row["hits"] > 0, mode
        loaded, without = row["loaded"], row["without"]
        if mode != "dense":
            assert (loaded["from_files"]["facts"], without["from_files"]["facts"]) == ("snapshot", "store")
        if mode in ("bm25", "hybrid"):
            assert (loaded["from_files"]["terms"], without["from_files"]["terms"]) == ("snapshot", "store")
    assert sorted(p.name for p in cold_1m.index_dir(url).iterdir()) == files
    cold_1m.main(argv)  # a second run finds the files: nothing to prime
    assert "primed_first_ms" not in json.loads(capsys.readouterr().out.strip().splitlines()[-1])
