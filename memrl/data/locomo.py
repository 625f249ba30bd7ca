"""LoCoMo loader: ``locomo10.json`` (and files in its format, like the bundled sample) to :class:`Conversation`.

Format and quirks (REFERENCE.md section 3): each sample has ``sample_id``, ``conversation`` (speakers,
``session_N`` turn lists, ``session_N_date_time`` strings, sometimes more dates than sessions),
``observation``/``session_summary``/``event_summary`` (kept in ``metadata``) and ``qa``. Categories are
1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop, 5 adversarial. Category 5 has an
``adversarial_answer`` and usually no ``answer``; it is skipped unless ``include_adversarial=True``, and
then the gold answer is :data:`NOT_ANSWERABLE`.

Evidence ids are repaired where the intent is clear and counted in the report, never fatal:

- ``"D8:6; D9:17"`` / ``"D9:1 D4:4"`` -> several ids; ``"D:11:26"`` -> ``D11:26`` (the turn fits the
  question); ``"D30:05"`` -> ``D30:5``: all counted (``evidence_malformed``/``evidence_noncanonical``);
- ``"D"`` names nothing: dropped (``evidence_unrecoverable``);
- an id naming no turn (``D10:19`` in a 16-turn session) is dropped from ``evidence``
  (``evidence_dangling``) but its session, if it exists, stays in ``evidence_sessions``.

Print the load report with
``python -c "from memrl.data import load_locomo; print(load_locomo('locomo10.json').report)"``.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memrl.data._parse import Where, as_text, parse_date, read_json
from memrl.data.splits import LOCOMO_UPDATE_SPLIT
from memrl.data.types import Conversation, LoadReport, LoadResult, Question, Session, Turn

__all__ = [
    "LOCOMO_CATEGORIES",
    "LOCOMO_UPDATE_SPLIT",
    "NOT_ANSWERABLE",
    "Observation",
    "load_locomo",
    "locomo_observations",
    "parse_evidence_id",
]

#: LoCoMo's category numbers, as the official repository defines them.
LOCOMO_CATEGORIES: dict[int, str] = {
    1: "multi-hop",
    2: "temporal",
    3: "open-domain",
    4: "single-hop",
    5: "adversarial",
}

#: Gold answer of category-5 (adversarial) questions when they are included.
NOT_ANSWERABLE = "Not mentioned in the conversation"

_CANONICAL = re.compile(r"D(\d+):(\d+)")
_LOOSE = re.compile(r"D\s*:?\s*(\d+)\s*:\s*(\d+)")
_SESSION_KEY = re.compile(r"session_(\d+)")
_DATE_KEY = re.compile(r"session_(\d+)_date_time")


def parse_evidence_id(raw: Any) -> tuple[tuple[str, ...], bool]:
    """Turn one raw evidence entry into canonical turn ids ``"D<session>:<turn>"``.

    Returns ``(ids, malformed)``: ``malformed`` is True when the entry is not a single ``D<n>:<m>``
    (lists like ``"D8:6; D9:17"``, ``"D:11:26"``, ``"D"``); ``ids`` is empty when nothing is recoverable.
    Leading zeros are dropped (``"D30:05"`` -> ``"D30:5"``).
    """
    text = raw.strip() if isinstance(raw, str) else str(raw)
    if m := _CANONICAL.fullmatch(text):
        return (f"D{int(m[1])}:{int(m[2])}",), False
    return tuple(f"D{int(m[1])}:{int(m[2])}" for m in _LOOSE.finditer(text)), True


@dataclass(frozen=True)
class Observation:
    """One fact from LoCoMo's ``observation`` field (MemUpdate builds the initial memory from these)."""

    session: int
    speaker: str
    text: str
    evidence: tuple[str, ...]


def locomo_observations(conversation: Conversation) -> list[Observation]:
    """The per-session observations of a loaded LoCoMo conversation, in session order.

    Evidence ids go through :func:`parse_evidence_id` (some are comma-separated lists); entries that are
    not ``[text, evidence]`` pairs are skipped.
    """
    raw = conversation.metadata.get("observation") or {}
    numbered = sorted((int(m[1]), key) for key in raw if (m := re.search(r"(\d+)", key)))
    out: list[Observation] = []
    for session, key in numbered:
        per_speaker = raw[key] if isinstance(raw[key], dict) else {}
        for speaker, facts in per_speaker.items():
            for fact in facts if isinstance(facts, list) else ():
                if not (isinstance(fact, list) and len(fact) == 2 and isinstance(fact[0], str)):
                    continue
                entries = fact[1] if isinstance(fact[1], list) else [fact[1]]
                ids = tuple(i for e in entries for i in parse_evidence_id(e)[0])
                out.append(Observation(session, speaker, fact[0], ids))
    return out


def load_locomo(path: str | Path, *, include_adversarial: bool = False, source: str = "locomo") -> LoadResult:
    """Load a LoCoMo-format file. Returns ``LoadResult(records=list[Conversation], report)``.

    Question ids are ``"{sample_id}:q{i}"`` with ``i`` the index in the file's ``qa`` list, so they
    stay the same whether category 5 is included or not. Malformed structure raises
    :class:`~memrl.errors.DataError` naming the file, sample and field.
    """
    path = Path(path)
    data = read_json(path, hint="run `memrl data download locomo`")
    where = Where(path)
    where.expect(data, list, "the top level")
    report = LoadReport(source=str(path))
    conversations = [
        _load_sample(sample, where, i, report, include_adversarial, source) for i, sample in enumerate(data)
    ]
    ids = [c.id for c in conversations]
    if len(set(ids)) != len(ids):
        dup = sorted({i for i in ids if ids.count(i) > 1})
        raise where.error(f"duplicate sample_id {', '.join(map(repr, dup))}")
    adversarial = (
        {"adversarial_kept": report.categories["adversarial"]}
        if include_adversarial
        else {"adversarial_skipped": report.stats["adversarial_skipped"]}
    )
    report.stats = Counter(
        conversations=len(conversations),
        sessions=sum(len(c.sessions) for c in conversations),
        turns=sum(len(s.turns) for c in conversations for s in c.sessions),
        questions=sum(len(c.questions) for c in conversations),
        **adversarial,
    )
    # Categories in LoCoMo's order, not in order of first appearance.
    counts = report.categories.copy()
    report.categories.clear()
    report.categories.update({name: counts[name] for name in LOCOMO_CATEGORIES.values() if counts[name]})
    return LoadResult(conversations, report)


def _load_sample(
    sample: Any, top: Where, n: int, report: LoadReport, include_adversarial: bool, source: str
) -> Conversation:
    (top / f"sample [{n}]").expect(sample, dict, "record")
    sample_id = (top / f"sample [{n}]").require(sample, "sample_id", str)
    where = top / f"sample {sample_id!r}"
    conv = where.require(sample, "conversation", dict)
    speakers = tuple(where.require(conv, key, str) for key in ("speaker_a", "speaker_b"))
    sessions = _load_sessions(conv, where / "conversation", sample_id, report)
    turn_ids = {t.id: t for s in sessions for t in s.turns}
    session_numbers = {s.index for s in sessions}

    questions = []
    for i, qa in enumerate(where.require(sample, "qa", list)):
        # Skipped questions are still validated, but their problems go to a scratch report.
        skip = isinstance(qa, dict) and qa.get("category") == 5 and not include_adversarial
        into = LoadReport(source=report.source) if skip else report
        q = _load_question(qa, where / f"qa[{i}]", f"{sample_id}:q{i}", turn_ids, session_numbers, into)
        if skip:
            report.stats["adversarial_skipped"] += 1
            continue
        report.categories[q.category] += 1
        questions.append(q)

    metadata = {k: sample[k] for k in ("observation", "session_summary", "event_summary") if k in sample}
    return Conversation(sample_id, speakers, tuple(sessions), tuple(questions), source, metadata)


def _load_sessions(conv: dict, where: Where, sample_id: str, report: LoadReport) -> list[Session]:
    numbers = sorted(int(m[1]) for k in conv if (m := _SESSION_KEY.fullmatch(k)))
    dated = {int(m[1]) for k in conv if (m := _DATE_KEY.fullmatch(k))}
    extra = sorted(dated - set(numbers))
    if extra:
        report.problem("session_dates_without_session", f"{sample_id}: sessions {extra}", n=len(extra))
    sessions = []
    seen: set[str] = set()
    for number in numbers:
        key = f"session_{number}"
        raw_turns = where.require(conv, key, list)
        date_text = conv.get(f"{key}_date_time")
        date = parse_date(date_text)
        if date_text is None:
            report.problem("session_dates_missing", f"{sample_id} {key}")
        elif date is None:
            report.problem("session_dates_unparsed", f"{sample_id} {key}: {date_text!r}")
        turns = []
        for j, raw in enumerate(raw_turns):
            w = where / f"{key}[{j}]"
            w.expect(raw, dict, "turn")
            turn_id = w.require(raw, "dia_id", str).strip()
            if turn_id in seen:
                raise w.error(f"duplicate dia_id {turn_id!r}")
            seen.add(turn_id)
            if turn_id != f"D{number}:{j + 1}":
                report.problem("turn_ids_irregular", f"{sample_id} {key}[{j}]: {turn_id!r}")
            caption = raw.get("blip_caption")
            turns.append(
                Turn(
                    id=turn_id,
                    speaker=w.require(raw, "speaker", str),
                    text=w.require(raw, "text", str),
                    session=number,
                    index=j + 1,
                    image_caption=caption if isinstance(caption, str) and caption else None,
                )
            )
        sessions.append(Session(number, date, date_text, tuple(turns), id=key))
    return sessions


def _load_question(
    qa: Any,
    where: Where,
    qid: str,
    turns: dict[str, Turn],
    session_numbers: set[int],
    report: LoadReport,
) -> Question:
    where.expect(qa, dict, "record")
    text = where.require(qa, "question", str)
    category_id = where.require(qa, "category", int)
    if isinstance(category_id, bool) or category_id not in LOCOMO_CATEGORIES:
        raise where.error(f"field 'category' is {category_id!r}; expected 1-5")
    adversarial = qa.get("adversarial_answer")
    adversarial = None if adversarial is None else as_text(adversarial)
    if category_id == 5:
        answers, answerable = (NOT_ANSWERABLE,), False
    else:
        answer = where.require(qa, "answer")
        if answer is None or isinstance(answer, (list, dict)):
            raise where.error(f"field 'answer' should be a string or number, got {answer!r}")
        if not isinstance(answer, str):
            report.problem("answers_not_text", f"{qid}: {answer!r} read as {str(answer)!r}")
        answers, answerable = (as_text(answer),), True
    raw_evidence = qa.get("evidence", [])
    where.expect(raw_evidence, list, "field 'evidence'")

    evidence: list[str] = []
    sessions: set[int] = set()
    for raw in raw_evidence:
        ids, malformed = parse_evidence_id(raw)
        if malformed:
            report.problem("evidence_malformed", f"{qid}: {raw!r} -> {list(ids)}")
            if not ids:
                report.problem("evidence_unrecoverable", f"{qid}: {raw!r} dropped")
        elif ids[0] != raw:
            report.problem("evidence_noncanonical", f"{qid}: {raw!r} -> {ids[0]!r}")
        for turn_id in ids:
            if turn_id in turns:
                if turn_id not in evidence:
                    evidence.append(turn_id)
                sessions.add(turns[turn_id].session)
                continue
            report.problem("evidence_dangling", f"{qid}: {turn_id!r} is not a turn")
            session = int(_CANONICAL.fullmatch(turn_id)[1])  # type: ignore[index]
            if session in session_numbers:
                sessions.add(session)
    if not evidence:
        report.problem("questions_without_evidence", f"{qid}: {text[:60]!r}")
    return Question(
        id=qid,
        question=text,
        answers=answers,
        category=LOCOMO_CATEGORIES[category_id],
        category_id=category_id,
        evidence=tuple(evidence),
        evidence_sessions=tuple(sorted(sessions)),
        adversarial_answer=adversarial,
        answerable=answerable,
    )
