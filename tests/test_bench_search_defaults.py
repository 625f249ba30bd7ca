"""bench/search_defaults.py on real data (one LoCoMo conversation and LongMemEval part A) with the hashing
embedder: every setting's margin is its hybrid recall against the better of its own dense and BM25 lists,
the best setting is the one with the largest worst margin, and the last line is the JSON."""

from __future__ import annotations

import json

import pytest

from bench import search_defaults
from tests.conftest import shared_data_dir


def test_search_defaults_on_real_data(capsys):
    data = shared_data_dir()
    if data is None or not (data / search_defaults.LONGMEMEVAL_PART_A).is_file():
        pytest.skip("LoCoMo / LongMemEval part A not found beside the repository")
    search_defaults.main(["--data-dir", str(data), "--embedder", "hashing", "--locomo-conv", "conv-26",
                          "--only", "defaults (", "convex 0.6"])  # fmt: skip
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert set(out["settings"]) == {"defaults (convex 0.4/0.6)", "convex 0.6/0.4"}
    assert out["n_questions"] == {"locomo": 152, "longmemeval": 47}
    for r in out["settings"].values():
        for ds in ("locomo", "longmemeval"):
            m = r[ds]
            assert m["margin"] == pytest.approx(m["hybrid"] - max(m["dense"], m["bm25"]), abs=2e-4)
        assert r["min_margin"] == min(r["locomo"]["margin"], r["longmemeval"]["margin"])
    best = max(out["settings"].values(), key=lambda r: (r["min_margin"], r["mean_hybrid"]))
    assert out["settings"][out["best"]] == best


def test_vary_changes_one_field_of_the_defaults(capsys):
    data = shared_data_dir()
    if data is None or not (data / search_defaults.LONGMEMEVAL_PART_A).is_file():
        pytest.skip("LoCoMo / LongMemEval part A not found beside the repository")
    search_defaults.main(["--data-dir", str(data), "--embedder", "hashing", "--locomo-conv", "conv-26",
                          "--only", "no spreading", "--vary", "spread=0"])  # fmt: skip
    got = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["settings"]
    assert set(got) == {"defaults, no spreading", "defaults, spread 0"}
    assert got["defaults, spread 0"] == got["defaults, no spreading"]  # the same config by either road
    assert search_defaults.parse_vary("strip_speaker=false,true") == [
        ("defaults, strip_speaker false", {"strip_speaker": False}),
        ("defaults, strip_speaker true", {"strip_speaker": True}),
    ]
    assert search_defaults.parse_vary("session_top=4+date_fit=0.15") == [
        ("defaults, session_top 4 + date_fit 0.15", {"session_top": 4, "date_fit": 0.15})
    ]
    for bad in ("no_such_field=1", "spread=", "candidates=many", "session_top=4+nope=1", "session_top=4+"):
        with pytest.raises(Exception, match="--vary"):
            search_defaults.parse_vary(bad)
