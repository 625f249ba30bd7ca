"""Length sweeps (MemAgent's evaluation): the same questions at several context lengths.

``--lengths 7k,14k,28k`` builds, for each length, every question's context by hiding its gold documents
among distractors (:class:`memrl.data.documents.DocumentPadder`), deterministically by seed, and turns
each into a documents conversation (id ``"{question id}@{length}"``, category = the length, so every
per-category table of an evaluation is a table by length). A length is ``7k`` / ``7000`` (tokens, counted
with :func:`memrl.data.documents.approx_tokens`) or ``50docs`` (a number of documents, as MemAgent's
``eval_50.json`` files).

Two sources:

- ``ruler-hotpotqa``: MemAgent's RULER-HotpotQA, from the HotpotQA dev file (distractor setting), or
  MemAgent's published eval files (``{context, input, answers}`` records) read as they are;
- ``ruler-locomo``: the same recipe on LoCoMo (documents = sessions, gold = a question's evidence
  sessions, distractors = sessions of the other conversations). It is *not* MemAgent's benchmark: it is
  a length sweep on real dialogue data, for machines without HotpotQA.

    lengths = parse_lengths("7k,14k")
    convs = ruler_hotpotqa_conversations(examples, lengths, num_questions=16, seed=0)
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from memrl.data.documents import (
    Document,
    DocumentPadder,
    approx_tokens,
    document_conversation,
    parse_context,
    render_context,
)
from memrl.data.types import Conversation, LongDocQuestion
from memrl.errors import ConfigError

__all__ = [
    "Length",
    "length_label",
    "locomo_documents",
    "parse_lengths",
    "ruler_hotpotqa_conversations",
    "ruler_locomo_conversations",
    "ruler_question_conversations",
]

_LENGTH = re.compile(r"^(\d+(?:\.\d+)?)\s*(k|m|docs?)?$", re.IGNORECASE)


@dataclass(frozen=True)
class Length:
    """A target context length: ``tokens`` or ``docs``, with the label it is reported under."""

    label: str
    tokens: int | None = None
    docs: int | None = None


def parse_lengths(spec: str | Sequence[str]) -> list[Length]:
    """``"7k,14k"`` / ``["7k", "50docs"]`` -> lengths; a :class:`ConfigError` names a bad one."""
    items = [spec] if isinstance(spec, str) else list(spec)
    out: list[Length] = []
    for item in (p.strip() for s in items for p in str(s).split(",")):
        if not item:
            continue
        m = _LENGTH.match(item)
        if m is None:
            raise ConfigError(
                f"--lengths: {item!r} is not a length; write tokens (7k, 1.5m, 7000) or documents (50docs)"
            )
        number, unit = float(m[1]), (m[2] or "").lower()
        if unit.startswith("doc"):
            if number != int(number) or number < 1:
                raise ConfigError(f"--lengths: {item!r}: a number of documents is a whole number >= 1")
            out.append(Length(f"{int(number)}docs", docs=int(number)))
            continue
        tokens = int(number * {"k": 1_000, "m": 1_000_000}.get(unit, 1))
        if tokens < 100:
            raise ConfigError(f"--lengths: {item!r} is {tokens} tokens; a context needs at least 100")
        out.append(Length(length_label(tokens), tokens=tokens))
    if not out:
        raise ConfigError("--lengths is empty; give lengths like 7k,14k,28k")
    if len({x.label for x in out}) != len(out):
        raise ConfigError(f"--lengths lists a length twice: {', '.join(x.label for x in out)}")
    return out


def length_label(tokens: float) -> str:
    """7000 -> ``"7k"``, 1750000 -> ``"1.75m"``, 900 -> ``"900"`` (MemAgent's column names, lower-case)."""
    if tokens >= 1_000_000:
        return f"{tokens / 1_000_000:g}m"
    if tokens >= 1_000:
        return f"{round(tokens / 1_000, 1):g}k"
    return str(int(tokens))


def ruler_question_conversations(
    questions: Sequence[LongDocQuestion], label: str, source: str
) -> list[Conversation]:
    """Long-document questions (built, or read from an eval file) as documents conversations."""
    return [
        document_conversation(
            f"{q.id}@{label}",
            q.question,
            q.answers,
            parse_context(q.context),
            gold_titles=q.gold_titles,
            source=source,
            category=label,
            context=q.context,
            metadata={"length": label, "question_id": q.id, "num_docs": q.num_docs},
        )
        for q in questions
    ]


def ruler_hotpotqa_conversations(
    examples: Sequence, lengths: Sequence[Length], *, num_questions: int | None = None, seed: int = 0
) -> list[Conversation]:
    """RULER-HotpotQA at each length from HotpotQA examples (the same questions at every length)."""
    from memrl.data.hotpotqa import build_ruler_hotpotqa

    out: list[Conversation] = []
    for length in lengths:
        built = build_ruler_hotpotqa(
            examples,
            target_tokens=length.tokens,
            num_docs=length.docs,
            num_questions=num_questions,
            seed=seed,
        )
        out += ruler_question_conversations(built, length.label, "ruler-hotpotqa")
    return out


def locomo_documents(conv: Conversation) -> dict[int, Document]:
    """A LoCoMo conversation's sessions as documents (title: conversation, session, date; text: turns)."""
    return {
        s.index: Document(
            f"{conv.id} session {s.index}" + (f", {s.date_text}" if s.date_text else ""),
            "\n".join(t.render() for t in s.turns),
        )
        for s in conv.sessions
    }


def ruler_locomo_conversations(
    convs: Sequence[Conversation],
    lengths: Sequence[Length],
    *,
    num_questions: int | None = None,
    seed: int = 0,
) -> list[Conversation]:
    """A length sweep on LoCoMo (see the module docstring); questions of categories 1-4 in a seeded order.

    Only questions whose evidence lies in known sessions are used; the question keeps its LoCoMo id and
    category in ``metadata`` (``locomo_category``)."""
    docs = {c.id: locomo_documents(c) for c in convs}
    pool = {d.title: d.text for by_session in docs.values() for d in by_session.values()}
    padder = DocumentPadder(pool)
    candidates = [
        (c, q)
        for c in convs
        for q in c.questions
        if q.answerable and q.category_id in (1, 2, 3, 4) and q.evidence_sessions
        and all(s in docs[c.id] for s in q.evidence_sessions)
    ]  # fmt: skip
    random.Random(f"ruler-locomo:{seed}").shuffle(candidates)
    chosen = candidates[:num_questions] if num_questions is not None else candidates
    out: list[Conversation] = []
    for length in lengths:
        for conv, q in chosen:
            gold = [docs[conv.id][s] for s in q.evidence_sessions]
            own = [d.title for d in docs[conv.id].values()]
            padded = padder.pad(gold, target_tokens=length.tokens, num_docs=length.docs, seed=f"{seed}:{q.id}",
                                exclude=own)  # fmt: skip
            out.append(
                document_conversation(
                    f"{q.id}@{length.label}",
                    q.question,
                    q.answers,
                    padded,
                    gold_titles=[d.title for d in gold],
                    source="ruler-locomo",
                    category=length.label,
                    context=render_context(padded),
                    metadata={"length": length.label, "question_id": q.id, "locomo_category": q.category},
                )
            )
    return out


def eval_file_label(path: Path, questions: Sequence[LongDocQuestion]) -> str:
    """The length an eval file is reported under: its mean context length in tokens (``"7k"``)."""
    if not questions:
        return path.stem
    return length_label(sum(approx_tokens(q.context) for q in questions) / len(questions))
