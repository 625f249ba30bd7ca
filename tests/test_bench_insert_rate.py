"""bench/insert_rate.py at a small size on the session's Postgres server: both back-ends store every item,
the rounds alternate, and the JSON line carries each round's rates and their ratio."""

from __future__ import annotations

import json
import statistics

import pytest

from bench import insert_rate


def test_insert_rate_small(capsys, pg_server):
    out = insert_rate.main(["--n", "300", "--batch", "100", "--rounds", "2", "--pg-url", pg_server.url()])
    line = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert line == out and line["n"] == 300 and len(line["rounds"]) == 2
    for row in line["rounds"]:
        for backend in ("sqlite", "postgres"):
            r = row[backend]
            assert r["items_per_s"] == pytest.approx(300 / r["seconds"], rel=0.02)
            assert r["first_bm25_s"] > 0
            assert r["with_first_bm25_items_per_s"] == pytest.approx(
                300 / (r["seconds"] + r["first_bm25_s"]), rel=0.02
            )
        assert row["ratio"] == pytest.approx(
            row["postgres"]["items_per_s"] / row["sqlite"]["items_per_s"], abs=1e-3
        )
        assert row["ratio_with_first_bm25"] == pytest.approx(
            row["postgres"]["with_first_bm25_items_per_s"] / row["sqlite"]["with_first_bm25_items_per_s"],
            abs=1e-3,
        )
    assert line["ratio_median"] == pytest.approx(statistics.median(r["ratio"] for r in line["rounds"]))


def test_insert_rate_refuses_an_unknown_backend():
    with pytest.raises(SystemExit):
        insert_rate.parse_args(["--backends", "sqlite,chroma"])
