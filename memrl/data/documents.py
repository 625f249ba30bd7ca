"""Questions over documents (HotpotQA, RULER-HotpotQA) as :class:`Conversation` records, so every builder,
reader and metric of memrl runs on them unchanged.

A long context in MemAgent's format is documents ``"Document {i}:\\n{title}\\n{text}"`` joined by blank
lines. :func:`parse_context` splits it back into :class:`Document` records and :func:`document_conversation`
turns a question over them into a conversation:

- one session per document, in context order (``Session.id`` = the document's title, no date);
- one turn per sentence (or per line, for documents made of lines), turn ids ``"D{doc}:{n}"``, the
  speaker being the title (so a stored sentence reads ``"Title: sentence"``);
- one question whose evidence is the gold documents' titles: a retrieved sentence counts for its
  document (:meth:`Conversation.covered`), so evidence recall is the share of gold documents found;
- ``metadata["context"]`` keeps the exact context, which MemAgent reads chunk by chunk
  (:func:`context_of`), and ``metadata["kind"] = "documents"``.

    docs = parse_context(record["context"])
    conv = document_conversation("q1", "Who ...?", ["Ana"], docs, gold_titles=("Ana Lopez",), source="ruler-hotpotqa")
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from memrl.data.types import Conversation, Question, Session, Turn
from memrl.errors import ConfigError

__all__ = [
    "Document",
    "DocumentPadder",
    "approx_tokens",
    "context_of",
    "document_conversation",
    "format_document",
    "is_documents",
    "parse_context",
    "render_context",
    "split_units",
]

_HEADER = re.compile(r"^Document (\d+):\n", re.MULTILINE)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[]?[A-Z0-9])")


TokenCounter = Callable[[str], int]


def approx_tokens(text: str) -> int:
    """A tokenizer-free length estimate: whitespace-separated words x 1.3, rounded up."""
    return math.ceil(len(text.split()) * 1.3)


@dataclass(frozen=True)
class Document:
    """One document of a context: a title and its text."""

    title: str
    text: str


def format_document(number: int, title: str, text: str) -> str:
    """One document of a RULER-HotpotQA context, numbered from 1 (MemAgent's format)."""
    return f"Document {number}:\n{title}\n{text}"


def render_context(documents: Sequence[Document]) -> str:
    """The documents as one context, numbered from 1 and joined by blank lines."""
    return "\n\n".join(format_document(k, d.title, d.text) for k, d in enumerate(documents, 1))


def parse_context(context: str) -> list[Document]:
    """Split a MemAgent context back into documents.

    A context without ``Document N:`` headers becomes one untitled document per blank-line paragraph
    (titled ``"Passage N"``), so any long text can still be stored and searched."""
    heads = list(_HEADER.finditer(context))
    if not heads:
        parts = [p.strip() for p in re.split(r"\n\s*\n", context) if p.strip()]
        return [Document(f"Passage {k}", p) for k, p in enumerate(parts, 1)]
    docs = []
    for i, m in enumerate(heads):
        end = heads[i + 1].start() if i + 1 < len(heads) else len(context)
        body = context[m.end() : end].strip("\n")
        title, _, text = body.partition("\n")
        docs.append(Document(title.strip(), text.strip()))
    return docs


def _draw(rng: random.Random, size: int) -> Iterator[int]:
    """Distinct random indices in ``range(size)``: rejection sampling, then a shuffle of the rest."""
    seen: set[int] = set()
    while len(seen) < size // 2:
        i = rng.randrange(size)
        if i not in seen:
            seen.add(i)
            yield i
    rest = [i for i in range(size) if i not in seen]
    rng.shuffle(rest)
    yield from rest


class DocumentPadder:
    """Hides gold documents among distractors drawn from a pool, up to a length (RULER's recipe).

    ``pool`` maps title to text (the first text of a title wins). :meth:`pad` is deterministic given
    its ``seed`` string, and does not depend on what else was padded before."""

    def __init__(self, pool: dict[str, str], *, count_tokens: TokenCounter = approx_tokens) -> None:
        self.pool = pool
        self.titles = list(pool)
        self.count_tokens = count_tokens
        self._costs: dict[str, int] = {}

    def cost(self, title: str, text: str | None = None) -> int:
        """Tokens of one formatted document (numbered with the widest number the pool can need)."""
        if text is not None:
            return self.count_tokens(format_document(len(self.titles), title, text))
        if title not in self._costs:
            self._costs[title] = self.cost(title, self.pool[title])
        return self._costs[title]

    def pad(
        self,
        gold: Sequence[Document],
        *,
        target_tokens: int | None = None,
        num_docs: int | None = None,
        seed: str = "0",
        exclude: Iterable[str] = (),
    ) -> list[Document]:
        """``gold`` plus distinct distractors (never a gold or ``exclude`` title), shuffled.

        Distractors are added until the next one would pass ``target_tokens``, or until there are
        ``num_docs`` documents (one limit at least); the rendered context is re-measured and trimmed if
        per-document counts underestimated it. Gold documents are always kept."""
        if target_tokens is None and num_docs is None:
            raise ConfigError("give target_tokens, num_docs or both to say how long each context should be")
        if target_tokens is not None and target_tokens <= 0:
            raise ConfigError(f"target_tokens must be positive, got {target_tokens}")
        if num_docs is not None and num_docs <= 0:
            raise ConfigError(f"num_docs must be positive, got {num_docs}")
        skip = {d.title for d in gold} | set(exclude)
        rng = random.Random(seed)
        chosen: list[Document] = []
        used = sum(self.cost(d.title, d.text) for d in gold)
        for i in _draw(rng, len(self.titles)):
            if num_docs is not None and len(gold) + len(chosen) >= num_docs:
                break
            title = self.titles[i]
            if title in skip:
                continue
            if target_tokens is not None and used + self.cost(title) > target_tokens:
                break
            used += self.cost(title)
            chosen.append(Document(title, self.pool[title]))
        while True:
            docs = [*gold, *chosen]
            random.Random(f"{seed}:order").shuffle(docs)
            excess = 0 if target_tokens is None else self.count_tokens(render_context(docs)) - target_tokens
            if excess <= 0 or not chosen:
                return docs
            while excess > 0 and chosen:
                excess -= self.cost(chosen.pop().title)


def split_units(text: str) -> list[str]:
    """The stored units of a document: its lines if it has several, else its sentences."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if len(lines) > 1:
        return lines
    sentences = [s.strip() for s in _SENTENCE_END.split(text.strip()) if s.strip()]
    return sentences or [text.strip()]


def document_conversation(
    qid: str,
    question: str,
    answers: Sequence[str],
    documents: Sequence[Document],
    *,
    gold_titles: Sequence[str] = (),
    source: str,
    category: str = "all",
    context: str | None = None,
    metadata: dict[str, Any] | None = None,
) -> Conversation:
    """A one-question conversation over ``documents`` (see the module docstring).

    Gold titles that name no document are dropped from the evidence (callers count them)."""
    sessions = []
    for k, doc in enumerate(documents, 1):
        turns = tuple(
            Turn(f"D{k}:{n}", doc.title, unit, session=k, index=n)
            for n, unit in enumerate(split_units(doc.text) if doc.text else [doc.title], 1)
        )
        sessions.append(Session(k, None, None, turns, id=doc.title))
    index = {s.id: s.index for s in sessions}
    gold = tuple(t for t in dict.fromkeys(gold_titles) if t in index)
    q = Question(
        id=qid,
        question=question,
        answers=tuple(answers),
        category=category,
        category_id=None,
        evidence=gold,
        evidence_sessions=tuple(sorted(index[t] for t in gold)),
    )
    meta = {
        "kind": "documents",
        "context": context if context is not None else render_context(documents),
        **(metadata or {}),
    }
    return Conversation(qid, (), tuple(sessions), (q,), source, meta)


def is_documents(conversation: Conversation) -> bool:
    """True for a conversation made of documents (HotpotQA, RULER-HotpotQA, ...)."""
    return conversation.metadata.get("kind") == "documents"


def context_of(conversation: Conversation) -> str | None:
    """The exact long context of a documents conversation (``None`` for a dialogue)."""
    return conversation.metadata.get("context") if is_documents(conversation) else None
