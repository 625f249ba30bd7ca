"""bench/research/reward_genomes.py on real LoCoMo with the hashing embedder: a chosen genome against honest on
two draws of items, per reward, with MemUpdate's reward parts; the last line is the JSON of all rows."""

from __future__ import annotations

import json

import pytest

from bench.research import reward_genomes

pytestmark = pytest.mark.data


def _rows(capsys) -> list[dict]:
    lines = capsys.readouterr().out.strip().splitlines()
    last = json.loads(lines[-1])
    assert [json.loads(x) for x in lines[:-1]] == last["rows"]
    return last["rows"]


def test_memupdate_genomes_with_their_parts(locomo_path, capsys):
    reward_genomes.main(["--family", "memupdate", "--genome", '[["squeeze_shown", 1]]', "--genome", '[["honest"]]',
                         "--seeds", "0,1", "--per-category", "1", "--max-tool-calls", "6", "--embedder",
                         "hashing", "--data-path", str(locomo_path)])  # fmt: skip
    rows = _rows(capsys)
    assert [(r["genome"], r["seed"]) for r in rows] == [([["squeeze_shown", 1]], 0), ([["honest"]], 0),
                                                        ([["squeeze_shown", 1]], 1), ([["honest"]], 1)]  # fmt: skip
    for r in rows:
        m = r["memupdate"]
        assert r["items"] == 4 and m["wins"] + m["losses"] <= r["items"] - m["failures"]
        assert set(r["parts"]) == set(reward_genomes.PARTS["memupdate"]) == set(r["honest_parts"])
    honest = [r["memupdate"] for r in rows if r["genome"] == [["honest"]]]
    assert all(m["diff"] == 0 and m["wins"] == m["losses"] == 0 and m["mean"] == m["honest"] for m in honest)


def test_adrpo_genomes_draw_their_decoys_by_seed(locomo_path, capsys):
    reward_genomes.main(["--family", "adrpo", "--genome", '[["guess", "core", 5]]', "--seeds", "0,1",
                         "--sessions", "1", "--embedder", "hashing", "--data-path", str(locomo_path)])  # fmt: skip
    rows = _rows(capsys)
    assert [r["seed"] for r in rows] == [0, 1] and all(r["items"] == 7 for r in rows)
    for r in rows:
        assert set(r) >= {f"adrpo ({t})" for t in ("core", "episodic", "semantic", "procedural")}
        core = r["adrpo (core)"]
        assert core["diff"] == pytest.approx(core["mean"] - core["honest"], abs=1e-3)
        # the task's parts: one session per conversation, its questions and decoys answered
        parts, honest = r["parts"], r["honest_parts"]
        assert set(parts) == set(reward_genomes.PARTS["adrpo"]) and 1 <= parts["questions"] <= 5
        assert parts["questions"] == honest["questions"] and 0 <= honest["correct"] <= honest["questions"]
        assert parts["chance"] == pytest.approx(parts["decoys_correct"])  # one decoy per question
    with pytest.raises(SystemExit):
        reward_genomes.main(["--family", "adrpo", "--genome", "not json"])
