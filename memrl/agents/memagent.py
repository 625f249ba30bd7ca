"""MemAgent: read a very long document chunk by chunk, overwriting a bounded memory, then answer.

For each chunk (``chunk_tokens``, 5,000 in the paper) the model gets the question, its current memory
(initially "No previous memory") and the chunk, and writes the new memory, at most ``memory_tokens``
(1,024) tokens: the memory is overwritten, so the context never grows. A final call answers from the
memory in ``\\boxed{}``. The reward (RL) is 1 when the boxed answer matches a gold answer
(:func:`memrl.rewards.memagent.memagent_reward`).

    agent = MemAgent(create_llm("local"), MemAgentConfig(chunk_tokens=1500))
    result = await agent.run("Who wrote X?", document, golds=["Jane Doe"])
    result.answer, result.memory, result.trajectory.reward

``answer_by_reading`` plugs the agent into the QA evaluation (``memrl eval --builder memagent``): the
conversation is rendered session by session, with dates, as the document.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from typing import Any

from memrl.agents.trajectory import Step, Trajectory
from memrl.config import option
from memrl.data.types import Conversation, Question
from memrl.errors import ConfigError, MemrlError
from memrl.llm.base import LLM, SamplingParams
from memrl.scoring.metrics import boxed_answer

CHUNK_PROMPT = """You are reading a long document, one section at a time, to answer a question. You keep a \
memory of what you have read; it is all you will have when you answer.

Question: {question}

Your memory so far:
{memory}

Next section:
{chunk}

Write your updated memory: keep what in your memory helps answer the question, and add what in this \
section helps (names, dates, places, numbers). Write only the memory."""

# The same prompt with the section before the memory: the G rollouts of a GRPO group then share every token
# up to their memories, which the local back-end and trainer run once (``memory_last``).
CHUNK_PROMPT_MEMORY_LAST = """You are reading a long document, one section at a time, to answer a question. You keep \
a memory of what you have read; it is all you will have when you answer.

Question: {question}

Next section:
{chunk}

Your memory so far:
{memory}

Write your updated memory: keep what in your memory helps answer the question, and add what in this \
section helps (names, dates, places, numbers). Write only the memory."""

ANSWER_PROMPT = """Question: {question}

Your memory of the document:
{memory}

Answer the question from your memory, in a few words. Give the final answer inside \\boxed{{}}."""
# No example answer in the prompt: with one ("for example \boxed{Paris}", memrl's wording until 2026-11-27) the
# 135M model boxed "Paris" for all 96 held-out documents of the read benchmark, before training and after
# GRPO alone; MemAgent's own final prompt gives none. The figures measured before that date used it.


@dataclasses.dataclass(frozen=True)
class MemAgentConfig:
    """How MemAgent reads. Defaults follow the paper (5,000-token chunks, 1,024-token memory)."""

    chunk_tokens: int = option(5000, "tokens of document per reading step")
    memory_tokens: int = option(1024, "memory budget: the most tokens a memory update may write")
    max_chunks: int | None = option(None, "read at most this many chunks (None: the whole document)")
    answer_tokens: int = option(64, "token budget of the final answer")
    temperature: float = option(0.0, "sampling temperature (RL rollouts use > 0)")
    answer_grammar: bool = option(
        False, "constrain the final answer to \\boxed{...} by a grammar (back-ends that follow grammars)"
    )
    initial_memory: str = option("No previous memory", "the memory before the first chunk")
    memory_last: bool = option(
        False,
        "put the section before the memory in the chunk prompt (the original puts the memory first): a GRPO "
        "group's prompts then share all but the memory, which the local back-end prefills once",
    )

    def __post_init__(self) -> None:
        if self.chunk_tokens < 16 or self.memory_tokens < 8:
            raise ConfigError("chunk_tokens must be >= 16 and memory_tokens >= 8")


def boxed_grammar(max_chars: int) -> str:
    """EBNF of a final answer that is one ``\\boxed{...}`` of 1..max_chars characters (no braces)."""
    return 'root ::= "\\\\boxed{" [^{}\\n]{1,' + str(max(1, max_chars)) + '} "}"'


def _tokenizer(llm: LLM) -> Any:
    inner = getattr(llm, "inner", llm)  # CachedLLM wraps the back-end
    from memrl.llm.templated import TemplatedLLM  # local and verl back-ends: chunk with the model's tokens

    return inner.tokenizer if isinstance(inner, TemplatedLLM) else None


def count_chunks(text: str, chunk_tokens: int, llm: LLM | None) -> int:
    """How many chunks MemAgent reads ``text`` in with ``llm`` (its tokens when it has a tokenizer): the
    model calls a read takes, less the answer (job progress counts against it)."""
    return len(chunk_text(text, chunk_tokens, None if llm is None else _tokenizer(llm)))


def chunk_text(text: str, chunk_tokens: int, tokenizer: Any = None) -> list[str]:
    """Split ``text`` into pieces of at most ``chunk_tokens`` tokens (the model's tokenizer if given,
    else ~0.75 words per token), cutting at line breaks where possible."""
    if tokenizer is not None:
        ids = tokenizer.encode(text, add_special_tokens=False)
        return [tokenizer.decode(ids[i : i + chunk_tokens]) for i in range(0, len(ids), chunk_tokens)] or [""]
    budget = max(1, int(chunk_tokens * 0.75))
    chunks: list[str] = []
    cur: list[str] = []
    n = 0
    for line in text.splitlines():
        words = len(line.split())
        if cur and n + words > budget:
            chunks.append("\n".join(cur))
            cur, n = [], 0
        while words > budget:  # a single huge line
            parts = line.split()
            chunks.append(" ".join(parts[:budget]))
            line = " ".join(parts[budget:])
            words = len(parts) - budget
        cur.append(line)
        n += words
    if cur:
        chunks.append("\n".join(cur))
    return chunks or [""]


@dataclasses.dataclass
class MemAgentResult:
    answer: str | None  # the boxed answer, None if the model gave none
    final_text: str
    memory: str
    trajectory: Trajectory
    chunks_read: int


class MemAgent:
    """Chunked reading with an overwritten memory; see the module docstring."""

    def __init__(self, llm: LLM, config: MemAgentConfig | None = None) -> None:
        self.llm = llm
        self.config = config or MemAgentConfig()

    async def run(
        self, question: str, document: str, *, golds: Sequence[str] | None = None, task_id: str = "memagent"
    ) -> MemAgentResult:
        """Read ``document`` for ``question`` and answer.

        A provider failure stops the episode: it is recorded (``trajectory.failure`` and a failed step) and
        the result has no answer and no reward, never a score."""
        cfg = self.config
        traj = Trajectory(agent="memagent", task_id=task_id)
        chunks = chunk_text(document, cfg.chunk_tokens, _tokenizer(self.llm))
        if cfg.max_chunks is not None:
            chunks = chunks[: cfg.max_chunks]
        memory = cfg.initial_memory
        chunk_prompt = CHUNK_PROMPT_MEMORY_LAST if cfg.memory_last else CHUNK_PROMPT
        steps = [(f"chunk-{i}", chunk_prompt, c, cfg.memory_tokens) for i, c in enumerate(chunks)]
        steps.append(("answer", ANSWER_PROMPT, "", cfg.answer_tokens))
        text = ""
        for n, (role, template, chunk, budget) in enumerate(steps):
            prompt = template.format(question=question, memory=memory, chunk=chunk)
            messages = [{"role": "user", "content": prompt}]
            sampling = SamplingParams(temperature=cfg.temperature, max_tokens=budget)
            extra = {}
            if role == "answer" and cfg.answer_grammar and self.llm.supports_grammar:
                extra["grammar"] = boxed_grammar(budget - 8)  # "\\boxed{" and "}" take <= 8 tokens
            try:
                reply = await self.llm.chat(messages, sampling=sampling, **extra)
            except MemrlError as e:
                traj.failure = f"{type(e).__name__}: {e}"
                traj.steps.append(Step(messages, "", error=traj.failure, role=role))
                return MemAgentResult(None, "", memory, traj, n)
            traj.steps.append(Step.from_response(messages, reply, role=role))
            if role == "answer":
                text = reply.text
            elif reply.text.strip():
                memory = reply.text.strip()
            else:  # an empty overwrite keeps the previous memory; counted, since the model wrote nothing
                traj.metrics["empty_memory_updates"] = traj.metrics.get("empty_memory_updates", 0) + 1
        answer = boxed_answer(text)
        traj.metrics.setdefault("empty_memory_updates", 0)
        traj.metrics.update(chunks=len(chunks), boxed=answer is not None)
        if golds is not None:
            from memrl.rewards.memagent import memagent_eval

            scores = memagent_eval(text, list(golds))
            traj.reward = float(scores["reward"])
            traj.metrics.update(scores)
        return MemAgentResult(answer, text, memory, traj, len(chunks))


def render_conversation(conv: Conversation) -> str:
    """The conversation as one document: sessions in order, each headed by its date. A documents
    conversation (HotpotQA, RULER-HotpotQA) is read as its context, exactly as MemAgent reads it."""
    from memrl.data.documents import context_of

    context = context_of(conv)
    if context is not None:
        return context
    parts = []
    for s in conv.sessions:
        head = f"Session {s.index}" + (f" ({s.date_text})" if s.date_text else "")
        parts.append(head + ":\n" + "\n".join(t.render() for t in s.turns))
    return "\n\n".join(parts)


async def answer_by_reading(
    llm: LLM, conversation: Conversation, question: Question, *, config: MemAgentConfig | None = None
) -> Any:
    """QA-evaluation hook: read the rendered conversation for this question and answer.

    A reply without ``\\boxed{}`` is a *format failure* of the model: its prediction is empty (scored 0)
    and it is counted in the report. A provider error is an answer failure (not scored).
    """
    from memrl.scoring.answer import AnswerResult

    t0 = time.perf_counter()
    agent = MemAgent(llm, config or MemAgentConfig(chunk_tokens=1500, memory_tokens=256))
    res = await agent.run(question.question, render_conversation(conversation), task_id=question.id)
    traj = res.trajectory
    if traj.failure is not None:
        return AnswerResult(None, error=traj.failure, latency_s=time.perf_counter() - t0)
    return AnswerResult(
        prediction=res.answer if res.answer is not None else "",
        prompt_tokens=traj.prompt_tokens,
        completion_tokens=traj.completion_tokens,
        latency_s=time.perf_counter() - t0,
        format_error=None if res.answer is not None else "no \\boxed{} answer",
    )
