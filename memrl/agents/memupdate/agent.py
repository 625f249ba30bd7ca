"""The MemUpdate agent: edits an existing memory database with six tools so future questions are answered better.

One episode is multi-turn function calling on one namespace: the model sees a job description, the
conversation's speakers, optionally a target question (MemUpdate trains per question: "make the memory
answer this better") and a sample of memories, then calls ``search_memory``, ``manage_memory``,
``delete_memory``, ``sample_memory``, ``merge_memory`` and ``split_memory`` (:mod:`memrl.tools.memupdate`)
until it replies without a tool call, or its budget (30 tool calls by default) or turn limit runs out. A
malformed call (bad JSON, unknown tool, invalid arguments) changes nothing and its error text goes back to
the model as the tool result. Every LLM call and tool result is recorded in one :class:`Trajectory`.

    from memrl.agents.memupdate import init_from_observations, run_episode, update_memory
    await init_from_observations(memory, "conv-26@obs", conversation)        # MemUpdate's initial memory
    result = await run_episode(llm, memory, "conv-26@obs", conversation, question)   # RL: on a copy
    result.trajectory.reward, result.trajectory.metrics                      # E * gain - collateral
    result = await update_memory(llm, memory, "conv-26@raw", conversation)   # QA runner: in place

``trajectory.metrics`` counts tool calls (``tool_calls``, ``valid_calls``, ``invalid_calls``,
``malformed_calls``, ``skipped_calls``, ``calls/<tool>``); ``trajectory.info["finish_reasons"]`` has one
entry per reply (``"length"`` = cut off by ``max_tokens``).

A provider error mid-episode stops it and is recorded as a failure (``trajectory.failure``), never
scored; so is a reward that cannot be computed (an answer with no scorable token).
"""

from __future__ import annotations

import random
import time
import uuid
from collections import Counter
from dataclasses import asdict
from typing import Any

from memrl.agents.memupdate.config import SYSTEM_PROMPT, MemUpdateConfig, UpdateResult
from memrl.agents.trajectory import Step, Trajectory
from memrl.data.locomo import locomo_observations
from memrl.data.types import Conversation, Question
from memrl.errors import DataError, MemrlError, is_infrastructure
from memrl.llm.base import LLM, Message, ToolCall
from memrl.memory import AsyncMemory
from memrl.memory.records import MemoryItem, MemoryType
from memrl.memory.store import NewItem
from memrl.rewards.memupdate import CONTEXT_CHARS, TOP_K, Probe, scorable_tokens, score_memupdate
from memrl.tools.base import ToolResult
from memrl.tools.memupdate import MEMUPDATE_TOOLS, MemoryContext, reader_text

__all__ = [
    "SYSTEM_PROMPT",
    "MemUpdateAgent",
    "MemUpdateConfig",
    "UpdateResult",
    "init_from_observations",
    "probe_questions",
    "run_episode",
    "state_before",
    "update_memory",
]


class MemUpdateAgent:
    """Runs MemUpdate episodes with one LLM (see the module docstring)."""

    name = "memupdate"

    def __init__(self, llm: LLM, config: MemUpdateConfig | None = None) -> None:
        self.llm = llm
        self.config = config or MemUpdateConfig()

    async def messages(
        self, ctx: MemoryContext, conversation: Conversation, question: Question | None
    ) -> list[Message]:
        """The opening messages: the job, then the conversation, target question and memories at hand."""
        cfg = self.config
        speakers = " and ".join(conversation.speakers) or "two speakers"
        n = await ctx.memory.count(namespace=ctx.namespace)
        dates = [s.date for s in conversation.sessions if s.date]
        span = f", {dates[0]:%d %B %Y} to {dates[-1]:%d %B %Y}" if dates else ""
        parts = [
            f"The database holds {n} memories about the conversation between {speakers} "
            f"({len(conversation.sessions)} sessions{span})."
        ]
        if question is not None:
            parts.append(
                f"Target question: {question.question}\nChange the database so that it can answer this "
                "question correctly (find the relevant memories; fix, complete or add them)."
            )
            if cfg.question_hits:
                hits = await MEMUPDATE_TOOLS.call(
                    ctx, "search_memory", {"query": question.question, "top_k": cfg.question_hits}
                )
                parts.append(f"A search for the question finds now:\n{hits.content}")
        if cfg.sample_size:
            sample = await MEMUPDATE_TOOLS.call(
                ctx, "sample_memory", {"k": cfg.sample_size, "strategy": cfg.sample_strategy}
            )
            parts.append(f"Some memories:\n{sample.content}")
        parts.append(f"You have {cfg.max_tool_calls} tool calls. Start.")
        system = SYSTEM_PROMPT.format(speakers=speakers, budget=cfg.max_tool_calls)
        return [{"role": "system", "content": system}, {"role": "user", "content": "\n\n".join(parts)}]

    async def execute(
        self, ctx: MemoryContext, call: ToolCall, *, cut: bool = False
    ) -> tuple[ToolResult, str]:
        """Run one call; returns the result and its kind: ``ok``, ``malformed`` (unusable: bad JSON, unknown
        tool, invalid arguments) or ``failed`` (well-formed, but the tool refused: e.g. an unknown id).
        ``cut``: the reply hit the token limit (said in the error, so the model can write shorter calls)."""
        if call.error is not None:
            what = f"your call to {call.name}" if call.name else "your tool call"
            why = (
                f" (your reply was cut off after {self.config.max_tokens} tokens: keep it shorter)"
                if cut
                else ""
            )
            text = (
                f"Error: {what} could not be read: {call.error}{why}. Nothing was changed. Reply with one "
                "call whose arguments are a JSON object following the tool's parameters."
            )
            return ToolResult(False, text, error=call.error), "malformed"
        tool = MEMUPDATE_TOOLS.by_name.get(call.name)
        if tool is None:
            return await MEMUPDATE_TOOLS.call(ctx, call.name, call.parsed), "malformed"
        checked = tool.validate(call.parsed)
        if isinstance(checked, ToolResult):
            return checked, "malformed"
        result = await tool.call(ctx, call.parsed)
        return result, "ok" if result.ok else "failed"

    async def run(
        self,
        memory: AsyncMemory,
        namespace: str,
        conversation: Conversation,
        *,
        question: Question | None = None,
        task_id: str | None = None,
    ) -> UpdateResult:
        """One episode editing ``namespace`` in place, optionally focused on ``question``."""
        cfg = self.config
        t0 = time.perf_counter()
        ctx = MemoryContext(memory, namespace, actor=cfg.actor, rng=random.Random(cfg.tool_seed),
                            speakers=tuple(conversation.speakers))  # fmt: skip
        traj = Trajectory(
            agent=self.name,
            task_id=task_id or (question.id if question else conversation.id),
            info={"namespace": namespace, "conversation": conversation.id, "config": asdict(cfg)},
        )
        if question is not None:
            traj.info["question"] = question.question
        result = UpdateResult(namespace, conversation.id, traj, question=question.id if question else None)
        result.items_before = await memory.count(namespace=namespace)
        kinds: Counter[str] = Counter()
        by_tool: Counter[str] = Counter()
        finish: list[str] = []
        traj.info["finish_reasons"] = finish
        result.stop_reason = "max_turns"
        try:
            used = await self._loop(ctx, conversation, question, traj, result, kinds, by_tool, finish)
        except MemrlError as e:  # a tool's provider or store failed: not the model's doing, never scored
            if not is_infrastructure(e):
                raise
            used = int(sum(by_tool.values()))
            traj.failure = f"infrastructure: {type(e).__name__}: {e}"
            result.failures.append({"kind": "infrastructure", "error": str(e)})
            result.stop_reason = "failure"
        result.calls_by_tool = dict(by_tool)
        traj.info["stop_reason"] = result.stop_reason
        traj.metrics.update(
            tool_calls=float(used),
            valid_calls=float(kinds["ok"]),
            invalid_calls=float(kinds["malformed"] + kinds["failed"]),
            malformed_calls=float(kinds["malformed"]),
            skipped_calls=float(kinds["skipped"]),
            **{f"calls/{name}": float(n) for name, n in by_tool.items()},
        )
        result.items_after = await memory.count(namespace=namespace)
        result.seconds = time.perf_counter() - t0
        return result

    async def _loop(
        self,
        ctx: MemoryContext,
        conversation: Conversation,
        question: Question | None,
        traj: Trajectory,
        result: UpdateResult,
        kinds: Counter[str],
        by_tool: Counter[str],
        finish: list[str],
    ) -> int:
        """The episode's turns (see :meth:`run`); returns the tool calls used."""
        cfg = self.config
        messages = await self.messages(ctx, conversation, question)
        used = 0
        for turn in range(cfg.max_turns):
            try:
                reply = await self.llm.chat(
                    messages,
                    tools=MEMUPDATE_TOOLS.schemas,
                    tool_choice=cfg.tool_choice,
                    sampling=cfg.sampling,
                )
            except MemrlError as e:  # provider failure, or a request the back-end refused (prompt too long)
                error = f"provider: {type(e).__name__}: {e}"
                traj.steps.append(Step(list(messages), "", error=error, role=self.name))
                traj.failure = error
                result.failures.append({"kind": "provider", "turn": turn, "error": str(e)})
                result.stop_reason = "failure"
                break
            step = Step.from_response(messages, reply, role=self.name)
            traj.steps.append(step)
            finish.append(reply.finish_reason)  # "length" = cut off by max_tokens
            messages.append(reply.to_message())
            if not reply.tool_calls:
                result.stop_reason = "answered"
                break
            for call in reply.tool_calls:
                if used >= cfg.max_tool_calls:  # every call needs an answer in OpenAI format
                    res, kind = ToolResult(False, "Not executed: the tool call budget is used up."), "skipped"
                else:
                    used += 1
                    res, kind = await self.execute(ctx, call, cut=reply.finish_reason == "length")
                    by_tool[call.name or "?"] += 1
                kinds[kind] += 1
                content = res.content
                if len(content) > cfg.max_tool_chars:
                    content = content[: cfg.max_tool_chars] + " ... (cut)"
                step.tool_results.append({"id": call.id, "name": call.name, "kind": kind, **res.to_dict()})
                messages.append({"role": "tool", "tool_call_id": call.id, "content": content})
            if used >= cfg.max_tool_calls:
                result.stop_reason = "max_tool_calls"
                break
        return used


async def init_from_observations(
    memory: AsyncMemory, namespace: str, conversation: Conversation, *, actor: str = "observations"
) -> list[MemoryItem]:
    """Build MemUpdate's initial memory from LoCoMo's ``observation`` field (the namespace is reset first).

    One item per observation, id ``O<session>:<n>``, content the observation text verbatim, evidence its
    turn ids, session its session number, metadata ``speaker``, ``date`` (ISO day), ``date_text`` and
    ``source="observation"``. Type: **episodic**, as in the original (every observation is something said
    in one dated session; the date is what temporal questions need). Making durable facts semantic is
    left to the agent, like adding dates to the text (the date sits in metadata, not in the content).
    """
    observations = locomo_observations(conversation)
    if not observations:
        raise DataError(
            f"conversation {conversation.id!r} has no LoCoMo observations (metadata['observation']); "
            "MemUpdate's initial memory needs them: use a LoCoMo conversation or build memory another way"
        )
    sessions = {s.index: s for s in conversation.sessions}
    per_session: Counter[int] = Counter()
    items = []
    for obs in observations:
        per_session[obs.session] += 1
        s = sessions.get(obs.session)
        meta: dict[str, Any] = {"speaker": obs.speaker, "session": obs.session, "source": "observation"}
        if s is not None and s.date is not None:
            meta["date"] = s.date.date().isoformat()
        if s is not None and s.date_text:
            meta["date_text"] = s.date_text
        items.append(
            NewItem(obs.text, MemoryType.EPISODIC, meta, obs.evidence, str(obs.session),
                    id=f"O{obs.session}:{per_session[obs.session]}")
        )  # fmt: skip
    await memory.reset(namespace=namespace)
    return await memory.add_many(items, namespace=namespace, actor=actor)


async def _retrieved(memory: AsyncMemory, namespace: str, query: str) -> list[str]:
    """The memories retrieved for ``query`` as a reader sees them, best first, as many as fill the reward's
    character budget (and the one it cuts)."""
    out: list[str] = []
    used = 0
    for h in await memory.search(query, namespace=namespace, top_k=TOP_K):
        out.append(reader_text(h.item))
        used += len(out[-1]) + 1
        if used > CONTEXT_CHARS:
            break
    return out


async def _state(
    memory: AsyncMemory, namespace: str, question: Question, probes: list[Question]
) -> tuple[list[str], list[str], list[list[str]]]:
    """What the reward reads of ``namespace``: the memories retrieved for the question, the contents of
    all memories, and the memories retrieved for each probe question."""
    target = await _retrieved(memory, namespace, question.question)
    texts = [i.content for i in await memory.list(namespace=namespace)]
    return target, texts, [await _retrieved(memory, namespace, p.question) for p in probes]


async def state_before(
    memory: AsyncMemory,
    namespace: str,
    conversation: Conversation,
    question: Question,
    config: MemUpdateConfig | None = None,
) -> tuple[list[str], list[str], list[list[str]]]:
    """What :func:`run_episode`'s reward reads of ``namespace`` before an episode on ``question``: pass it
    as ``before`` to episodes that start from the same namespace, unchanged."""
    probes = probe_questions(conversation, question, (config or MemUpdateConfig()).probes)
    return await _state(memory, namespace, question, probes)


def probe_questions(conversation: Conversation, question: Question, n: int) -> list[Question]:
    """Up to ``n`` other answerable questions of the conversation, the same ones for every episode on
    ``question`` (seeded by its id): the reward subtracts what an edit takes from them."""
    pool = [
        q for q in conversation.questions
        if q.id != question.id and q.answerable and q.answers and scorable_tokens(q.answer, q.question)
    ]  # fmt: skip
    random.Random(f"probes:{question.id}").shuffle(pool)
    return pool[:n]


async def run_episode(
    llm: LLM,
    memory: AsyncMemory,
    namespace: str,
    conversation: Conversation,
    question: Question,
    *,
    config: MemUpdateConfig | None = None,
    episode_namespace: str | None = None,
    keep_namespace: bool = False,
    before: tuple[list[str], list[str], list[list[str]]] | None = None,
) -> UpdateResult:
    """One RL episode: copy ``namespace`` into an episode namespace, edit it focused on ``question``, score.

    The reward (:func:`~memrl.rewards.memupdate.score_memupdate`: ``E * (P_new - P_old)`` for a gain, the
    loss in full, minus the collateral ``D``) compares the memories retrieved for the question (read
    within the same character budget), the memory texts, and the memories retrieved for ``config.probes``
    other questions of the conversation (:func:`probe_questions`), before (``namespace``, untouched) and
    after (the episode namespace). It lands on ``result.trajectory`` (``reward``, ``metrics``
    ``p_old``/``p_new``/``efficiency``/``collateral``/...). Failures (provider error; a question with no scorable answer,
    detected before any LLM call) set ``trajectory.failure`` and leave the reward None. Episodes of a
    GRPO group can run concurrently: each gets its own namespace, dropped after scoring unless
    ``keep_namespace``. ``before``: what the reward reads of ``namespace`` (:func:`state_before`), when
    many episodes start from the same unchanged namespace and question (a group; the red team's search).
    """
    ep_ns = episode_namespace or f"{namespace}@ep-{uuid.uuid4().hex[:8]}"
    agent = MemUpdateAgent(llm, config)
    if not question.answerable or not scorable_tokens(question.answer, question.question):
        reason = f"memupdate: question {question.id!r} has no scorable answer ({question.answer!r})"
        traj = Trajectory(agent.name, question.id, failure=reason, info={"namespace": ep_ns})
        result = UpdateResult(ep_ns, conversation.id, traj, question=question.id, stop_reason="failure")
        result.failures.append({"kind": "reward", "error": reason})
        return result
    cfg = config or MemUpdateConfig()
    probes = probe_questions(conversation, question, cfg.probes)
    if before is None:
        before = await _state(memory, namespace, question, probes)
    retrieved_old, old_texts, probes_old = before
    await memory.clone(namespace, ep_ns, overwrite=True)
    try:
        result = await agent.run(memory, ep_ns, conversation, question=question)
        traj = result.trajectory
        traj.info["initial_namespace"] = namespace
        if traj.failure is None:
            try:
                retrieved_new, new_texts, probes_new = await _state(memory, ep_ns, question, probes)
            except MemrlError as e:  # the store or embedder failed while scoring: no reward, a failure
                if not is_infrastructure(e):
                    raise
                traj.failure = f"infrastructure: {type(e).__name__}: {e}"
                result.failures.append({"kind": "infrastructure", "error": str(e)})
                return result
            outcome = score_memupdate(
                question.answer, retrieved_old, retrieved_new, old_texts, new_texts, question=question.question,
                probes=[Probe(p.answer, p.question, old, new)
                        for p, old, new in zip(probes, probes_old, probes_new, strict=True)],
            )  # fmt: skip
            if outcome.failure is not None:
                traj.failure = outcome.failure
                result.failures.append({"kind": "reward", "error": outcome.failure})
            else:
                traj.reward = outcome.value
                traj.metrics.update(outcome.metrics)
    finally:
        if not keep_namespace:
            await memory.reset(namespace=ep_ns)
    return result


async def update_memory(
    llm: LLM,
    memory: AsyncMemory,
    namespace: str,
    conversation: Conversation,
    *,
    config: MemUpdateConfig | None = None,
    question: Question | None = None,
) -> UpdateResult:
    """One episode over a conversation's built memory, editing ``namespace`` in place (used by the QA runner;
    unfocused unless ``question`` is given). No reward is computed."""
    return await MemUpdateAgent(llm, config).run(memory, namespace, conversation, question=question)
