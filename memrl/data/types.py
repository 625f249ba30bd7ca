"""One data model for every benchmark: conversations of sessions of turns, with questions about them.

LoCoMo, LongMemEval and PerLTQA are all loaded into :class:`Conversation` (a LongMemEval question is a
conversation of its haystack sessions with a single question); RULER-HotpotQA records are
:class:`LongDocQuestion`. Loaders also return a :class:`LoadReport` that counts what was wrong with the
input (malformed or dangling evidence ids, skipped questions, ...) so callers can print it; data
problems that can be worked around are counted, never fatal.

All records are frozen dataclasses with ``to_dict``/``from_dict`` (datetimes as ISO-8601 strings), so a
loaded data set can be cached as JSON and read back unchanged.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property
from typing import Any, NamedTuple


def _dt_to_str(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def _dt_from_str(value: str | None) -> datetime | None:
    return None if value in (None, "") else datetime.fromisoformat(value)


@dataclass(frozen=True)
class Turn:
    """One utterance. ``id`` is the data set's turn id (LoCoMo ``"D1:3"``) or a synthesised ``"S1:3"``.

    ``session`` and ``index`` are 1-based (session number, position within the session), like the
    numbers in a LoCoMo id. ``image_caption`` is LoCoMo's BLIP caption of a shared photo.
    """

    id: str
    speaker: str
    text: str
    session: int
    index: int
    image_caption: str | None = None

    def render(self, *, speaker: bool = True) -> str:
        """The turn as one line of text, mentioning a shared image the way LoCoMo's scripts do."""
        text = self.text
        if self.image_caption:
            text = f"{text} [shares {self.image_caption}]"
        return f"{self.speaker}: {text}" if speaker else text

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "speaker": self.speaker,
            "text": self.text,
            "session": self.session,
            "index": self.index,
            "image_caption": self.image_caption,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Turn:
        return cls(
            id=str(d["id"]),
            speaker=str(d["speaker"]),
            text=str(d["text"]),
            session=int(d["session"]),
            index=int(d["index"]),
            image_caption=d.get("image_caption"),
        )


@dataclass(frozen=True)
class Session:
    """A dated block of turns. ``date_text`` keeps the original string; ``date`` is ``None`` if unparsable."""

    index: int
    date: datetime | None
    date_text: str | None
    turns: tuple[Turn, ...]
    id: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "date": _dt_to_str(self.date),
            "date_text": self.date_text,
            "turns": [t.to_dict() for t in self.turns],
            "id": self.id,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Session:
        return cls(
            index=int(d["index"]),
            date=_dt_from_str(d.get("date")),
            date_text=d.get("date_text"),
            turns=tuple(Turn.from_dict(t) for t in d.get("turns") or ()),
            id=d.get("id"),
        )


@dataclass(frozen=True)
class Question:
    """A question about a conversation, with its gold answers and the evidence that supports them.

    ``evidence`` holds turn ids for LoCoMo and LongMemEval, memory ids (dialogue/event/relationship ids,
    or ``"profile:<field>"``) for PerLTQA. ``evidence_sessions`` are the 1-based session numbers the
    evidence lies in. ``answerable=False`` marks questions whose correct reply is that the conversation
    does not say (LoCoMo category 5, LongMemEval ``_abs``).
    """

    id: str
    question: str
    answers: tuple[str, ...]
    category: str
    category_id: int | None
    evidence: tuple[str, ...]
    evidence_sessions: tuple[int, ...]
    question_date: datetime | None = None
    adversarial_answer: str | None = None
    answerable: bool = True

    @property
    def answer(self) -> str:
        """The first gold answer (most data sets have exactly one)."""
        return self.answers[0] if self.answers else ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "question": self.question,
            "answers": list(self.answers),
            "category": self.category,
            "category_id": self.category_id,
            "evidence": list(self.evidence),
            "evidence_sessions": list(self.evidence_sessions),
            "question_date": _dt_to_str(self.question_date),
            "adversarial_answer": self.adversarial_answer,
            "answerable": self.answerable,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Question:
        return cls(
            id=str(d["id"]),
            question=str(d["question"]),
            answers=tuple(str(a) for a in d.get("answers") or ()),
            category=str(d["category"]),
            category_id=None if d.get("category_id") is None else int(d["category_id"]),
            evidence=tuple(d.get("evidence") or ()),
            evidence_sessions=tuple(int(s) for s in d.get("evidence_sessions") or ()),
            question_date=_dt_from_str(d.get("question_date")),
            adversarial_answer=d.get("adversarial_answer"),
            answerable=bool(d.get("answerable", True)),
        )


@dataclass(frozen=True)
class MemoryRecord:
    """A memory a data set gives besides the dialogues (PerLTQA's profile, relationships and events).

    ``id`` is the data set's memory id, which questions cite as evidence (``"1_0_0"``, ``"1_2"``,
    ``"profile:Gender"``); ``type`` is the memory type a store keeps it as (``"semantic"`` for profile
    fields and relationships, ``"episodic"`` for events); ``kind`` says where it came from.
    """

    id: str
    type: str
    kind: str
    text: str
    date: datetime | None = None
    date_text: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": self.type,
            "kind": self.kind,
            "text": self.text,
            "date": _dt_to_str(self.date),
            "date_text": self.date_text,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> MemoryRecord:
        return cls(
            id=str(d["id"]),
            type=str(d["type"]),
            kind=str(d.get("kind", "")),
            text=str(d["text"]),
            date=_dt_from_str(d.get("date")),
            date_text=d.get("date_text"),
        )


@dataclass(frozen=True)
class Conversation:
    """A multi-session conversation and the questions asked about it.

    ``source`` names the data set (``"locomo"``, ``"longmemeval"``, ``"perltqa"``, ``"sample"``);
    ``metadata`` carries data-set specific extras as plain JSON (LoCoMo's ``observation``,
    ``session_summary`` and ``event_summary``; PerLTQA's profile and events; ...). It is excluded from
    hashing, so a conversation can still be used as a dict key. ``memories`` are what a data set gives
    besides the sessions (PerLTQA's profile, relationships and events as :class:`MemoryRecord`); the
    ``raw`` builder stores them next to the turns, and questions may cite their ids as evidence.
    """

    id: str
    speakers: tuple[str, ...]
    sessions: tuple[Session, ...]
    questions: tuple[Question, ...]
    source: str
    metadata: dict[str, Any] = field(default_factory=dict, hash=False)
    memories: tuple[MemoryRecord, ...] = ()

    def turns(self) -> list[Turn]:
        """All turns, session by session, in order."""
        return [t for s in self.sessions for t in s.turns]

    def turn_by_id(self) -> Mapping[str, Turn]:
        """A mapping from turn id to turn (built once, then cached)."""
        return self._turn_index

    @cached_property
    def _turn_index(self) -> dict[str, Turn]:
        return {t.id: t for t in self.turns()}

    def session(self, index: int) -> Session:
        """The session with this 1-based index (``KeyError`` if there is none)."""
        for s in self.sessions:
            if s.index == index:
                return s
        raise KeyError(f"conversation {self.id!r} has no session {index}")

    def unit_of(self, evidence_id: str) -> str | None:
        """The id of the session (``Session.id``) a turn id belongs to, if the session has one.

        Evidence may cite a whole session by its id (a PerLTQA dialogue, a HotpotQA document): a
        retrieved turn then also counts for its session (see :meth:`covered`)."""
        turn = self.turn_by_id().get(evidence_id)
        return None if turn is None else self._session_ids.get(turn.session)

    @cached_property
    def _session_ids(self) -> dict[int, str]:
        return {s.index: s.id for s in self.sessions if s.id}

    def covered(self, retrieved_ids: Sequence[str]) -> list[str]:
        """The evidence ids that ``retrieved_ids`` account for, in order: each id, then its session's id."""
        out: dict[str, None] = {}
        for r in retrieved_ids:
            out[r] = None
            unit = self.unit_of(r)
            if unit is not None:
                out[unit] = None
        return list(out)

    def session_of(self, evidence_id: str) -> int | None:
        """The 1-based session a turn id, or a session id, lies in (``None`` for other memory ids)."""
        turn = self.turn_by_id().get(evidence_id)
        if turn is not None:
            return turn.session
        return self._session_index.get(evidence_id)

    @cached_property
    def _session_index(self) -> dict[str, int]:
        return {s.id: s.index for s in self.sessions if s.id}

    def evidence_turns(self, question: Question) -> list[Turn]:
        """The turns a question's evidence names (ids that are not turns, e.g. PerLTQA's, are skipped)."""
        index = self.turn_by_id()
        return [index[e] for e in question.evidence if e in index]

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "speakers": list(self.speakers),
            "sessions": [s.to_dict() for s in self.sessions],
            "questions": [q.to_dict() for q in self.questions],
            "source": self.source,
            "metadata": self.metadata,
            "memories": [m.to_dict() for m in self.memories],
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Conversation:
        return cls(
            id=str(d["id"]),
            speakers=tuple(d.get("speakers") or ()),
            sessions=tuple(Session.from_dict(s) for s in d.get("sessions") or ()),
            questions=tuple(Question.from_dict(q) for q in d.get("questions") or ()),
            source=str(d.get("source", "")),
            metadata=dict(d.get("metadata") or {}),
            memories=tuple(MemoryRecord.from_dict(m) for m in d.get("memories") or ()),
        )


@dataclass(frozen=True)
class LongDocQuestion:
    """A question over one long document (RULER-HotpotQA): gold documents hidden among distractors."""

    id: str
    question: str
    answers: tuple[str, ...]
    context: str
    num_docs: int
    gold_titles: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "question": self.question,
            "answers": list(self.answers),
            "context": self.context,
            "num_docs": self.num_docs,
            "gold_titles": list(self.gold_titles),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> LongDocQuestion:
        return cls(
            id=str(d["id"]),
            question=str(d["question"]),
            answers=tuple(str(a) for a in d.get("answers") or ()),
            context=str(d["context"]),
            num_docs=int(d["num_docs"]),
            gold_titles=tuple(d.get("gold_titles") or ()),
        )


@dataclass
class LoadReport:
    """What a loader found: sizes (``stats``), problems by kind (``problems``) and example notes.

    Problems are counted, never fatal; ``notes`` keeps the first ``max_notes`` descriptions (which
    record, which value) so a user can look them up. ``print(report)`` gives a readable summary.
    """

    source: str
    stats: Counter[str] = field(default_factory=Counter)
    problems: Counter[str] = field(default_factory=Counter)
    categories: Counter[str] = field(default_factory=Counter)
    notes: list[str] = field(default_factory=list)
    max_notes: int = 100

    def problem(self, kind: str, note: str | None = None, n: int = 1) -> None:
        """Count ``n`` problems of ``kind``; keep ``note`` (where and what) while there is room."""
        self.problems[kind] += n
        if note is not None and len(self.notes) < self.max_notes:
            self.notes.append(f"{kind}: {note}")

    @property
    def ok(self) -> bool:
        """True if no problem at all was found."""
        return not any(self.problems.values())

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "stats": dict(self.stats),
            "problems": dict(self.problems),
            "categories": dict(self.categories),
            "notes": list(self.notes),
        }

    def __str__(self) -> str:
        lines = [f"loaded {self.source}"]
        if self.stats:
            lines.append("  " + ", ".join(f"{k}: {v:,}" for k, v in self.stats.items()))
        if self.categories:
            lines.append("  by category: " + ", ".join(f"{k} {v:,}" for k, v in self.categories.items()))
        if self.problems:
            lines.append("  problems: " + ", ".join(f"{k} {v:,}" for k, v in self.problems.items() if v))
        lines.extend(f"    {note}" for note in self.notes)
        return "\n".join(lines)


class LoadResult(NamedTuple):
    """What every loader returns: the records and the report (unpacks as ``records, report``)."""

    records: list[Any]
    report: LoadReport
