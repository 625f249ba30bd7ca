"""locomo-audit (dial481/locomo-audit): corrections to LoCoMo's answer key and the judge stress sets.

The audit names questions ``locomo_{conversation index}_qa{index in the file's qa list}`` (category 5
counted in the index, as memrl's ``{sample_id}:q{i}`` ids count it), so a question id maps onto memrl's
given the conversations' order in ``locomo10.json`` (:func:`memrl_id`).

- ``errors.json`` (:func:`load_corrections`): 156 issues over the 1,540 questions of categories 1-4. The
  99 whose ``error_type`` is not ``WRONG_CITATION`` change the gold answer to ``correct_answer``; every
  issue may change the evidence to ``correct_evidence``. A ``WRONG_CITATION`` issue keeps the gold answer
  (its ``correct_answer`` sometimes carries a note, "December 2022 (answer is correct, citation is wrong)").
- ``ap_v1_specific_wrong.json`` / ``ap_v2_vague_wrong.json`` (:func:`load_stress_set`): for each of the
  1,540 questions an answer written to be wrong (specific, or vague but on topic), to measure how often
  a judge accepts a wrong answer.

Every entry is checked against the loaded question (same text), so a shifted index fails loudly.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memrl.data.locomo import LOCOMO_CATEGORIES, parse_evidence_id
from memrl.errors import DataError

ERRORS_FILE = "locomo-audit/errors.json"
STRESS_FILES = {"specific": "locomo-audit/ap_v1_specific_wrong.json",
                "vague": "locomo-audit/ap_v2_vague_wrong.json"}  # fmt: skip

_AUDIT_ID = re.compile(r"locomo_(\d+)_qa(\d+)")


def memrl_id(audit_id: str, sample_ids: Sequence[str]) -> str:
    """``locomo_0_qa3`` -> ``conv-26:q3`` given the sample ids in file order."""
    m = _AUDIT_ID.fullmatch(audit_id)
    if m is None or int(m[1]) >= len(sample_ids):
        raise DataError(f"locomo-audit question id {audit_id!r} names no conversation of the LoCoMo file")
    return f"{sample_ids[int(m[1])]}:q{int(m[2])}"


@dataclass(frozen=True)
class Correction:
    """One audited question: the gold answer and evidence to use instead of the original ones."""

    question_id: str  # memrl's
    audit_id: str
    error_type: str
    original_answer: str
    answer: str  # the corrected gold answer (the original for WRONG_CITATION)
    original_evidence: tuple[str, ...]
    evidence: tuple[str, ...]

    @property
    def changes_answer(self) -> bool:
        return self.error_type != "WRONG_CITATION"

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _read(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise DataError(f"{path} not found (locomo-audit's files, from dial481/locomo-audit)") from None
    except json.JSONDecodeError as e:
        raise DataError(f"{path}: not JSON ({e})") from None


def _ids(raw: Any) -> tuple[str, ...]:
    return tuple(dict.fromkeys(i for e in (raw or []) for i in parse_evidence_id(e)[0]))


def load_corrections(
    path: str | Path, sample_ids: Sequence[str], questions: Mapping[str, str] | None = None
) -> dict[str, Correction]:
    """memrl question id -> :class:`Correction`, from ``errors.json``. ``questions`` (memrl id ->
    question text) checks each entry names the question it says."""
    path = Path(path)
    data = _read(path)
    if not isinstance(data, list):
        raise DataError(f"{path}: expected a list of issues")
    out: dict[str, Correction] = {}
    for i, e in enumerate(data):
        try:
            qid = memrl_id(e["question_id"], sample_ids)
            _check(path, qid, e["question"], questions)
            error_type = str(e["error_type"])
            gold = str(e["golden_answer"])
            out[qid] = Correction(qid, e["question_id"], error_type, gold,
                                  gold if error_type == "WRONG_CITATION" else str(e["correct_answer"]),
                                  _ids(e.get("cited_evidence")), _ids(e.get("correct_evidence")))  # fmt: skip
        except (KeyError, TypeError) as err:
            raise DataError(f"{path}: issue [{i}] lacks a field ({err})") from None
    return out


@dataclass(frozen=True)
class StressItem:
    """One question of a stress set with its known-wrong answer."""

    question_id: str  # memrl's
    audit_id: str
    question: str
    gold: str
    answer: str
    category_id: int

    @property
    def category(self) -> str:
        return LOCOMO_CATEGORIES[self.category_id]


def load_stress_set(
    path: str | Path, sample_ids: Sequence[str], questions: Mapping[str, str] | None = None
) -> list[StressItem]:
    """The items of one stress set (``detailed_results`` of every conversation, in file order)."""
    path = Path(path)
    data = _read(path)
    groups = data.get("detailed_results") if isinstance(data, dict) else None
    if not isinstance(groups, dict):
        raise DataError(f"{path}: expected an object with 'detailed_results'")
    out = []
    for rows in groups.values():
        for r in rows:
            try:
                qid = memrl_id(r["question_id"], sample_ids)
                _check(path, qid, r["question"], questions)
                out.append(StressItem(qid, r["question_id"], r["question"], str(r["golden_answer"]),
                                      str(r["generated_answer"]), int(r["category"])))  # fmt: skip
            except (KeyError, TypeError, ValueError) as err:
                raise DataError(f"{path}: item {r.get('question_id')!r} is malformed ({err})") from None
    return out


def _check(path: Path, qid: str, text: str, questions: Mapping[str, str] | None) -> None:
    if questions is not None and qid in questions and questions[qid].strip() != str(text).strip():
        raise DataError(
            f"{path}: {qid} is {questions[qid]!r} in the LoCoMo file but {text!r} in the audit: "
            "not the same LoCoMo file (locomo10.json at snap-research/LoCoMo 3eb6f2c)"
        )
