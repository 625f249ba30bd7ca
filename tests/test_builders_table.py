"""``bench/builders_table.py``: the builders' table from real ``memrl eval`` runs (scripted answerer)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import builders_table
from memrl.data import load_dataset
from memrl.eval.qa import run_qa_eval
from memrl.eval.qa.config import QAEvalConfig
from memrl.llm import ScriptedLLM

SAMPLE = load_dataset("sample")[0][0]
GOLD = {q.question: q.answer for q in SAMPLE.questions}


def _run(tmp_path: Path, builder: str, right: bool) -> Path:
    def answer(messages, tools, schema):
        q = messages[-1]["content"].split("Question", 1)[1].split(": ", 1)[1].split("\nAnswer:")[0]
        return GOLD[q] if right else "no idea"

    cfg = QAEvalConfig(dataset="sample", builder=builder, embedder="hashing", provider="scripted",
                       output_dir=str(tmp_path / builder), cache=False)  # fmt: skip
    run_qa_eval(cfg, llm=ScriptedLLM(answer), progress=False)
    return cfg.out


def test_the_table_scores_costs_and_paired_differences(tmp_path, capsys):
    raw = _run(tmp_path, "raw", right=False)
    ann = _run(tmp_path, "annotations", right=True)
    out = tmp_path / "table"
    assert (
        builders_table.main([f"raw={raw}", f"annotations={ann}", "--baseline", "raw", "--out", str(out)]) == 0
    )
    table = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert json.loads((out.with_suffix(".json")).read_text()) == table
    by = {t["builder"]: t for t in table}
    assert by["raw"]["overall"]["mean"] == 0 and by["annotations"]["overall"]["mean"] == pytest.approx(1.0)
    assert by["annotations"]["overall"]["n"] == by["raw"]["overall"]["n"] == 10
    assert by["annotations"]["minus_baseline"]["mean"] == pytest.approx(1.0)
    assert "minus_baseline" not in by["raw"]
    assert by["raw"]["build"]["sessions"] == by["annotations"]["build"]["sessions"] == len(SAMPLE.sessions)
    assert by["annotations"]["build"]["llm_calls_per_session"] == 0
    assert by["annotations"]["build"]["actions_applied"] > 0
    turns = sum(len(s.turns) for s in SAMPLE.sessions)
    assert by["raw"]["memory"]["items"] >= turns > by["annotations"]["memory"]["items"] > 0
    md = (out.with_suffix(".md")).read_text()
    assert "| annotations | 10 |" in md and "all minus raw" in md
