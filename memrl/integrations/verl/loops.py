"""memrl's three agents as verl agent loops: ``memagent``, ``memupdate``, ``membuilder``.

Each loop is a ``verl.experimental.agent_loop.agent_loop.AgentLoopBase`` registered with verl's own
``@register`` (found through the ``verl.plugins`` entry point, :mod:`memrl.integrations.verl.plugin`), or
listed with keyword settings in ``actor_rollout_ref.rollout.agent.agent_loop_config_path``
(``memrl/resources/verl/agent_loops.yaml``). A parquet row picks its loop by ``agent_name``
(:mod:`memrl.integrations.verl.rows`). Every loop runs memrl's own agent, unchanged, on a memrl LLM whose
calls go to verl's rollout servers (:func:`memrl.integrations.verl.engine.verl_llm`), then turns the
trajectory into ``AgentLoopOutput`` objects (:mod:`memrl.integrations.verl.outputs`):

* ``memagent``: one output per chunk call and one for the final answer, the episode's reward (MemAgent's
  boxed-answer match, :func:`memrl.rewards.memagent.memagent_reward`) on the last; verl's v1 trainer
  gives all of them the episode's GRPO advantage (MemAgent's multi-conversation recipe).
* ``memupdate``: the whole tool episode (at most 30 calls) as one sequence: model tokens mask 1, tool
  results and turn headers mask 0. The episode's memory store (SQLite in memory, MemUpdate's initial
  memory from the row's conversation) lives in this process and dies with the episode: no broker. Reward
  MemUpdate's (:func:`memrl.rewards.memupdate.score_memupdate`).
* ``membuilder``: the row's session is built by all four MemBuilder agents from the row's pre-session
  memory, the session is scored with ADRPO (:func:`memrl.agents.membuilder.adrpo.score_session`: questions
  answered greedily (temperature 0, ``answer_tokens`` each) from the new memory by the policy itself through
  the same servers, judged by the official F1 or an LLM judge; the length penalty against the expert's reply
  lengths stored in the row), and the output is the row's own agent (``memory_type``) with its reward ``task x (1 - 0.8 LP)``.
  GRPO groups are then the rollouts of one (session, agent): ADRPO's per-agent comparison. The
  attribution weight (4x for the dominant memory type) is logged (``reward_extra_info``) but not applied:
  see :mod:`memrl.integrations.verl` for why verl 0.9 offers no hook for it.

What every loop shares: one embedder per process (:func:`shared_embedder`: verl builds a loop object per
sample, and loading MiniLM per episode would dominate a rollout), request ids per conversation and the
weight versions the servers reported (:mod:`memrl.integrations.verl.engine`), copied into each output's
``extra_fields`` (``min_global_steps``/``max_global_steps``: verl's v1 trainer reads them from every
sample).

A failed episode raises (:class:`~memrl.integrations.verl.outputs.RolloutFailed`, or the provider error
itself): verl's v1 worker (``AgentLoopWorkerTQ._run_prompt``) then writes nothing for that rollout and
marks the prompt's status ``failure``. What happens to the group's other rollouts is the trainer's
choice: in verl 0.9.1's synchronous mode a failed group stays sampleable and is trained on the rollouts
that finished (``ReplayBuffer`` in ``verl/trainer/ppo/v1/replay_buffer.py``: "failed groups remain
sampleable"); with ``trainer.v1.sampler.sync_refill_failed_groups=true`` a group with no rollout left is
replaced. Either way the failed rollout is no sample and never gets a reward.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from verl.experimental.agent_loop.agent_loop import AgentLoopBase, register

from memrl.errors import ConfigError, DataError
from memrl.integrations.verl.engine import verl_llm
from memrl.integrations.verl.outputs import RolloutFailed, agent_loop_outputs
from memrl.integrations.verl.rows import RowTask
from memrl.integrations.verl.shared import shared_embedder

#: Sampling of calls whose tokens are not trained (MemBuilder's answers to its scoring questions): greedy,
#: as memrl's own evaluation and the original MemBuilder answer them.
GREEDY = {"temperature": 0.0, "top_p": 1.0, "top_k": -1}


def server_fields(*llms: Any) -> dict[str, Any]:
    """The weight versions of an episode's calls over all its LLMs (see the module docstring)."""
    lows = [e.min_global_steps for e in (llm.engine for llm in llms) if e.min_global_steps is not None]
    highs = [e.max_global_steps for e in (llm.engine for llm in llms) if e.max_global_steps is not None]
    return {
        "min_global_steps": min(lows) if lows else None,
        "max_global_steps": max(highs) if highs else None,
    }


def context_cap(rollout_config: Any) -> int:
    """The most tokens one call may hold (prompt + ``max_tokens``): ``rollout.prompt_length +
    response_length`` (what verl's actor trains on; ``actor.ppo_max_token_len_per_gpu`` is sized for it), or
    vLLM's ``max_model_len`` if smaller. A call over it raises memrl's ValidationError before reaching the
    server, the agent records the episode as failed, and verl's worker marks the prompt ``failure``: one
    failed rollout (``Error in _run_prompt`` in verl's log, counted by the smoke summary), never a crash of
    the step (vLLM's own max_model_len check would raise the same way, with a less clear message)."""
    cap = int(rollout_config.prompt_length) + int(rollout_config.response_length)
    max_model_len = rollout_config.get("max_model_len") if hasattr(rollout_config, "get") else None
    return min(cap, int(max_model_len)) if max_model_len else cap


class MemrlAgentLoop(AgentLoopBase):
    """What the three loops share: the rollout LLM, the response budget, the embedder."""

    agent = ""

    def __init__(
        self, *args: Any, constraints: str = "none", embedder: str = "minilm", **kwargs: Any
    ) -> None:
        kwargs.pop("tools", None)  # verl passes its tool list to every loop; memrl's agents bring their own
        super().__init__(*args, **kwargs)
        if (self.config.get("trainer") or {}).get("use_v1") is False:
            # verl 0.9.1's legacy worker (AgentLoopWorker._run_agent_loop, main_ppo_v0) takes ONE
            # AgentLoopOutput per sample; memrl's loops return a list (MemAgent: one per call), which only
            # the v1 worker (verl/trainer/ppo/v1/agent_loop_tq.py) accepts
            raise ConfigError(f"memrl's {self.agent} loop needs verl's v1 trainer: set trainer.use_v1=true (the "
                              "legacy trainer takes one output per sample and is deprecated in verl 0.9)")  # fmt: skip
        self.constraints = constraints
        self.embedder = embedder
        self.response_length = int(self.rollout_config.response_length)
        self.prompt_length = int(self.rollout_config.prompt_length)
        self.context_length = context_cap(self.rollout_config)
        self.max_seq_len = self.prompt_length + self.response_length  # one output's budget (see outputs.py)

    def llm(self, sampling_params: dict[str, Any], *, greedy: bool = False) -> Any:
        """A memrl LLM on verl's servers for one episode (request ids: one per conversation); ``greedy``
        for calls that are not trained (their tokens never reach verl's actor)."""
        params = {**sampling_params, **GREEDY} if greedy else sampling_params
        return verl_llm(
            self.server_manager, self.tokenizer, params, request_id=uuid.uuid4().hex,
            constraints=self.constraints,  # type: ignore[arg-type]
            chat_template_kwargs=dict(self.apply_chat_template_kwargs or {}), context_length=self.context_length,
        )  # fmt: skip

    def task(self, kwargs: dict[str, Any]) -> RowTask:
        row = RowTask.from_kwargs(kwargs)
        if row.task != {"memagent": "read", "memupdate": "update", "membuilder": "build"}[self.agent]:
            raise RolloutFailed(
                f"row {row.info.get('index')} is a {row.task!r} row, not one for {self.agent}"
            )
        return row

    def memory(self) -> Any:
        from memrl.memory import AsyncMemory

        return AsyncMemory(":memory:", embedder=shared_embedder(self.embedder))


@register("memagent")
class MemAgentLoop(MemrlAgentLoop):
    """MemAgent: chunked reading with an overwritten memory, then a boxed answer."""

    agent = "memagent"

    def __init__(self, *args: Any, chunk_tokens: int = 5000, memory_tokens: int = 1024,
                 max_chunks: int | None = None, answer_tokens: int = 64, **kwargs: Any) -> None:  # fmt: skip
        from memrl.agents.memagent import MemAgentConfig

        super().__init__(*args, **kwargs)
        self.agent_config = MemAgentConfig(chunk_tokens=chunk_tokens, memory_tokens=memory_tokens,
                                           max_chunks=max_chunks, answer_tokens=answer_tokens)  # fmt: skip

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> list[Any]:
        from memrl.agents.memagent import MemAgent

        row = self.task(kwargs)
        llm = self.llm(sampling_params)
        agent = MemAgent(llm, self.agent_config)
        result = await agent.run(row.question, str(row.info.get("document") or ""), golds=row.golds,
                                 task_id=str(row.info.get("question_id") or row.info.get("index")))  # fmt: skip
        return agent_loop_outputs(result.trajectory, response_length=self.response_length,
                                  max_seq_len=self.max_seq_len, extra=server_fields(llm))  # fmt: skip


@register("memupdate")
class MemUpdateLoop(MemrlAgentLoop):
    """MemUpdate: multi-turn tool calling on an episode store owned by this loop."""

    agent = "memupdate"

    def __init__(self, *args: Any, max_tool_calls: int = 30, max_turns: int = 30, max_tokens: int = 512,
                 tool_choice: str = "auto", sample_size: int = 10, question_hits: int = 5,
                 max_tool_chars: int = 2000, **kwargs: Any) -> None:  # fmt: skip
        from memrl.agents.memupdate import MemUpdateConfig

        super().__init__(*args, **kwargs)
        self.agent_config = MemUpdateConfig(
            max_tool_calls=max_tool_calls, max_turns=max_turns, max_tokens=max_tokens,
            tool_choice=tool_choice, sample_size=sample_size, question_hits=question_hits,  # type: ignore[arg-type]
            max_tool_chars=max_tool_chars,
        )  # fmt: skip

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> list[Any]:
        from memrl.agents.memupdate import init_from_observations, run_episode

        row = self.task(kwargs)
        conv = row.conversation()
        question = row.question_obj(conv)
        memory = self.memory()
        llm = self.llm(sampling_params)
        try:
            ns = f"{conv.id}@obs"
            await init_from_observations(memory, ns, conv)
            result = await run_episode(llm, memory, ns, conv, question, config=self.agent_config)
        finally:
            await memory.close()
        return agent_loop_outputs(result.trajectory, response_length=self.response_length,
                                  max_seq_len=self.max_seq_len,
                                  extra={"stop_reason": result.stop_reason, **server_fields(llm)})  # fmt: skip


@register("membuilder")
class MemBuilderLoop(MemrlAgentLoop):
    """MemBuilder + ADRPO: one session built by the four agents, the row's agent trained."""

    agent = "membuilder"

    def __init__(self, *args: Any, context: str = "retrieved", max_operations: int = 3,
                 max_item_chars: int = 200, answer_tokens: int = 64, f1_threshold: float = 0.5,
                 judge_base_url: str | None = None, judge_model: str | None = None, **kwargs: Any) -> None:  # fmt: skip
        from memrl.agents.membuilder import MemBuilderConfig

        super().__init__(*args, **kwargs)
        self.agent_config = MemBuilderConfig(context=context, max_operations=max_operations,  # type: ignore[arg-type]
                                             max_item_chars=max_item_chars)  # fmt: skip
        self.answer_tokens = answer_tokens
        self.f1_threshold = f1_threshold
        self.judge = None
        if judge_model:  # an LLM judge behind any OpenAI-compatible endpoint (the original used one)
            from memrl.llm.openai_backend import OpenAILLM

            self.judge = OpenAILLM(judge_model, base_url=judge_base_url)

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> list[Any]:
        from memrl.agents.membuilder import MemBuilderAgent
        from memrl.agents.membuilder.adrpo import decoy_questions, score_session, session_questions

        row = self.task(kwargs)
        conv = row.conversation()
        session = conv.session(int(row.info["session"]))
        mtype = str(row.info["memory_type"])
        expert_chars = expert_lengths(row)
        memory = self.memory()
        llm, answer_llm = self.llm(sampling_params), self.llm(sampling_params, greedy=True)
        try:
            ns = f"{conv.id}@membuilder"
            lines = row.memory_lines()
            if lines:
                await memory.import_lines(lines, namespace=ns, overwrite=True)
            result = await MemBuilderAgent(llm, self.agent_config).build_session(memory, ns, conv, session)
            questions = session_questions(conv, session, len(row.golds) or 5)
            decoys = row.decoys()  # drawn from the other conversations by `memrl data prepare`
            if decoys is None:  # rows prepared before decoys: the conversation's later questions
                decoys = decoy_questions(conv, session, questions)
            await score_session(memory, ns, conv, result, questions, answer_llm=answer_llm, judge_llm=self.judge,
                                decoys=decoys,
                                f1_threshold=self.f1_threshold, expert_chars=expert_chars,
                                answer_tokens=self.answer_tokens)  # fmt: skip
        finally:
            await memory.close()
        mine = [t for t in result.trajectories if t.info.get("memory_type") == mtype]
        if not mine:
            raise RolloutFailed(f"row {row.info.get('index')}: no {mtype} agent ran (MemBuilderConfig.types)")
        traj = mine[0]
        extra = {"memory_type": mtype, "advantage_weight": float(traj.info.get("advantage_weight", 1.0)),
                 **server_fields(llm, answer_llm)}  # fmt: skip
        return agent_loop_outputs(traj, response_length=self.response_length, max_seq_len=self.max_seq_len,
                                  extra=extra)  # fmt: skip


def expert_lengths(row: RowTask) -> dict[str, int] | None:
    """The expert's reply length (characters) per memory type for the row's session, written by ``memrl
    data prepare`` (ADRPO's length penalty compares the policy's reply to it); None for rows prepared
    without an expert (``--expert none``: no length penalty for episodic/semantic/procedural)."""
    if "expert_chars" not in row.info:
        raise DataError(f"row {row.info.get('index')}: extra_info.expert_chars is missing (rows written by an "
                        "older memrl): write them again with memrl data prepare --format verl --task build")  # fmt: skip
    text = row.info["expert_chars"]
    return {str(k): int(v) for k, v in json.loads(text).items()} if text else None
