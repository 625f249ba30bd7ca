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
