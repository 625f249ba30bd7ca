"""One question's verdicts: its scores against the gold answer (and against the corrected one), its
judge's verdicts, and the slim line kept for it in ``verdicts.jsonl``.

``predictions.jsonl`` is the run's append-only log (a resumed run appends a success after a failure);
``verdicts.jsonl`` is written with every report, one line per selected question, in the data set's
order: what ``memrl eval compare`` pairs across runs. A question whose answer failed is there too
(``prediction`` null, ``error`` set), so the official mode can count it wrong.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from memrl.data.types import Conversation, Question
from memrl.scoring.judge import judge_answer
from memrl.scoring.judges import JudgeSpec
from memrl.scoring.metrics import score

VERDICT_KEYS = ("question_id", "conversation", "category", "category_id", "answerable", "prediction", "error",
                "format_error", "f1", "em", "accuracy", "evidence_recall", "judge", "judge_error",
                "judge_name", "corrected")  # fmt: skip


def base_row(conv: Conversation, q: Question) -> dict[str, Any]:
    return {"question_id": q.id, "conversation": conv.id, "category": q.category, "category_id": q.category_id,
            "question": q.question, "answers": list(q.answers), "evidence": list(q.evidence),
            "answerable": q.answerable}  # fmt: skip


def evidence_recall(conv: Conversation, evidence: tuple[str, ...], retrieved: list[str]) -> float | None:
    """Share of the evidence ids the retrieved memories cite (a retrieved turn also covers its session)."""
    if not evidence:
        return None
    hit = set(conv.covered(retrieved)) & set(evidence)
    return len(hit) / len(set(evidence))


def add_scores(row: dict[str, Any], conv: Conversation, q: Question, *, retrieved: list[str] | None) -> None:
    """The official metric of the row's prediction and, when memories were retrieved, evidence recall."""
    row.update(score(conv, q, row["prediction"]))
    if retrieved is not None and q.evidence:
        row["evidence_recall"] = evidence_recall(conv, q.evidence, retrieved)


def corrected_question(conv: Conversation, q: Question, correction: Any) -> Question:
    """``q`` with locomo-audit's gold answer and evidence (evidence ids that name no turn are dropped)."""
    turns = conv.turn_by_id()
    evidence = tuple(e for e in correction.evidence if e in turns)
    sessions = tuple(sorted({turns[e].session for e in evidence}))
    return dataclasses.replace(q, answers=(correction.answer,), evidence=evidence, evidence_sessions=sessions)


def add_corrected(
    row: dict[str, Any], conv: Conversation, q: Question, correction: Any, *, retrieved: list[str] | None
) -> None:
    """``row["corrected"]``: the scores against the corrected gold (``None`` figures when not scored)."""
    cq = corrected_question(conv, q, correction)
    block: dict[str, Any] = {"audited": True, "error_type": correction.error_type,
                             "changed_answer": correction.changes_answer, "answers": list(cq.answers),
                             "evidence": list(cq.evidence)}  # fmt: skip
    if row.get("prediction") is not None:
        block.update(score(conv, cq, row["prediction"]))
        if retrieved is not None:
            block["evidence_recall"] = evidence_recall(conv, cq.evidence, retrieved)
    row["corrected"] = block


async def judge_row(llm: Any, spec: JudgeSpec, row: dict[str, Any]) -> None:
    """Judge the row's prediction against its gold answer, and against the corrected one where the audit
    changed it (otherwise the corrected verdict is the same verdict)."""
    abstention = row.get("answerable") is False

    async def one(gold: str) -> Any:
        return await judge_answer(llm, row["question"], gold, row["prediction"], question_type=row["category"],
                                  judge=spec, abstention=abstention)  # fmt: skip

    j = await one((row["answers"] or [""])[0])
    row.update(judge=j.label, judge_reasoning=j.reasoning, judge_error=j.error, judge_reply=j.reply,
               judge_name=spec.name)  # fmt: skip
    corrected = row.get("corrected")
    if corrected is not None:
        if corrected.get("changed_answer"):
            c = await one(corrected["answers"][0])
            corrected.update(judge=c.label, judge_error=c.error, judge_reply=c.reply)
        else:
            corrected.update(judge=j.label, judge_error=j.error)


def needs_judging(row: dict[str, Any], spec: JudgeSpec) -> bool:
    """An answered row whose judgement failed, or that another judge judged (a resumed run that changed
    ``--judge``)."""
    if row.get("prediction") is None:
        return False
    c = row.get("corrected") or {}
    return bool(row.get("judge_error") or c.get("judge_error")) or row.get("judge_name") != spec.name


def verdict(row: dict[str, Any]) -> dict[str, Any]:
    """The line ``verdicts.jsonl`` keeps for a row."""
    out = {k: row.get(k) for k in VERDICT_KEYS}
    if out["corrected"]:
        out["corrected"] = {k: v for k, v in out["corrected"].items() if k not in ("judge_reply",)}
    return out


def write_verdicts(path: Path, rows: list[dict[str, Any]]) -> None:
    with Path(path).open("w") as f:
        for r in rows:
            f.write(json.dumps(verdict(r), default=str) + "\n")


def read_verdicts(run: str | Path) -> list[dict[str, Any]]:
    """The verdicts of a run folder (or of a ``verdicts.jsonl`` file)."""
    from memrl.errors import ConfigError

    path = Path(run)
    if path.is_dir():
        path = path / "verdicts.jsonl"
    if not path.exists():
        raise ConfigError(f"{path} not found: give a run folder of `memrl eval` (one with verdicts.jsonl)")
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
