"""What ``memrl train grpo --task read|answer|update|build`` trains on: the agents ``memrl eval`` uses, as
GRPO groups with their rewards.

A task set has ``len()`` tasks, an async ``setup()`` (stores, prompts), and ``group(llm, index, n,
temperature)`` returning the GRPO groups of ``n`` rollouts of one task (one group for most tasks; one per
memory type for ``build``). A rollout that fails (provider error, a reward that cannot be computed) has
``reward=None`` and is never trained on; a wrong or malformed answer is the policy's own and scores 0.

* :class:`ReadTasks` (``read``): MemAgent reads a conversation chunk by chunk and answers in ``\\boxed{}``;
  the final answer is constrained by a grammar to be a box (``answer_grammar``), reward the original's
  0/1 match or a denser score of the same box (``f1``, ``sub_em``).
* :class:`AnswerTasks` (``answer``): a question answered from the top-k memories of a store the ``raw``
  builder filled, with the very prompt and answer clean-up of ``memrl eval`` (:mod:`memrl.scoring.answer`);
  reward = a training score of :mod:`memrl.rewards.answer` (``f1`` by default: LoCoMo's F1 with every
  list part past the gold's count charged; ``em``; ``sub_em``), the official metric (:func:`memrl.scoring.metrics.score`) logged.
* :class:`UpdateTasks` (``update``): a MemUpdate tool episode on LoCoMo's observation memory, focused on
  one question; the local back-end constrains every reply to a tool call or plain text; reward MemUpdate's
  (:func:`memrl.rewards.memupdate.score_memupdate`).
* :class:`BuildTasks` (``build``): MemBuilder's four agents build one session (JSON actions constrained by
  their schemas) on a clone of the memory the data set's own annotations give before that session;
  ADRPO rewards (questions about the session answered from the built memory, official metric >= 0.5 as
  the judge, length penalty, attribution weight); one GRPO group per memory type.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence
from typing import Any

from memrl.agents.trajectory import Step, Trajectory
from memrl.data.types import Conversation, Question
from memrl.errors import ConfigError, MemrlError

__all__ = ["TASKS", "AnswerTasks", "BuildTasks", "MemAgentTasks", "ReadTasks", "UpdateTasks"]

#: ``read`` rewards: ``reward`` is the original's (boxed answer matches a gold, 0/1); ``f1`` and ``sub_em``
#: score the same boxed answer more densely with the training rewards of :mod:`memrl.rewards.answer` (every
#: list part past the gold's count charged; one short answer holding the whole gold), no box: 0. ``f1_unboxed`` scores the
#: whole final reply when it has no box (for unconstrained rollouts of models that never box). The
#: official metrics (MemAgent's EM, F1, sub-EM) are logged in the trajectory's metrics, never rewarded.
#: ``values``: a task asking for several values (RULER's niah_multivalue): the box as a value set,
#: precision x recall (:func:`memrl.rewards.memagent.value_set_reward`: a value repeated is not paid twice).
READ_REWARDS = ("reward", "f1", "sub_em", "f1_unboxed", "values")


def _questions(conversations: Sequence[Conversation]) -> list[tuple[Conversation, Question]]:
    return [(c, q) for c in conversations for q in c.questions if q.answers and q.category != "adversarial"]


class GroupedTasks:
    """Base: a group is ``n`` independent rollouts of one task, run concurrently (the back-end batches)."""

    items: list[Any]

    def __len__(self) -> int:
        return len(self.items)

    async def setup(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def rollout(self, llm: Any, index: int, temperature: float) -> Trajectory:
        raise NotImplementedError

    async def group(self, llm: Any, index: int, n: int, temperature: float) -> list[list[Trajectory]]:
        return [list(await asyncio.gather(*(self.rollout(llm, index, temperature) for _ in range(n))))]


class ReadTasks(GroupedTasks):
    """MemAgent reading a conversation (rendered as one document) to answer one of its questions."""

    def __init__(
        self, conversations: Sequence[Conversation], agent_config: Any = None, *, reward: str = "reward"
    ) -> None:
        from memrl.agents.memagent import MemAgentConfig, render_conversation

        if reward not in READ_REWARDS:
            raise ConfigError(f"reward must be one of {', '.join(READ_REWARDS)}, got {reward!r}")
        self.reward = reward
        self.config = agent_config or MemAgentConfig(chunk_tokens=1024, memory_tokens=256, answer_tokens=48)
        # a RULER-LoCoMo document keeps its question's LoCoMo category (the training F1's list rule)
        self.items = [(render_conversation(c), q, q.category_id or c.metadata.get("locomo_category"))
                      for c, q in _questions(conversations)]  # fmt: skip
        several = [q.id for c, q in _questions(conversations)
                   if c.metadata.get("ruler_metric") == "string_match_all" and len(q.answers) > 1]  # fmt: skip
        if several and reward != "values":  # the other rewards score one box against any one gold
            raise ConfigError(
                f"{len(several)} RULER items ask for several values ({several[0]}, ...): this reward scores "
                "one boxed answer against any one gold and would pay one of them; use reward='values' (the "
                "box as a value set), or train on niah_single_1-3, niah_multikey_1-3 or qa_2"
            )
        if not self.items:
            raise ConfigError("no question with an answer to train on")

    async def rollout(self, llm: Any, index: int, temperature: float) -> Trajectory:
        from memrl.agents.memagent import MemAgent
        from memrl.rewards.answer import reward_golds

        document, q, category = self.items[index]
        cfg = dataclasses.replace(self.config, temperature=temperature)
        golds = reward_golds(q.answers, q.category_id)
        result = await MemAgent(llm, cfg).run(q.question, document, golds=golds, task_id=q.id)
        traj = result.trajectory
        if traj.failure is None and self.reward == "values":
            from memrl.rewards.memagent import value_set_reward

            traj.reward = value_set_reward(result.final_text, list(q.answers))
        elif traj.failure is None and self.reward != "reward":
            from memrl.rewards.answer import answer_reward
            from memrl.scoring.metrics import boxed_answer

            final = result.final_text
            answer = boxed_answer(final)
            if answer is None and self.reward == "f1_unboxed":
                answer = final
            kind = "sub_em" if self.reward == "sub_em" else "f1"
            traj.reward = 0.0 if answer is None else answer_reward(kind, answer, list(q.answers), category)
        return traj


MemAgentTasks = ReadTasks  # the name of ``memrl train memagent``'s tasks


class AnswerTasks(GroupedTasks):
    """Questions answered from the top-k memories of a ``raw``-built store, exactly as ``memrl eval``."""

    def __init__(
        self,
        conversations: Sequence[Conversation],
        *,
        db_path: str = ":memory:",
        embedder: str = "minilm",
        top_k: int = 10,
        max_tokens: int = 48,
        reward: str = "f1",
    ) -> None:
        from memrl.rewards.answer import ANSWER_REWARDS

        if reward not in ANSWER_REWARDS:
            raise ConfigError(f"answer reward must be one of {', '.join(ANSWER_REWARDS)}, got {reward!r}")
        self.conversations = list(conversations)
        self.items = _questions(self.conversations)
        if not self.items:
            raise ConfigError("no question with an answer to train on")
        self.db_path, self.embedder, self.top_k, self.max_tokens = db_path, embedder, top_k, max_tokens
        self.reward = reward
        self.messages: list[list[dict[str, str]]] = []
        self._ready = False

    @classmethod
    def from_prompts(cls, items: list, messages: list, *, max_tokens: int = 48) -> AnswerTasks:
        """Tasks whose prompts are already rendered (``items``: (conversation, question) pairs)."""
        tasks = cls([c for c, _ in items][:1], max_tokens=max_tokens)
        tasks.items, tasks.messages, tasks._ready = list(items), list(messages), True
        return tasks

    async def setup(self) -> None:
        """Build each conversation's store with the ``raw`` builder (once; an existing namespace is reused)
        and render every question's prompt (retrieval is deterministic, so it is done once)."""
        from memrl.agents.base import create_builder
        from memrl.memory import AsyncMemory
        from memrl.scoring.answer import answer_messages

        if self._ready:
            return
        memory = AsyncMemory(self.db_path, embedder=self.embedder)
        try:
            builder = create_builder("raw")
            for conv in self.conversations:
                ns = f"{conv.id}@raw"  # memrl eval's namespace for the raw builder
                if await memory.count(namespace=ns) == 0:
                    await builder.build(memory, ns, conv)
            self.messages = []
            for conv, q in self.items:
                ns = f"{conv.id}@raw"
                hits = await memory.search(q.question, namespace=ns, top_k=self.top_k)
                core = await memory.core(namespace=ns)
                self.messages.append(answer_messages(conv, q, core, hits))
            self._ready = True
        finally:
            await memory.close()

    def gold_trajectories(self) -> list[Trajectory]:
        """Supervised examples for SFT before GRPO (after :meth:`setup`): each task's very prompt, answered
        with its first gold answer (:func:`memrl.train.sft.sft_samples` turns them into samples whose loss
        is on the answer tokens only)."""
        if not self._ready:
            raise ConfigError("gold_trajectories() needs setup() first (the prompts hold retrieved memories)")
        return [Trajectory("answer", q.id, steps=[Step(msgs, q.answers[0], role="answer")],
                           info={"conversation": conv.id})
                for (conv, q), msgs in zip(self.items, self.messages, strict=True)]  # fmt: skip

    async def rollout(self, llm: Any, index: int, temperature: float) -> Trajectory:
        from memrl.llm.base import SamplingParams
        from memrl.rewards.answer import answer_reward
        from memrl.scoring.answer import clean_prediction
        from memrl.scoring.metrics import score

        conv, q = self.items[index]
        msgs = self.messages[index]
        traj = Trajectory("answer", q.id, info={"conversation": conv.id})
        try:
            reply = await llm.chat(
                msgs, sampling=SamplingParams(temperature=temperature, max_tokens=self.max_tokens)
            )
        except MemrlError as e:
            traj.failure = f"{type(e).__name__}: {e}"
            traj.steps.append(Step(msgs, "", error=traj.failure, role="answer"))
            return traj
        traj.steps.append(Step.from_response(msgs, reply, role="answer"))
        prediction = clean_prediction(reply.text)
        scores = score(conv, q, prediction)  # the official metrics, reported
        traj.reward = answer_reward(self.reward, prediction, list(q.answers), q.category_id)
        traj.metrics.update(scores, prediction=prediction, empty=not prediction, train_reward=traj.reward)
        return traj


class UpdateTasks(GroupedTasks):
    """MemUpdate episodes on LoCoMo's observation memory, one task per question, MemUpdate's reward."""

    def __init__(
        self, conversations: Sequence[Conversation], agent_config: Any = None, *, embedder: str = "minilm"
    ) -> None:
        from memrl.agents.memupdate import MemUpdateConfig
        from memrl.rewards.memupdate import scorable_tokens

        self.conversations = list(conversations)
        self.items = [
            (c, q)
            for c, q in _questions(self.conversations)
            if q.answerable and scorable_tokens(q.answer, q.question)
        ]
        if not self.items:
            raise ConfigError("no question with a scorable answer to train on")
        self.config = agent_config or MemUpdateConfig(max_tool_calls=4, max_turns=4, max_tokens=128,
                                                      sample_size=5, question_hits=3)  # fmt: skip
        self.embedder = embedder
        self.memory: Any = None

    async def setup(self) -> None:
        from memrl.agents.memupdate import init_from_observations
        from memrl.memory import AsyncMemory

        self.memory = AsyncMemory(":memory:", embedder=self.embedder)
        for conv in self.conversations:
            await init_from_observations(self.memory, f"{conv.id}@obs", conv)

    async def close(self) -> None:
        if self.memory is not None:
            await self.memory.close()

    async def rollout(self, llm: Any, index: int, temperature: float) -> Trajectory:
        from memrl.agents.memupdate import run_episode

        conv, q = self.items[index]
        cfg = dataclasses.replace(self.config, temperature=temperature)
        result = await run_episode(llm, self.memory, f"{conv.id}@obs", conv, q, config=cfg)
        return result.trajectory


class BuildTasks(GroupedTasks):
    """MemBuilder sessions with ADRPO rewards; a task is one session, its groups one per memory type."""

    def __init__(
        self,
        conversations: Sequence[Conversation],
        agent_config: Any = None,
        *,
        embedder: str = "minilm",
        n_questions: int = 5,
    ) -> None:
        from memrl.agents.membuilder import MemBuilderConfig
        from memrl.agents.membuilder.adrpo import decoy_questions, session_questions

        self.conversations = list(conversations)
        self.config = agent_config or MemBuilderConfig(max_operations=2, max_item_chars=120)
        self.items = [
            (c, s, qs)
            for c in self.conversations
            for s in c.sessions
            if (qs := session_questions(c, s, n_questions))
        ]
        if not self.items:
            raise ConfigError("no session with questions about it to train on")
        # what the memory answers without the session, measured on the other conversations' questions
        self.decoys = {
            (c.id, s.index): decoy_questions(c, s, qs, others=self.conversations) for c, s, qs in self.items
        }
        self.embedder = embedder
        self.memory: Any = None
        self.expert_chars: dict[tuple[str, int], dict[str, int]] = {}

    async def setup(self) -> None:
        """The memory before each session: the data set's annotations (LoCoMo's observations and events,
        written as MemBuilder actions by :func:`memrl.agents.membuilder.experts.annotation_expert`), built
        once."""
        from memrl.agents.membuilder import MemBuilderAgent
        from memrl.agents.membuilder.adrpo import expert_lengths
        from memrl.agents.membuilder.experts import annotation_expert
        from memrl.memory import AsyncMemory

        self.memory = AsyncMemory(":memory:", embedder=self.embedder)
        wanted = {(c.id, s.index) for c, s, _ in self.items}
        for conv in self.conversations:
            expert = MemBuilderAgent(annotation_expert(conv), self.config)
            ns = f"{conv.id}@expert"
            last = max((i for c, i in wanted if c == conv.id), default=0)
            for k, s in enumerate(conv.sessions):
                if s.index > last:
                    break
                if (conv.id, s.index) in wanted and k > 0:  # before the first session: an empty memory
                    await self.memory.clone(ns, self._before(conv, s.index), overwrite=True)
                built = await expert.build_session(self.memory, ns, conv, s)
                # what the expert wrote for this session: the length the policy's is compared with (ADRPO)
                self.expert_chars[(conv.id, s.index)] = expert_lengths(built)

    @staticmethod
    def _before(conv: Conversation, index: int) -> str:
        return f"{conv.id}@before-s{index}"

    async def close(self) -> None:
        if self.memory is not None:
            await self.memory.close()

    async def group(self, llm: Any, index: int, n: int, temperature: float) -> list[list[Trajectory]]:
        from memrl.agents.membuilder import MemBuilderAgent
        from memrl.agents.membuilder.adrpo import rollout_group

        conv, session, questions = self.items[index]
        builder = MemBuilderAgent(llm, dataclasses.replace(self.config, temperature=temperature))
        ns = self._before(conv, session.index)
        results = await rollout_group(builder, self.memory, ns, conv, session, n, answer_llm=llm,
                                      questions=questions, decoys=self.decoys[(conv.id, session.index)],
                                      expert_chars=self.expert_chars[(conv.id, session.index)])  # fmt: skip
        for i in range(n):
            await self.memory.reset(namespace=f"{ns}#g{i}")
        by_type: dict[str, list[Trajectory]] = {}
        for result, _score in results:
            for t in result.trajectories:
                by_type.setdefault(t.info["memory_type"], []).append(t)
        return list(by_type.values())


TASKS = {"read": ReadTasks, "answer": AnswerTasks, "update": UpdateTasks, "build": BuildTasks}
