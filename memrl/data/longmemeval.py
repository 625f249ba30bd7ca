"""LongMemEval loader (``longmemeval_oracle.json``, ``_s.json``, ``_m.json``) to :class:`Conversation`.

Each LongMemEval instance is one question over its own haystack of chat sessions, so each becomes a
conversation with a single question (REFERENCE.md section 4):

- sessions from ``haystack_sessions`` in file order, dated from ``haystack_dates``
  (``"2023/05/20 (Sat) 02:21"``), ``Session.id`` = the haystack session id;
- turns ``"S{session}:{index}"`` (1-based) with speaker ``"user"``/``"assistant"`` from ``role``;
- evidence = the ids of turns marked ``has_answer``; evidence sessions from ``answer_session_ids``;
- ``question_type`` is the category; ids ending in ``_abs`` are abstention questions (``answerable=False``).
- answers are text; LongMemEval's counting questions have integer answers (``"answer": 3``), which are
  read as text (``"3"``) and counted in ``report.stats["answers_numeric"]``, not as problems; any other
  kind of answer (list, object, boolean) is the problem ``answers_not_text``.

MemBuilder's 50 SFT / 50 RL / 400 test question ids are :data:`MEMBUILDER_LONGMEMEVAL_SPLIT`.
Print the load report with
``python -c "from memrl.data import load_longmemeval as f; print(f('longmemeval_oracle.json').report)"``.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from memrl.data._parse import Where, as_text, parse_date, read_json
from memrl.data.splits import MEMBUILDER_LONGMEMEVAL_SPLIT
from memrl.data.types import Conversation, LoadReport, LoadResult, Question, Session, Turn

__all__ = ["LONGMEMEVAL_QUESTION_TYPES", "MEMBUILDER_LONGMEMEVAL_SPLIT", "load_longmemeval"]

#: The question types of LongMemEval (its ``question_type`` values).
LONGMEMEVAL_QUESTION_TYPES: tuple[str, ...] = (
    "single-session-user",
    "single-session-assistant",
    "single-session-preference",
    "multi-session",
    "knowledge-update",
    "temporal-reasoning",
)

_ROLES = ("user", "assistant")


def load_longmemeval(path: str | Path, *, question_ids: Iterable[str] | None = None) -> LoadResult:
    """Load a LongMemEval file. Returns ``LoadResult(records=list[Conversation], report)``.

    ``question_ids`` keeps only those questions (e.g. one part of :data:`MEMBUILDER_LONGMEMEVAL_SPLIT`);
    the others are still validated. Malformed structure raises :class:`~memrl.errors.DataError`.
    """
    path = Path(path)
    wanted = None if question_ids is None else set(question_ids)
    data = read_json(path, hint="run `memrl data download longmemeval`")
    where = Where(path)
    where.expect(data, list, "the top level")
    report = LoadReport(source=str(path))
    conversations = []
    seen: set[str] = set()
    numeric = 0  # selected questions whose answer is a number
    for n, entry in enumerate(data):
        conv = _load_entry(entry, where, n, report)
        if conv.id in seen:
            raise where.error(f"duplicate question_id {conv.id!r}")
        seen.add(conv.id)
        if wanted is None or conv.id in wanted:
            conversations.append(conv)
            numeric += _is_number(entry["answer"])
    if wanted is not None:
        missing = wanted - seen
        if missing:
            report.problem("selected_ids_not_found", ", ".join(sorted(missing)[:10]), n=len(missing))
    for conv in conversations:
        report.categories[conv.questions[0].category] += 1
    report.stats.update(
        conversations=len(conversations),
        sessions=sum(len(c.sessions) for c in conversations),
        turns=sum(len(s.turns) for c in conversations for s in c.sessions),
        questions=len(conversations),
        abstention=sum(not c.questions[0].answerable for c in conversations),
        answers_numeric=numeric,
    )
    return LoadResult(conversations, report)


def _is_number(value: Any) -> bool:
    """An int or float answer (``True`` is an int to Python, but not an answer LongMemEval gives)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _load_entry(entry: Any, top: Where, n: int, report: LoadReport) -> Conversation:
    (top / f"[{n}]").expect(entry, dict, "record")
    qid = (top / f"[{n}]").require(entry, "question_id", str)
    where = top / f"question {qid!r}"
    qtype = where.require(entry, "question_type", str)
    text = where.require(entry, "question", str)
    answer = where.require(entry, "answer")
    if answer is None:
        raise where.error("field 'answer' is null")
    session_ids = where.require(entry, "haystack_session_ids", list)
    dates = where.require(entry, "haystack_dates", list)
    raw_sessions = where.require(entry, "haystack_sessions", list)
    if not len(session_ids) == len(dates) == len(raw_sessions):
        raise where.error(
            f"haystack_session_ids ({len(session_ids)}), haystack_dates ({len(dates)}) and "
            f"haystack_sessions ({len(raw_sessions)}) differ in length"
        )
    answer_ids = entry.get("answer_session_ids") or []
    where.expect(answer_ids, list, "field 'answer_session_ids'")

    sessions: list[Session] = []
    evidence: list[str] = []
    for i, (sid, date_text, raw_turns) in enumerate(zip(session_ids, dates, raw_sessions, strict=True), 1):
        w = where / f"haystack_sessions[{i - 1}]"
        w.expect(raw_turns, list, "session")
        date = parse_date(date_text) if isinstance(date_text, str) else None
        if date is None:
            report.problem("session_dates_unparsed", f"{qid} session {sid!r}: {date_text!r}")
        turns = []
        for j, raw in enumerate(raw_turns, 1):
            tw = w / f"[{j - 1}]"
            role = tw.require(raw, "role", str)
            if role not in _ROLES:
                raise tw.error(f"field 'role' is {role!r}; expected 'user' or 'assistant'")
            turn = Turn(f"S{i}:{j}", role, tw.require(raw, "content", str), session=i, index=j)
            if raw.get("has_answer"):
                evidence.append(turn.id)
            turns.append(turn)
        sessions.append(
            Session(i, date, date_text if isinstance(date_text, str) else None, tuple(turns), str(sid))
        )

    index_of = {s.id: s.index for s in sessions}
    evidence_sessions = set()
    for sid in answer_ids:
        if str(sid) in index_of:
            evidence_sessions.add(index_of[str(sid)])
        else:
            report.problem("evidence_dangling", f"{qid}: answer session {sid!r} not in the haystack")
    answerable = not qid.endswith("_abs")
    if not evidence and answerable:
        report.problem("questions_without_evidence", f"{qid}: no turn has has_answer")
    question_date_text = entry.get("question_date")
    question_date = parse_date(question_date_text) if isinstance(question_date_text, str) else None
    if question_date_text is not None and question_date is None:
        report.problem("question_dates_unparsed", f"{qid}: {question_date_text!r}")
    if not isinstance(answer, str) and not _is_number(answer):  # integers are answers (counting questions)
        report.problem("answers_not_text", f"{qid}: {answer!r} read as {as_text(answer)!r}")
    question = Question(
        id=qid,
        question=text,
        answers=(as_text(answer),),
        category=qtype,
        category_id=None,
        evidence=tuple(evidence),
        evidence_sessions=tuple(sorted(evidence_sessions)),
        question_date=question_date,
        answerable=answerable,
    )
    metadata = {
        "question_date": question_date_text,
        "answer_session_ids": [str(s) for s in answer_ids],
    }
    return Conversation(qid, _ROLES, tuple(sessions), (question,), "longmemeval", metadata)
