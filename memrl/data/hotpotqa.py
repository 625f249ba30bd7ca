"""HotpotQA (distractor format) loader and the RULER-HotpotQA long-context builder MemAgent evaluates on.

HotpotQA records are ``{_id, question, answer, type, level, supporting_facts: [[title, sent_id]],
context: [[title, [sentences]] x 10]}``. RULER-HotpotQA hides each question's gold paragraphs (the
titles in its supporting facts) among distractor paragraphs drawn from the whole split, each formatted
``"Document {i}:\\n{title}\\n{text}"``, shuffled, until a target length; MemAgent's eval files
(``eval_{num_docs}.json``) hold ``{context, input, answers, num_docs, index}`` records.

    from memrl.data.hotpotqa import load_hotpotqa, build_ruler_hotpotqa, save_ruler_hotpotqa
    examples, report = load_hotpotqa("hotpot_dev_distractor_v1.json")
    questions = build_ruler_hotpotqa(examples, target_tokens=7_000, num_questions=128, seed=0)
    save_ruler_hotpotqa(questions, "ruler_hqa_7k.json")

Lengths are measured with a pluggable token counter (``count_tokens``; default :func:`approx_tokens`,
whitespace words x 1.3); pass ``len(tokenizer.encode(text))`` for a real tokenizer. Building is
deterministic given ``seed``: each question draws its distractors from ``Random(f"{seed}:{id}")``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memrl.data._parse import Where, as_text, read_json, read_json_records, write_json_records
from memrl.data.documents import (
    Document,
    DocumentPadder,
    TokenCounter,
    approx_tokens,
    document_conversation,
    format_document,
    parse_context,
    render_context,
)
from memrl.data.types import Conversation, LoadReport, LoadResult, LongDocQuestion

__all__ = [
    "HotpotQAExample",
    "approx_tokens",
    "build_ruler_hotpotqa",
    "format_document",
    "hotpotqa_conversations",
    "load_hotpotqa",
    "load_ruler_hotpotqa",
    "save_ruler_hotpotqa",
]


@dataclass(frozen=True)
class HotpotQAExample:
    """One HotpotQA question with its ten context paragraphs (two gold, eight distractors)."""

    id: str
    question: str
    answer: str
    type: str | None
    level: str | None
    supporting_facts: tuple[tuple[str, int], ...]
    context: tuple[tuple[str, tuple[str, ...]], ...]

    @property
    def gold_titles(self) -> tuple[str, ...]:
        """Titles of the supporting paragraphs, in order of first mention, without repeats."""
        return tuple(dict.fromkeys(title for title, _ in self.supporting_facts))

    def paragraphs(self) -> list[tuple[str, str]]:
        """``(title, text)`` for each context paragraph (sentences joined as HotpotQA stores them)."""
        return [(title, "".join(sentences).strip()) for title, sentences in self.context]

    def to_dict(self) -> dict[str, Any]:
        return {
            "_id": self.id,
            "question": self.question,
            "answer": self.answer,
            "type": self.type,
            "level": self.level,
            "supporting_facts": [list(f) for f in self.supporting_facts],
            "context": [[title, list(sentences)] for title, sentences in self.context],
        }


def load_hotpotqa(path: str | Path, *, limit: int | None = None) -> LoadResult:
    """Load a HotpotQA distractor-format file. Returns ``LoadResult(records=list[HotpotQAExample], report)``."""
    path = Path(path)
    data = read_json(path, hint="run `memrl data download hotpotqa`")
    where = Where(path)
    where.expect(data, list, "the top level")
    report = LoadReport(source=str(path))
    examples = [_example(raw, where, n, report) for n, raw in enumerate(data[:limit] if limit else data)]
    for ex in examples:
        report.categories[ex.type or "unknown"] += 1
    report.stats.update(questions=len(examples), paragraphs=sum(len(ex.context) for ex in examples))
    return LoadResult(examples, report)


def _example(raw: Any, top: Where, n: int, report: LoadReport) -> HotpotQAExample:
    (top / f"[{n}]").expect(raw, dict, "record")
    qid = str((top / f"[{n}]").require(raw, "_id", (str, int)))
    where = top / f"question {qid!r}"
    context = []
    for i, para in enumerate(where.require(raw, "context", list)):
        w = where / f"context[{i}]"
        if not (isinstance(para, list) and len(para) == 2 and isinstance(para[0], str)):
            raise w.error("should be [title, [sentences]]")
        sentences = w.expect(para[1], list, "sentences")
        context.append((para[0], tuple(str(s) for s in sentences)))
    facts = []
    for i, fact in enumerate(raw.get("supporting_facts") or []):
        if not (isinstance(fact, list) and len(fact) == 2 and isinstance(fact[0], str)):
            raise (where / f"supporting_facts[{i}]").error("should be [title, sentence_index]")
        facts.append((fact[0], int(fact[1])))
    titles = {title for title, _ in context}
    missing = [t for t in dict.fromkeys(t for t, _ in facts) if t not in titles]
    if missing:
        report.problem("supporting_titles_not_in_context", f"{qid}: {missing}", n=len(missing))
    if not facts:
        report.problem("questions_without_supporting_facts", qid)
    answer = where.require(raw, "answer")
    return HotpotQAExample(
        id=qid,
        question=where.require(raw, "question", str),
        answer=as_text(answer),
        type=raw.get("type"),
        level=raw.get("level"),
        supporting_facts=tuple(facts),
        context=tuple(context),
    )


def build_ruler_hotpotqa(
    examples: Sequence[HotpotQAExample],
    *,
    target_tokens: int | None = None,
    num_docs: int | None = None,
    num_questions: int | None = None,
    seed: int = 0,
    count_tokens: TokenCounter = approx_tokens,
) -> list[LongDocQuestion]:
    """Build RULER-HotpotQA questions: gold paragraphs plus distractors from the whole split.

    For each of the first ``num_questions`` examples (all if ``None``): take its gold paragraphs, then
    add distinct paragraphs drawn at random from every paragraph of ``examples`` (by title, gold titles
    excluded) until the next one would push the context past ``target_tokens``, or until the context
    holds ``num_docs`` documents (at least one of the two limits is required). The documents are
    shuffled, numbered from 1 and joined by blank lines (see :func:`memrl.data.documents.pad_documents`).
    Gold paragraphs are always kept, so a target smaller than they are gives just the gold documents.
    """
    pool: dict[str, str] = {}
    for ex in examples:
        for title, text in ex.paragraphs():
            pool.setdefault(title, text)
    padder = DocumentPadder(pool, count_tokens=count_tokens)
    out = []
    for ex in examples[:num_questions] if num_questions is not None else examples:
        own = dict(ex.paragraphs())
        gold = [Document(t, own[t]) for t in ex.gold_titles if t in own]
        docs = padder.pad(gold, target_tokens=target_tokens, num_docs=num_docs, seed=f"{seed}:{ex.id}")
        out.append(
            LongDocQuestion(
                id=ex.id,
                question=ex.question,
                answers=(ex.answer,),
                context=render_context(docs),
                num_docs=len(docs),
                gold_titles=tuple(d.title for d in gold),
            )
        )
    return out


def hotpotqa_conversations(examples: Sequence[HotpotQAExample]) -> list[Conversation]:
    """Each question over its own ten paragraphs, as a documents conversation (category: its type)."""
    return [
        document_conversation(
            ex.id,
            ex.question,
            (ex.answer,),
            [Document(t, x) for t, x in ex.paragraphs()],
            gold_titles=ex.gold_titles,
            source="hotpotqa",
            category=ex.type or "unknown",
            metadata={"level": ex.level},
        )
        for ex in examples
    ]


def to_ruler_record(question: LongDocQuestion, index: int) -> dict[str, Any]:
    """A MemAgent eval record ``{context, input, answers, num_docs, index}`` (plus ``id``, ``gold_titles``)."""
    return {
        "context": question.context,
        "input": question.question,
        "answers": list(question.answers),
        "num_docs": question.num_docs,
        "index": index,
        "id": question.id,
        "gold_titles": list(question.gold_titles),
    }


def from_ruler_record(record: Mapping[str, Any], where: Where) -> LongDocQuestion:
    """Read a MemAgent eval record; ``id`` defaults to the record's ``index``."""
    answers = where.require(record, "answers")
    answers = answers if isinstance(answers, list) else [answers]
    index = record.get("index")
    context = where.require(record, "context", str)
    num_docs = record.get("num_docs")
    return LongDocQuestion(
        id=str(record.get("id", record.get("_id", index))),
        question=where.require(record, "input", str),
        answers=tuple(as_text(a) for a in answers),
        context=context,
        num_docs=int(num_docs) if isinstance(num_docs, (int, float)) else len(parse_context(context)),
        gold_titles=tuple(record.get("gold_titles") or ()),
    )


def save_ruler_hotpotqa(questions: Sequence[LongDocQuestion], path: str | Path) -> Path:
    """Write questions as MemAgent eval records: JSON lines if ``path`` ends in ``.jsonl``, else a JSON list."""
    return write_json_records([to_ruler_record(q, i) for i, q in enumerate(questions)], path)


def load_ruler_hotpotqa(path: str | Path) -> LoadResult:
    """Read a MemAgent eval file (JSON list or JSON lines). Returns ``LoadResult(list[LongDocQuestion], report)``."""
    path = Path(path)
    where = Where(path)
    records = read_json_records(path)
    questions = []
    for i, record in enumerate(records):
        w = where / f"[{i}]"
        q = from_ruler_record(w.expect(record, dict, "record"), w)
        questions.append(dataclasses.replace(q, id=str(i)) if q.id == "None" else q)
    report = LoadReport(source=str(path))
    report.stats.update(questions=len(questions), documents=sum(q.num_docs for q in questions))
    return LoadResult(questions, report)
