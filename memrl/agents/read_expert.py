"""An expert reader for MemAgent's ``read`` task: replies written from the evidence annotations, not a model.

:class:`ExpertReader` answers MemAgent's prompts for one document: after a chunk holding one of the
question's evidence turns (:func:`in_chunk`), the memory is every evidence turn read so far, each with its
session's date (:func:`evidence_lines`), cut to the memory budget in the student's tokens; after a chunk
holding none, the previous memory unchanged; the answer is ``\\boxed{gold}``. :func:`expert_trajectories`
runs :class:`memrl.agents.memagent.MemAgent` itself with it over RULER-LoCoMo documents, so each expert
call is a trajectory step the student can be fine-tuned on (the ``read`` task's SFT warm start: the
learning benchmark, ``python -m bench.read_sft``)::

    trajs, counts = await expert_trajectories(student, documents, conversations_by_id, MemAgentConfig(...))
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

__all__ = ["ExpertReader", "evidence_lines", "expert_trajectories", "in_chunk"]

_SECTION = re.compile(r"Next section:\n(.*?)\n\n(?:Your memory so far:|Write your updated memory)", re.S)


def evidence_lines(doc: Any, conversations: dict[str, Any]) -> list[str]:
    """The question's evidence turns, in conversation order, as ``(date) Speaker: text`` lines."""
    qid = doc.metadata["question_id"]
    conv = conversations.get(qid.split(":")[0])
    if conv is None:
        raise ValueError(f"{doc.id}: its question {qid} is not in the given conversations")
    (q,) = [q for q in conv.questions if q.id == qid]
    wanted = set(q.evidence)
    lines = [f"({s.date_text}) {t.render()}" if s.date_text else t.render()
             for s in conv.sessions for t in s.turns if t.id in wanted]  # fmt: skip
    return lines


def in_chunk(turn: str, chunk: str) -> bool:
    """Whether ``chunk`` holds ``turn``: a chunk boundary may cut it once, so one of its halves' outer ends
    (the first or the last min(30, half) characters) is whole on one side of the cut."""
    w = max(1, min(30, len(turn) // 2))
    return turn[:w] in chunk or turn[-w:] in chunk


class ExpertReader:
    """A rule-based reader for one document: see the module docstring. ``student``: the model that will
    learn from it (its tokenizer cuts the memory, and MemAgent cuts chunks with it). ``turns``: the evidence turns as
    the document renders them (``Speaker: text``), ``lines``: what the memory writes for each. ``gold``: the
    answer, or a function of the final memory giving it (an expert that answers only what it kept)."""

    def __init__(self, student: Any, turns: list[str], lines: list[str], gold: str | Callable[[str], str],
                 memory_tokens: int, initial_memory: str) -> None:  # fmt: skip
        from memrl.llm.scripted import ScriptedLLM

        self.turns, self.lines, self.gold = turns, lines, gold
        self.tokenizer = student.tokenizer
        self.budget = memory_tokens - 1  # the end-of-turn token SFT appends counts too
        self.memory = initial_memory
        self.seen: set[int] = set()
        self.llm = ScriptedLLM(self._reply, model="expert-reader")
        self.llm.inner = student  # MemAgent cuts chunks with the tokenizer of ``inner`` (its CachedLLM hook)

    def _reply(self, messages: list[dict], tools: Any, json_schema: Any) -> str:
        prompt = messages[-1]["content"]
        section = _SECTION.search(prompt)
        if section is None:  # the answer prompt
            return "\\boxed{" + (self.gold(self.memory) if callable(self.gold) else self.gold) + "}"
        chunk = section.group(1)
        new = {i for i, t in enumerate(self.turns) if i not in self.seen and in_chunk(t, chunk)}
        if new:
            self.seen |= new
            text = "\n".join(self.lines[i] for i in sorted(self.seen))
            ids = self.tokenizer.encode(text, add_special_tokens=False)[: self.budget]
            self.memory = self.tokenizer.decode(ids).strip()
        return self.memory


async def expert_trajectories(student: Any, docs: list[Any], conversations: dict[str, Any],
                              config: Any) -> tuple[list[Any], dict[str, int]]:  # fmt: skip
    """One expert trajectory per document (MemAgent with :class:`ExpertReader`), and counts: documents,
    chunk steps, chunk steps that wrote evidence, answers left out (gold too long for the answer grammar)."""
    from memrl.agents.memagent import MemAgent, render_conversation

    counts = {"documents": len(docs), "chunk_steps": 0, "evidence_steps": 0, "answers_too_long": 0}
    max_chars = config.answer_tokens - 8  # MemAgent's boxed grammar: "\\boxed{" and "}" take <= 8 tokens
    out = []
    for doc in docs:
        q = doc.questions[0]
        lines = evidence_lines(doc, conversations)
        turns = [line.split(") ", 1)[1] if line.startswith("(") else line for line in lines]
        gold = str(q.answers[0])
        expert = ExpertReader(student, turns, lines, gold, config.memory_tokens, config.initial_memory)
        res = await MemAgent(expert.llm, config).run(q.question, render_conversation(doc), task_id=q.id)
        traj = res.trajectory
        if traj.failure is not None:
            raise RuntimeError(f"expert reading of {doc.id} failed: {traj.failure}")
        chunks = [s for s in traj.steps if s.role.startswith("chunk")]
        counts["chunk_steps"] += len(chunks)
        counts["evidence_steps"] += sum(s.response != config.initial_memory for s in chunks)
        if len(gold) > max_chars:
            traj.steps = chunks
            counts["answers_too_long"] += 1
        out.append(traj)
    return out, counts
