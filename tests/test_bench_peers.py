"""Smoke run of bench/peers.py at a tiny size: memrl's row always, each peer's where its package is installed
(``pip install 'memrl[peers]'``); the rows' figures must be sane (exact search finds numpy's top 10)."""

from __future__ import annotations

import importlib.util
import json

import pytest

from bench import peers


def rows(capsys, tmp_path, names: str) -> list[dict]:
    peers.main(["--n", "300", "--queries", "8", "--warmup", "1", "--peers", names, "--dir", str(tmp_path)])
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["n"] == 300 and list(tmp_path.iterdir()) == []  # the stores' temp dir is removed
    return out["rows"]


def test_memrls_row_is_sane(capsys, tmp_path):
    (row,) = rows(capsys, tmp_path, "memrl")
    assert row["peer"] == "memrl" and row["n"] == 300
    assert row["dense_recall_at_k"] == 1.0  # exact search below the graph's threshold
    assert row["dense_hit_at_10"] == 1.0 and row["hybrid_hit_at_10"] >= 0.875 and row["text_hit_at_10"] > 0
    for mode in ("dense", "text", "hybrid"):
        assert 0 < row[f"{mode}_p50_ms"] <= row[f"{mode}_p99_ms"]
    assert row["insert_per_s"] > 0 and row["disk_mb"] > 0 and row["cold_hits"] == 10
    assert row["cold_first_dense_ms"] > 0 and row["cold_import_ms"] > 0
    assert 0 < row["rss_data_mb"] <= row["rss_mb"]["now"] <= row["rss_mb"]["peak"]


@pytest.mark.parametrize("name", [p for p in peers.PEERS if p != "memrl"])
def test_a_peers_row_is_sane_or_skipped_with_its_extra(capsys, tmp_path, name):
    (row,) = rows(capsys, tmp_path, name)
    if importlib.util.find_spec(peers.MODULE[name]) is None:
        assert "memrl[peers]" in row["skipped"]
        pytest.skip(f"{name} not installed: pip install 'memrl[peers]'")
    if "skipped" in row:  # installed but unusable here (sqlite-vec without loadable extensions)
        pytest.skip(row["skipped"])
    assert "failed" not in row and "cold_failed" not in row, row
    assert row["dense_recall_at_k"] >= 0.9 and row["dense_hit_at_10"] >= 0.875  # HNSW peers may miss a few
    assert row["insert_per_s"] > 0 and row["disk_mb"] > 0 and row["cold_hits"] == 10


def test_a_timed_out_store_reports_how_far_it_got(capsys):
    """A store that runs past --timeout (chromadb and qdrant's local mode at 1M) still says how many items it
    inserted and at what rate, read from its process's last progress line as TimeoutExpired carries it."""
    import subprocess
    import sys
    import time

    t0 = time.perf_counter() - 40.0  # as if inserting had started 40 s ago
    peers.progress("insert", t0, inserted=6000, of=1_000_000)
    line = capsys.readouterr().err.strip()
    script = f"import sys, time; print({line!r}, file=sys.stderr, flush=True); time.sleep(60)"
    with pytest.raises(subprocess.TimeoutExpired) as exc:
        subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=3)
    row = peers.timed_out("chromadb", 3, peers.last_progress(exc.value.stderr))
    assert row["failed"] == "timed out after 3 s (insert and queries)"
    assert (row["timed_out_in"], row["inserted"], row["of"]) == ("insert", 6000, 1_000_000)
    assert 140 <= row["insert_per_s"] <= 150  # 6,000 in about 40 s
    # past the insert: the rate measured over the whole insert, and the graph's build if it ended
    peers.progress("queries", t0, inserted=10, of=10, insert_per_s=5, build_s=1.5)
    row = peers.timed_out("memrl", 3, peers.last_progress(capsys.readouterr().err))
    assert (row["timed_out_in"], row["insert_per_s"], row["build_s"]) == ("queries", 5, 1.5)
    assert peers.timed_out("qdrant", 3, peers.last_progress(b"no progress yet\n")) == {
        "peer": "qdrant",
        "failed": "timed out after 3 s (insert and queries)",
    }
