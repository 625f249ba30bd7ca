"""ADRPO rewards for MemBuilder rollouts: score a freshly built session with questions about it.

MemBuilder trains its four agents with dense per-session rewards (REFERENCE.md section 2). After the
agents' actions for session *s* are applied to the pre-session memory, up to five questions about the
session are answered from that memory (core memory + the top-10 retrieved items, the answer prompt of
:mod:`memrl.scoring.answer`) and judged 0/1 by an LLM judge (:mod:`memrl.scoring.judge`), or, without one, by
the official metric against a threshold (see :func:`score_session`). Then per agent::

    task = correct / 5                       (0 for an agent whose JSON did not parse; a session
                                              with fewer questions can earn at most n / 5)
    r    = task * (1 - 0.8 * LP)             (LP only when task > 0)

with the length penalties of :mod:`memrl.rewards.membuilder` measured on the memory text the agent wrote
this session (``written_chars``: the contents of its actions, not the JSON around them; converted to tokens
with the same rule for the policy and the expert; the core agent's against the expert's core write too),
and the attribution weight: the agent of the memory type retrieved most often over the session's
questions, among the memories this session wrote (:func:`written_item_ids`), gets its GRPO advantage
multiplied by alpha = 4.

Memory that states likely answers whatever the session said (the most frequent training answers appended
to core memory: a hedge the red team found paying +0.024 on the core reward, 95% CI 0.005..0.043) is paid
whenever a guess happens to be right. So each session is also asked *decoys*, questions whose answers it
does not state (:func:`decoy_questions`: other conversations' questions with this conversation's names, or
this conversation's later questions), one per question of the same category, and::

    task = (correct - decoys_correct * questions / decoys) / 5      (signed, in [-1, 1])

A guess answers decoys as often as the session's own questions; memory of what the session said does not.
The task is not clipped at 0: a clip would keep the sessions a guess wins and forgive those it loses.

Questions come from the data set's own annotations (:func:`session_questions`: a question "about"
session *s* is one whose evidence ends in it; LoCoMo annotates every question so), drawn in the
original's mix of 50% single-session, 30% multi-session and 20% temporal questions, deterministically
by seed. Pass your own (e.g. synthetic) :class:`~memrl.data.types.Question` list to use others.

Failures are never rewards: an answer that could not be produced or a judge reply that could not be
read makes the task reward a failure with no value for every agent of that session (the trainer drops
the sample; ``Trajectory.reward`` stays ``None`` and ``info["reward_failure"]`` says why); when one
agent's call failed (provider error), no agent of that rollout is rewarded, since the memory they are
judged on lacks that agent's writes.

To make a GRPO group, build the same session several times from clones of the pre-session namespace
(:func:`rollout_group`), score each, and compare agents of the same type across the group.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from memrl.agents.base import Builder, SessionResult
from memrl.data.types import Conversation, Question, Session
from memrl.errors import NotFoundError
from memrl.llm.base import LLM
from memrl.memory import AsyncMemory
from memrl.rewards.answer import answer_reward
from memrl.rewards.membuilder import (
    ADRPOConfig,
    adrpo_agent_reward,
    attribution_weights,
    core_length_penalty,
    dominant_type,
    relative_length_penalty,
    task_reward,
)
from memrl.rewards.outcome import RewardOutcome
from memrl.scoring.answer import answer_from_memory
from memrl.scoring.judge import judge_answer
from memrl.scoring.metrics import score as official_score

__all__ = [
    "SessionScore",
    "decoy_questions",
    "expert_lengths",
    "rollout_group",
    "score_session",
    "session_questions",
    "written_item_ids",
]

#: Characters of retrieved memory the answerer reads when scoring a session (about ten 100-character memories).
CONTEXT_CHARS = 1000

#: The original's synthetic question mix: kind -> share.
QUESTION_MIX: tuple[tuple[str, float], ...] = (
    ("single-session", 0.5),
    ("multi-session", 0.3),
    ("temporal", 0.2),
)


def _kind(q: Question, session: int) -> str:
    if q.category == "temporal":
        return "temporal"
    return "single-session" if set(q.evidence_sessions) == {session} else "multi-session"


def _quotas(n: int) -> dict[str, int]:
    """Largest-remainder split of ``n`` questions over :data:`QUESTION_MIX` (5 -> 3/1/1)."""
    raw = [(kind, n * share) for kind, share in QUESTION_MIX]
    quota = {kind: int(x) for kind, x in raw}
    by_remainder = sorted(raw, key=lambda kx: kx[1] - int(kx[1]), reverse=True)
    for kind, _ in by_remainder[: n - sum(quota.values())]:
        quota[kind] += 1
    return quota


def session_questions(
    conversation: Conversation, session: Session | int, n: int = 5, *, seed: int = 0
) -> list[Question]:
    """Up to ``n`` of the conversation's questions that ``session`` completes, in the original's mix.

    A question belongs to the last session holding its evidence: only then can the memory built so far
    answer it (single-session: all its evidence is in this session; multi-session: some is in earlier
    ones). Adversarial questions (no answer in the conversation) and questions without evidence sessions are
    never chosen. When a kind has too few questions, the others fill its places. Deterministic by seed.
    """
    index = session if isinstance(session, int) else session.index
    pool = [
        q
        for q in conversation.questions
        if q.evidence_sessions and max(q.evidence_sessions) == index  # answerable from here on
        and q.category != "adversarial" and q.answers
    ]  # fmt: skip
    rng = random.Random(f"{conversation.id}:{index}:{seed}")
    by_kind: dict[str, list[Question]] = {kind: [] for kind, _ in QUESTION_MIX}
    for q in sorted(pool, key=lambda q: q.id):
        by_kind[_kind(q, index)].append(q)
    for qs in by_kind.values():
        rng.shuffle(qs)
    chosen: list[Question] = []
    for kind, quota in _quotas(n).items():
        chosen += by_kind[kind][:quota]
    rest = [q for kind, _ in QUESTION_MIX for q in by_kind[kind] if q not in chosen]
    return chosen + rest[: n - len(chosen)]


def _swap_names(text: str, names: Mapping[str, str]) -> str:
    """Every whole-word name of ``names`` replaced at once (two conversations may share a name)."""
    if not names:
        return text
    pattern = r"\b(" + "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True)) + r")\b"
    return re.sub(pattern, lambda m: names[m.group(1)], text)


def decoy_questions(
    conversation: Conversation,
    session: Session | int,
    questions: Sequence[Question],
    *,
    others: Sequence[Conversation] = (),
    seed: int = 0,
) -> list[Question]:
    """One decoy per question of ``questions``, of the same category where one is left: a question the
    memory built through ``session`` has no grounds to answer, asked to measure what it answers by chance.

    With ``others``, decoys are their questions with their speakers' names replaced by this conversation's
    (position for position): the same form and the same answer distribution, answers this conversation
    never states. Without, they are this conversation's questions whose evidence lies wholly in later
    sessions (the last sessions have few). Adversarial questions, questions without answers and questions
    whose text one of this conversation's questions has are never decoys. Ids are ``decoy:<id>``.
    Deterministic by seed.
    """
    index = session if isinstance(session, int) else session.index
    taken = {q.question for q in conversation.questions}
    pool: list[Question] = []
    sources = [c for c in others if c.id != conversation.id]
    for c in sources:
        names = dict(zip(c.speakers, conversation.speakers, strict=False))
        for q in c.questions:
            if q.category == "adversarial" or not q.answers:
                continue
            text = _swap_names(q.question, names)
            if text not in taken:
                answers = tuple(_swap_names(a, names) for a in q.answers)
                pool.append(dataclasses.replace(q, id=f"decoy:{q.id}", question=text, answers=answers))
    if not sources:
        pool = [
            dataclasses.replace(q, id=f"decoy:{q.id}")
            for q in conversation.questions
            if q.category != "adversarial" and q.answers and q.evidence_sessions
            and min(q.evidence_sessions) > index
        ]  # fmt: skip
    rng = random.Random(f"{conversation.id}:{index}:{seed}:decoys")
    pool.sort(key=lambda q: q.id)
    rng.shuffle(pool)
    chosen: list[Question] = []
    for q in questions:
        pick = next((d for d in pool if d.category == q.category), pool[0] if pool else None)
        if pick is not None:
            pool.remove(pick)
            chosen.append(pick)
    return chosen


def expert_lengths(result: SessionResult) -> dict[str, int]:
    """Memory type -> characters of memory text an expert's build of one session wrote (``written_chars``
    of each agent's trajectory): the ``expert_chars`` that :func:`score_session` compares the policy with."""
    return {t.info["memory_type"]: int(t.metrics.get("written_chars", 0)) for t in result.trajectories}


def written_item_ids(result: SessionResult) -> set[str]:
    """Ids of the memory items the session's agents wrote (added, updated or merged into)."""
    return {
        a["item_id"]
        for t in result.trajectories
        for a in ((t.info.get("report") or {}).get("applied") or [])
        if a.get("item_id")
    }


@dataclass
class SessionScore:
    """The judged questions of one built session and the reward of each agent."""

    session: int
    questions: list[dict[str, Any]] = field(default_factory=list)
    n_correct: int = 0
    n_failed: int = 0
    decoys: list[dict[str, Any]] = field(default_factory=list)
    n_decoys_correct: int = 0
    chance: float = 0.0
    dominant: str | None = None
    rewards: dict[str, RewardOutcome] = field(default_factory=dict)
    weights: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "session": self.session,
            "questions": self.questions,
            "n_correct": self.n_correct,
            "n_failed": self.n_failed,
            "decoys": self.decoys,
            "n_decoys_correct": self.n_decoys_correct,
            "chance": self.chance,
            "dominant": self.dominant,
            "rewards": {t: r.value for t, r in self.rewards.items()},
            "reward_failures": {t: r.failure for t, r in self.rewards.items() if r.failure},
            "weights": self.weights,
        }


async def score_session(
    memory: AsyncMemory,
    namespace: str,
    conversation: Conversation,
    result: SessionResult,
    questions: Sequence[Question],
    *,
    answer_llm: LLM,
    judge_llm: LLM | None = None,
    f1_threshold: float = 0.5,
    config: ADRPOConfig | None = None,
    expert_chars: Mapping[str, int] | None = None,
    top_k: int = 10,
    context_chars: int | None = CONTEXT_CHARS,
    answer_tokens: int = 48,
    decoys: Sequence[Question] = (),
) -> SessionScore:
    """Answer and judge ``questions`` from the memory as built, then reward each agent of ``result``.

    With ``judge_llm`` an LLM judge (CORRECT/WRONG) grades each answer, as in the original. Without one,
    an answer is correct when its training F1 (:func:`memrl.rewards.answer.answer_f1`: LoCoMo's F1 with
    every list part past the gold's count charged; the official F1 is recorded beside it) reaches ``f1_threshold``:
    deterministic and free, and the safe choice for small models, which make lenient judges (the
    135M offline model judged all five of its own answers CORRECT where one was right).

    The answerer reads core memory and the top-``top_k`` retrieved memories that fit ``context_chars``
    characters (default :data:`CONTEXT_CHARS`; None: all ``top_k``): with a count alone, agents that
    pack more text into each memory would be paid for it (the reader simply sees more).

    ``expert_chars`` maps a memory type to the memory text (characters) the expert wrote for this session
    (its trajectory's ``written_chars``: :func:`expert_lengths`); without it the episodic/semantic/procedural
    agents get no length penalty (``length_penalty`` 0 and ``expert_length`` missing in the metrics).
    ``answer_tokens`` caps each answer (one line is scored). ``decoys`` (:func:`decoy_questions`) are
    answered and judged the same way; the task pays the session's questions answered beyond what the
    decoys show the memory answers by chance (``chance`` = decoys correct x questions / decoys). Without
    decoys nothing is discounted: a guess beside the honest memory is paid when it happens to be right.
    Sets each trajectory's ``reward`` (``None`` on failure), ``metrics`` and ``info["advantage_weight"]``.
    """
    cfg = config or ADRPOConfig()
    score = SessionScore(result.session)
    asked = [*questions, *decoys]
    answers = await asyncio.gather(
        *(answer_from_memory(answer_llm, memory, namespace, conversation, q, top_k=top_k,
                             context_chars=context_chars, max_tokens=answer_tokens) for q in asked)
    )  # fmt: skip
    written = written_item_ids(result)
    retrieved_types: list[list[str]] = []
    for k, (q, a) in enumerate(zip(asked, answers, strict=True)):
        row: dict[str, Any] = {"question_id": q.id, "question": q.question, "gold": q.answer, **a.to_dict()}
        correct = False
        if a.prediction is None:
            score.n_failed += 1
        elif judge_llm is None:
            row.update(official_score(conversation, q, a.prediction))  # reported, not rewarded
            row["train_f1"] = answer_reward("f1", a.prediction, q.answers, q.category_id)
            row["judge"] = correct = row["train_f1"] >= f1_threshold
        else:
            j = await judge_answer(judge_llm, q.question, q.answer, a.prediction, question_type=q.category)
            row.update(judge=j.label, judge_error=j.error)
            if j.error is not None:
                score.n_failed += 1
            correct = j.label is True
        if k >= len(questions):  # a decoy
            score.n_decoys_correct += correct
            score.decoys.append(row)
            continue
        score.n_correct += correct
        # attribution counts the memories this session wrote, not those of earlier sessions
        retrieved_types.append(
            [t for i, t in zip(a.retrieved_ids, a.retrieved_types, strict=True) if i in written]
        )
        score.questions.append(row)
    if decoys:
        score.chance = score.n_decoys_correct * len(questions) / len(decoys)

    score.dominant = dominant_type(retrieved_types)
    types = [t.info["memory_type"] for t in result.trajectories]
    weights = attribution_weights(types, score.dominant, cfg.attribution_boost_factor)
    # One agent's provider failure leaves the shared memory without its writes: the others' answers are
    # then not theirs to be judged on, so no agent of this rollout is rewarded.
    broken = next((t for t in result.trajectories if t.failure is not None), None)
    # task = correct / 5 (the original's fixed count), or / len(questions) if more were asked
    denominator = max(cfg.n_questions, len(questions))
    for traj, mtype, weight in zip(result.trajectories, types, weights, strict=True):
        if broken is not None:
            who = "" if broken is traj else f" (the {broken.info.get('memory_type')} agent's)"
            outcome = RewardOutcome.failed(f"rollout failed{who}: {broken.failure}")
        elif not questions:
            outcome = RewardOutcome.failed("membuilder: no questions to score the session with")
        else:
            task = task_reward(
                score.n_correct,
                denominator,
                bool(traj.metrics.get("parsed")),
                n_failed=score.n_failed,
                chance=score.chance,
            )
            chars = traj.metrics.get("written_chars", 0)
            if mtype == "core":
                expert_core = expert_chars.get("core") if expert_chars is not None else None
                lp = core_length_penalty(chars, cfg, expert_chars=expert_core)
                if expert_core is not None:
                    traj.metrics["expert_length"] = expert_core
            elif expert_chars is not None and mtype in expert_chars:
                lp = relative_length_penalty(cfg.tokens(chars), cfg.tokens(expert_chars[mtype]), cfg)
                traj.metrics["expert_length"] = expert_chars[mtype]
            else:
                lp = 0.0
            outcome = adrpo_agent_reward(task, lp, cfg)
        traj.reward = outcome.value
        traj.metrics.update({f"reward_{k}": v for k, v in outcome.metrics.items()})
        traj.info["advantage_weight"] = weight
        traj.info["dominant_type"] = score.dominant
        if outcome.failure is not None:
            traj.info["reward_failure"] = outcome.failure
        if outcome.invalid is not None:
            traj.info["reward_invalid"] = outcome.invalid
        score.rewards[mtype] = outcome
        score.weights[mtype] = weight
    return score


async def rollout_group(
    builder: Builder,
    memory: AsyncMemory,
    namespace: str,
    conversation: Conversation,
    session: Session,
    n: int,
    *,
    answer_llm: LLM,
    judge_llm: LLM | None = None,
    questions: Sequence[Question] | None = None,
    config: ADRPOConfig | None = None,
    expert_chars: Mapping[str, int] | None = None,
    top_k: int = 10,
    context_chars: int | None = CONTEXT_CHARS,
    decoys: Sequence[Question] | None = None,
) -> list[tuple[SessionResult, SessionScore]]:
    """``n`` rollouts of one session, each built on its own clone of ``namespace`` (left untouched; a
    namespace never written to is an empty memory), scored.

    Clones are named ``{namespace}#g{i}`` and kept (inspect them, or delete with ``memory.reset``).
    Give the builder's LLM a temperature above 0 (and distinct seeds) or the rollouts are identical.
    ``decoys`` default to :func:`decoy_questions` from the conversation's later questions; pass them
    drawn from other conversations where there are any (``[]``: none, every guess paid).
    """
    qs = list(questions) if questions is not None else session_questions(conversation, session)
    ds = list(decoys) if decoys is not None else decoy_questions(conversation, session, qs)
    out = []
    for i in range(n):
        ns = f"{namespace}#g{i}"
        try:
            await memory.clone(namespace, ns, overwrite=True)
        except NotFoundError:  # nothing was ever written there: the session starts from an empty memory
            await memory.reset(namespace=ns)
        result = await builder.build_session(memory, ns, conversation, session)
        out.append(
            (result, await score_session(memory, ns, conversation, result, qs, answer_llm=answer_llm,
                                         judge_llm=judge_llm, config=config, expert_chars=expert_chars,
                                         top_k=top_k, context_chars=context_chars, decoys=ds))
        )  # fmt: skip
    return out
