"""MemBuilder (arXiv 2601.05488): four LLM agents per session, one per memory type, write long-term memory.

For each session of a conversation, the core, episodic, semantic and procedural agents each get their
instructions (:mod:`memrl.agents.membuilder.prompts`), the memory state, and the dated transcript, and
answer with JSON actions constrained by their action schema (:mod:`memrl.tools.membuilder`). Back-ends
without constrained decoding work too: every answer is parsed and validated before anything is applied::

    from memrl.agents.membuilder import MemBuilderAgent, MemBuilderConfig
    agent = MemBuilderAgent(create_llm("local"), MemBuilderConfig(context="retrieved", context_k=8))
    result = await agent.build_session(memory, "conv-26@membuilder", conversation, session)
    result.stats, result.failures, result.trajectories      # one trajectory per agent, for trainers

**Ordering.** The four agents are independent given the pre-session memory, so their calls run
concurrently (``asyncio.gather``; the local back-end batches them: they share one ``SamplingParams`` for
that reason). Their answers are then applied one agent at a time in the fixed order core, episodic,
semantic, procedural, whatever order the replies arrived in: each agent only touches its own memory type,
so the order changes no content, but it keeps the store's history (which resume and rollback replay)
identical from run to run. Core compression runs last, once the core agent's action is applied.

**Context (token cost).** ``context="full"`` is the original: every agent sees the whole memory (core and
every item), so prompts grow with the conversation. ``context="retrieved"`` (default) shows each agent core
memory plus only the ``context_k`` items *of its own type* most relevant to this session
(:mod:`memrl.agents.membuilder.context`). The configuration lives in :mod:`memrl.agents.membuilder.config`.

**Budget.** Each answer is constrained by the action schema narrowed to what can apply this session
(no REPLACE on an empty core memory, no UPDATE without an item shown, old memories referred to by id) and
to ``max_operations`` operations of ``max_item_chars`` characters (:mod:`memrl.agents.membuilder.schema`);
``max_tokens`` defaults to (``answer_budget``) the longest answer that schema allows, counting one token per character of
text (what a small model looping on digits does reach), so a constrained answer always closes.

**Failures are data.** A provider error or an unparsable answer leaves memory unchanged for that agent,
is recorded in ``SessionResult.failures`` (type, stage, error), and the other agents still apply. On the
agent's trajectory a provider error is a ``failure`` (no reward), an unparsable answer is the policy's own
error: ``metrics["invalid"]`` (a valid rollout whose task reward is 0). Actions that parse but cannot apply (an UPDATE of a memory that does not exist, an
operation the config does not offer) are counted as failed actions in ``stats``.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from memrl.agents.base import Builder, SessionResult
from memrl.agents.membuilder import prompts as P
from memrl.agents.membuilder.config import OPERATIONS, ORDER, Context, MemBuilderConfig
from memrl.agents.membuilder.context import memory_views
from memrl.agents.membuilder.schema import budget_schema, compress_schema
from memrl.agents.trajectory import Step, Trajectory
from memrl.data.types import Conversation, Session
from memrl.errors import MemrlError, is_infrastructure
from memrl.llm.base import LLM, ChatResponse
from memrl.memory import AsyncMemory
from memrl.memory.records import MemoryType
from memrl.tools.membuilder import ActionReport, apply_actions, parse_actions

__all__ = ["OPERATIONS", "ORDER", "Context", "MemBuilderAgent", "MemBuilderConfig"]


@dataclass
class _Run:
    """One agent's work in one session."""

    mtype: MemoryType
    trajectory: Trajectory
    messages: list[dict[str, str]] = field(default_factory=list)
    context_ids: list[str] = field(default_factory=list)  # every item shown
    own_ids: list[str] = field(default_factory=list)  # the items of its own type shown
    offered: tuple[str, ...] = ()
    reply: ChatResponse | None = None
    error: str | None = None
    stage: str = ""
    report: ActionReport | None = None


class MemBuilderAgent(Builder):
    """The four MemBuilder agents as a :class:`~memrl.agents.base.Builder` (registered as ``membuilder``)."""

    name = "membuilder"

    def __init__(self, llm: LLM, config: MemBuilderConfig | None = None) -> None:
        self.llm = llm
        self.config = cfg = config or MemBuilderConfig()
        self.types = tuple(t for t in ORDER if t.value in cfg.types)
        self._schemas: dict[tuple[MemoryType, tuple[str, ...], int | None], dict[str, Any]] = {}
        self.compress_schema = compress_schema(cfg.compress_to)
        #: metadata every item written carries, and that the agents' views filter on (the ``union``
        #: builder's ``{"origin": "notes"}``); empty: every item of the namespace is the agents' own
        self.label: dict[str, Any] = {}

    def offered(self, memory_type: MemoryType, *, core: str, own_ids: list[str]) -> tuple[str, ...]:
        """The operations the agent is offered this session: those of the config that can apply to what
        it is shown (no REPLACE on an empty core memory, no UPDATE without an item, no MERGE without two)."""
        ops = self.config.operations(memory_type)
        if memory_type is MemoryType.CORE and not core.strip():
            ops = tuple(o for o in ops if o in ("APPEND", "SKIP"))
        if len(own_ids) < 2:
            ops = tuple(o for o in ops if o != "MERGE" and (own_ids or o != "UPDATE"))
        return ops

    def schema(self, memory_type: MemoryType, operations: tuple[str, ...], own_ids: list[str]) -> dict:
        """The JSON schema of an answer offering ``operations``; old memories are referred to by id."""
        ref = max((len(i) for i in own_ids), default=None)
        key = (memory_type, operations, ref)
        if key not in self._schemas:
            self._schemas[key] = budget_schema(
                memory_type, operations=operations, max_operations=self.config.max_operations,
                max_chars=self.config.max_item_chars, ref_chars=ref,
            )  # fmt: skip
        return self._schemas[key]

    # ------------------------------------------------------------------ one session
    async def build_session(
        self, memory: AsyncMemory, namespace: str, conversation: Conversation, session: Session
    ) -> SessionResult:
        t0 = time.perf_counter()
        cfg = self.config
        limit = cfg.core_limit or memory.store.core_limit
        result = SessionResult(session=session.index)
        runs = {
            t: _Run(t, Trajectory("membuilder", f"{conversation.id}:s{session.index}:{t.value}",
                                  info={"memory_type": t.value, "conversation": conversation.id,
                                        "session": session.index, "context": cfg.context}))
            for t in self.types
        }  # fmt: skip
        core = await memory.core(namespace=namespace)
        compressed = False
        if MemoryType.CORE in runs and len(core) > cfg.compress_at * limit:  # full before we started
            compressed = await self._compress(memory, namespace, conversation, core, limit, runs, result)
            core = await memory.core(namespace=namespace)

        views = await memory_views(memory, namespace, session, core, cfg, self.types, self.label or None)
        transcript = P.session_block(session)
        for t, run in runs.items():
            text, run.context_ids, run.own_ids = views[t]
            run.offered = self.offered(t, core=core, own_ids=run.own_ids)
            run.messages = P.agent_messages(
                t, transcript, text, operations=run.offered, speakers=conversation.speakers,
                max_operations=cfg.max_operations, max_chars=cfg.max_item_chars,
            )  # fmt: skip
        result.llm_calls += len(runs)
        await asyncio.gather(*(self._ask(run) for run in runs.values()))

        evidence = tuple(t.id for t in session.turns)
        meta = {
            "date": session.date.isoformat() if session.date else None,
            "date_text": session.date_text,
            "session": session.index,
            **self.label,
        }
        try:
            for t in ORDER:  # fixed order, whatever order the replies came in (see the module docstring)
                if t in runs:
                    await self._apply(memory, namespace, runs[t], session, evidence, meta, result)
        except MemrlError as e:  # the store or embedder failed while applying: no agent is to blame
            if not is_infrastructure(e):
                raise
            for run in runs.values():
                run.trajectory.failure = run.trajectory.failure or f"infrastructure: {type(e).__name__}: {e}"
            result.failures.append({"type": "all", "stage": "apply", "error": f"{type(e).__name__}: {e}"})

        core = await memory.core(namespace=namespace)
        if MemoryType.CORE in runs and len(core) > cfg.compress_at * limit:
            compressed |= await self._compress(memory, namespace, conversation, core, limit, runs, result)
        self._finish(result, runs, await memory.core(namespace=namespace), compressed)
        result.stats["items"] = await memory.count(namespace=namespace)
        result.seconds = time.perf_counter() - t0
        return result

    async def _ask(self, run: _Run) -> None:
        """One agent's call; a provider error is recorded, not raised."""
        try:
            run.reply = await self.llm.chat(
                run.messages,
                json_schema=self.schema(run.mtype, run.offered, run.own_ids),
                sampling=self.config.sampling(),
            )
        except MemrlError as e:
            run.error, run.stage = f"{type(e).__name__}: {e}", "llm"
            return
        run.trajectory.steps.append(Step.from_response(run.messages, run.reply, role=run.mtype.value))

    def _check(self, run: _Run) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
        """Parse the answer; keep the actions this config offers, up to max_operations. Returns the output
        to apply (None if nothing) and the rejected actions; sets ``run.error`` if it does not parse."""
        assert run.reply is not None
        try:
            actions = parse_actions(run.mtype, run.reply.text)
        except ValueError as e:
            run.error, run.stage = str(e), "parse"
            if run.reply.finish_reason == "length":
                run.error += (
                    f" (answer cut at max_tokens={self.config.answer_budget}: raise max_tokens or lower "
                    "max_operations / max_item_chars)"
                )
            return None, []
        allowed = run.offered
        kept: list[dict[str, Any]] = []
        rejected: list[dict[str, Any]] = []
        for a in actions:
            d = a.model_dump()
            if d["operation"] not in allowed:
                rejected.append({**d, "error": f"{d['operation']} is not offered (use {', '.join(allowed)})"})
            elif len(kept) >= self.config.max_operations:
                rejected.append({**d, "error": f"more than max_operations={self.config.max_operations}"})
            else:
                kept.append(d)
        if run.mtype is MemoryType.CORE:
            return (kept[0] if kept else None), rejected
        return {"operations": kept}, rejected

    async def _apply(
        self,
        memory: AsyncMemory,
        ns: str,
        run: _Run,
        session: Session,
        evidence: tuple[str, ...],
        meta: dict[str, Any],
        result: SessionResult,
    ) -> None:
        output, rejected = self._check(run) if run.reply is not None else (None, [])
        if run.error is not None:
            # A provider error is a failure (no reward); an unparsable answer is the policy's own error: a
            # valid rollout with task reward 0 (ADRPO), flagged invalid. Both are counted in the report.
            if run.stage == "parse":
                run.trajectory.metrics["invalid"] = True
                run.trajectory.info["invalid_reason"] = run.error
            else:
                run.trajectory.failure = run.error
            result.failures.append({"type": run.mtype.value, "stage": run.stage, "error": run.error})
            return
        if output is None:
            run.report = ActionReport(run.mtype)
        else:
            run.report = await apply_actions(
                memory, ns, run.mtype, output, session=str(session.index), evidence=evidence,
                metadata=meta, actor=f"membuilder:{run.mtype.value}",
            )  # fmt: skip
        run.report.failed.extend(rejected)

    async def _compress(
        self,
        memory: AsyncMemory,
        ns: str,
        conversation: Conversation,
        core: str,
        limit: int,
        runs: dict[MemoryType, _Run],
        result: SessionResult,
    ) -> bool:
        """The extra core-agent call rewriting a nearly full core memory; recorded on the core trajectory."""
        cfg = self.config
        traj = runs[MemoryType.CORE].trajectory
        msgs = P.compress_messages(core, limit=limit, target=cfg.compress_to, speakers=conversation.speakers)
        error = None
        result.llm_calls += 1
        try:
            reply = await self.llm.chat(
                msgs, json_schema=self.compress_schema, sampling=cfg.sampling(cfg.compress_budget)
            )
        except MemrlError as e:  # the provider failed, not the model: this rollout must not be trained on
            error = f"{type(e).__name__}: {e}"
            traj.steps.append(Step(msgs, "", error=error, role="core"))
            traj.failure = traj.failure or f"compress: {error}"
        else:
            traj.steps.append(Step.from_response(msgs, reply, role="core"))
            try:
                action = parse_actions(MemoryType.CORE, reply.text)[0].model_dump()
                if action["operation"] != "REWRITE" or not 0 < len(action["content"]) < len(core):
                    raise ValueError("compression must REWRITE core memory into fewer characters")
            except ValueError as e:
                error = str(e)
            else:
                report = await apply_actions(memory, ns, MemoryType.CORE, action, actor="membuilder:core")
                if report.failed:
                    error = report.failed[0]["error"]
                elif len(action["content"]) >= cfg.compress_to:
                    error = f"compressed to {len(action['content'])} characters, not under {cfg.compress_to}"
        if error is not None:
            result.failures.append({"type": "core", "stage": "compress", "error": error})
            traj.info.setdefault("compress_errors", []).append(error)
        traj.metrics["compressions"] = traj.metrics.get("compressions", 0) + 1
        return len(await memory.core(namespace=ns)) < len(core)

    def _finish(
        self, result: SessionResult, runs: dict[MemoryType, _Run], core: str, compressed: bool
    ) -> None:
        agents: dict[str, Any] = {}
        for t, run in runs.items():
            rep = run.report
            m = {
                "parsed": rep is not None,
                "proposed": len(rep.applied) + len(rep.failed) if rep else 0,
                "applied": len(rep.applied) if rep else 0,
                "failed": len(rep.failed) if rep else 0,
                "skips": rep.skips if rep else 0,  # applied, and changed nothing on purpose
                "context_items": len(run.context_ids),
                "finish_reason": run.reply.finish_reason if run.reply else None,
                "reply_chars": len(run.reply.text) if run.reply else 0,
                # the memory text the policy wrote this session (ADRPO's length penalty measures it)
                "written_chars": rep.written_chars if rep else 0,
            }
            run.trajectory.metrics.update(m)
            run.trajectory.info.update(context_ids=run.context_ids, report=rep.to_dict() if rep else None)
            agents[t.value] = {**m, "prompt_tokens": run.trajectory.prompt_tokens,
                               "completion_tokens": run.trajectory.completion_tokens}  # fmt: skip
            result.trajectories.append(run.trajectory)
        result.prompt_tokens = sum(r.trajectory.prompt_tokens for r in runs.values())
        result.completion_tokens = sum(r.trajectory.completion_tokens for r in runs.values())
        result.stats = {
            "context": self.config.context,
            "agent_calls": len(runs),
            "parsed": sum(a["parsed"] for a in agents.values()),
            "actions_proposed": sum(a["proposed"] for a in agents.values()),
            "actions_applied": sum(a["applied"] for a in agents.values()),
            "skips": sum(a["skips"] for a in agents.values()),
            "compressed": compressed,
            "core_chars": len(core),
            "agents": agents,
        }
