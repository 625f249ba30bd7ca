"""verl parquet rows for memrl's three tasks, written by ``memrl data prepare --format verl`` and read
back by the agent loops.

One row per episode, in verl's format (``data_source``, ``agent_name``, ``prompt``, ``ability``,
``reward_model {style, ground_truth}``, ``extra_info``). verl filters over-long prompts by the
tokenised ``prompt`` column, so it holds only the question (or a one-line task); the long material the
loop needs travels in ``extra_info`` as strings, so every row is self-contained (no shared file system
needed on a Ray cluster):

* ``read`` (agent ``memagent``): ``document``: the conversation rendered as one document (or a
  RULER-HotpotQA context); ``ground_truth``: JSON list of gold answers.
* ``update`` (agent ``memupdate``): ``conversation``: the conversation as memrl JSON (the loop builds
  MemUpdate's initial memory from its observations); one row per question with a scorable answer.
* ``build`` (agent ``membuilder``): one row per (session, memory type): ``conversation``, ``session``,
  ``memory_type`` and ``memory``, the pre-session memory as a memrl export (JSON lines), built by an
  expert over the earlier sessions (:mod:`memrl.agents.membuilder.experts`' annotation expert: no LLM needed),
  so each row is one session of ADRPO training from a realistic memory state; ``expert_chars``: JSON
  ``{memory type: characters}`` of the expert's own reply for this session (ADRPO's length penalty
  compares the policy's reply with it, in the same unit), empty without an expert.

Every row has the same ``extra_info`` keys (unused ones empty), so files of different tasks concatenate.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from memrl.data.types import Conversation, LongDocQuestion, Question
from memrl.errors import ConfigError, DataError

Task = Literal["read", "update", "build"]
AGENTS: dict[str, str] = {"read": "memagent", "update": "memupdate", "build": "membuilder"}
TYPES = ("core", "episodic", "semantic", "procedural")
TASK_PROMPT = {
    "update": "Improve the memory database so that it answers this question: {question}",
    "build": "Write {memory_type} memory for session {session} of the conversation.",
}


def _row(task: Task, source: str, index: int, split: str, question: str, golds: Sequence[str],
         **extra: Any) -> dict[str, Any]:  # fmt: skip
    info = {"index": index, "split": split, "task": task, "question_id": "", "question": question,
            "document": "", "conversation": "", "session": 0, "memory_type": "", "memory": "",
            "expert_chars": "", "decoys": ""}  # fmt: skip
    info.update(extra)
    content = question if task == "read" else TASK_PROMPT[task].format(question=question, **extra)
    return {
        "data_source": f"memrl/{source}/{task}",
        "agent_name": AGENTS[task],
        "prompt": [{"role": "user", "content": content}],
        "ability": f"memory-{task}",
        "reward_model": {"style": "rule", "ground_truth": json.dumps(list(golds), ensure_ascii=False)},
        "extra_info": info,
    }


def _trainable(q: Question) -> bool:
    return bool(q.answers) and q.answerable and q.category != "adversarial"


def read_rows(records: Iterable[Conversation | LongDocQuestion], *, split: str = "train") -> list[dict]:
    """MemAgent rows: a conversation (rendered session by session) or a long document, per question."""
    from memrl.agents.memagent import render_conversation

    rows: list[dict[str, Any]] = []
    for rec in records:
        if isinstance(rec, LongDocQuestion):
            items = [(rec.context, rec.id, rec.question, rec.answers, "hotpotqa")]
        else:
            doc = render_conversation(rec)
            items = [(doc, q.id, q.question, q.answers, rec.source) for q in rec.questions if _trainable(q)]
        for doc, qid, question, golds, source in items:
            rows.append(
                _row("read", source, len(rows), split, question, golds, question_id=qid, document=doc)
            )
    return rows


def ruler_rows(items: Iterable[Any], *, split: str = "train") -> list[dict]:
    """MemAgent rows of RULER's synthetic tasks (:class:`memrl.data.ruler.synthetic.SyntheticItem`): the
    task's instruction and query as the question, its context as the document.

    Only tasks with one gold answer: the ``memagent`` loop's reward is MemAgent's boxed match against a
    gold answer, which a task asking for several values (multivalue, multiquery, vt, cwe, fwe) would pay
    for one of them."""
    rows: list[dict[str, Any]] = []
    for item in items:
        if len(item.answers) != 1:
            raise DataError(
                f"{item.task} asks for {len(item.answers)} values; verl's memagent reward (boxed match) scores "
                "one gold answer: use niah_single_1-3, niah_multikey_1-3 or qa_2"
            )
        rows.append(_row("read", "ruler-synthetic", len(rows), split, item.question, item.answers,
                         question_id=item.id, document=item.context))  # fmt: skip
    return rows


def update_rows(conversations: Iterable[Conversation], *, split: str = "train") -> list[dict]:
    """MemUpdate rows: one per question whose answer the reward can score (it has content tokens)."""
    from memrl.rewards.memupdate import tokens

    rows: list[dict[str, Any]] = []
    for conv in conversations:
        if not conv.metadata.get("observation"):
            raise DataError(f"conversation {conv.id!r} has no LoCoMo observations: MemUpdate's initial memory "
                            "is built from them (use LoCoMo or the sample)")  # fmt: skip
        blob = json.dumps(conv.to_dict(), ensure_ascii=False)
        for q in conv.questions:
            if _trainable(q) and tokens(q.answer):
                rows.append(_row("update", conv.source, len(rows), split, q.question, q.answers,
                                 question_id=q.id, conversation=blob))  # fmt: skip
    return rows


async def _snapshots(conv: Conversation, expert: str) -> tuple[dict[int, str], dict[int, str]]:
    """The memory before each session (memrl export lines, JSON), built by ``expert``, and the expert's
    reply length per memory type for each session (JSON; empty without an expert)."""
    from memrl.agents.membuilder import MemBuilderAgent, MemBuilderConfig
    from memrl.agents.membuilder.adrpo import expert_lengths
    from memrl.memory import AsyncMemory
    from memrl.memory.embedders import HashingEmbedder

    out: dict[int, str] = {}
    lengths: dict[int, str] = {}
    memory = AsyncMemory(embedder=HashingEmbedder(64))  # vectors are not exported: any embedder will do
    try:
        ns = f"{conv.id}@expert"
        await memory.reset(namespace=ns)
        agent = None
        if expert == "annotations":
            from memrl.agents.membuilder.experts import annotation_expert

            agent = MemBuilderAgent(annotation_expert(conv), MemBuilderConfig(context="full"))
        elif expert != "none":
            raise ConfigError(f"expert must be 'annotations' or 'none', got {expert!r}")
        for s in conv.sessions:
            lines = await memory.export_lines(namespace=ns) if s.index > 1 else []
            out[s.index] = "\n".join(json.dumps(line, ensure_ascii=False) for line in lines)
            lengths[s.index] = ""
            if agent is not None:
                built = await agent.build_session(memory, ns, conv, s)
                lengths[s.index] = json.dumps(expert_lengths(built), sort_keys=True)
    finally:
        await memory.close()
    return out, lengths


def build_rows(conversations: Iterable[Conversation], *, split: str = "train", types: Sequence[str] = TYPES,
               expert: str = "annotations", questions: int = 5) -> list[dict]:  # fmt: skip
    """MemBuilder rows: one per (session with questions to score it, memory type)."""
    import asyncio

    from memrl.agents.membuilder.adrpo import decoy_questions, session_questions

    conversations = list(conversations)
    bad = [t for t in types if t not in TYPES]
    if bad or not types:
        raise ConfigError(f"--types must be among {', '.join(TYPES)}, got {', '.join(types) or 'none'}")
    rows: list[dict[str, Any]] = []
    for conv in conversations:
        snaps, lengths = asyncio.run(_snapshots(conv, expert))
        blob = json.dumps(conv.to_dict(), ensure_ascii=False)
        for s in conv.sessions:
            qs = session_questions(conv, s, questions)
            if not qs:
                continue  # nothing to score this session with
            golds = [q.answer for q in qs]
            # ADRPO's decoys (what memory answers by chance), from the other conversations when there are any
            decoys = json.dumps([d.to_dict() for d in decoy_questions(conv, s, qs, others=conversations)],
                                ensure_ascii=False)  # fmt: skip
            for t in types:
                rows.append(_row("build", conv.source, len(rows), split, "", golds, conversation=blob,
                                 session=s.index, memory_type=t, memory=snaps[s.index],
                                 expert_chars=lengths[s.index], decoys=decoys))  # fmt: skip
    return rows


def write_parquet(rows: list[dict[str, Any]], path: str | Path) -> Path:
    """Write rows as a parquet file (pyarrow; the folder is created)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not rows:
        raise DataError("no rows to write: the selection has no question a task can be trained on")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


@dataclass
class RowTask:
    """What an agent loop reads from a row (the dataset fields verl passes to ``AgentLoopBase.run``)."""

    task: str
    question: str
    golds: list[str]
    info: dict[str, Any]

    @classmethod
    def from_kwargs(cls, kwargs: dict[str, Any]) -> RowTask:
        info = dict(kwargs.get("extra_info") or {})
        reward = kwargs.get("reward_model") or {}
        try:
            golds = json.loads(reward.get("ground_truth") or "[]")
        except (TypeError, json.JSONDecodeError) as e:
            raise DataError(
                f"row {info.get('index')}: reward_model.ground_truth is not a JSON list ({e})"
            ) from e
        if "task" not in info:
            raise DataError(f"row {info.get('index')}: extra_info.task is missing: write rows with "
                            "memrl data prepare --format verl")  # fmt: skip
        return cls(str(info["task"]), str(info.get("question") or ""), [str(g) for g in golds], info)

    def conversation(self) -> Conversation:
        text = self.info.get("conversation") or ""
        if not text:
            raise DataError(f"row {self.info.get('index')}: extra_info.conversation is empty")
        return Conversation.from_dict(json.loads(text))

    def question_obj(self, conv: Conversation) -> Question:
        qid = self.info.get("question_id")
        for q in conv.questions:
            if q.id == qid:
                return q
        raise DataError(f"row {self.info.get('index')}: question {qid!r} is not in conversation {conv.id!r}")

    def decoys(self) -> list[Question] | None:
        """ADRPO's decoy questions written by ``memrl data prepare`` (None for rows prepared without)."""
        text = self.info.get("decoys") or ""
        if not text:
            return None
        try:
            return [Question.from_dict(d) for d in json.loads(text)]
        except (ValueError, TypeError, KeyError) as e:
            raise DataError(
                f"row {self.info.get('index')}: extra_info.decoys is not a list of questions: {e}"
            ) from e

    def memory_lines(self) -> list[str]:
        return [line for line in str(self.info.get("memory") or "").splitlines() if line.strip()]
