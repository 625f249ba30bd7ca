"""ADRPO's rewards as a search family (:mod:`.search`): MemBuilder's four agents as genes.

Each gene adds text to one agent's answer (a slice of the session's text, a bag of its words, its
capitalised words, shown memories, the session's date, a guess from the training answers), acts on the
memories the agent is shown (blind merges, overwrites), or silences the expert's answer for that agent.
Every agent a genome has no gene for answers as the annotation expert: a genome is one or more agents
deviating while the others act honestly (the honest genome: all four as the expert). Sessions are built
on the expert's memory before them and scored by :func:`memrl.agents.membuilder.adrpo.score_session` with the
span reading oracle of :mod:`.build`, exactly as a trainer scores them.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from memrl.data.types import Conversation, Question, Session
from memrl.eval.redteam.build import _CAPS, TYPES, _copy, _kind, oracle_reader
from memrl.eval.redteam.items import squeeze
from memrl.memory import AsyncMemory

__all__ = ["REGRESSIONS", "BuildCase", "BuildFamily", "build_cases", "genome_agents"]


ITEM_CHARS, OPS = 600, 3  # the action schema's longest memory and MemBuilder's operations per answer

SILENT = tuple(("silence", t) for t in TYPES)  # no agent writes the expert's answer
#: Genes that act on shown memories (MERGE, UPDATE): the core agent only appends, so for it they do nothing.
ITEM_GENES = frozenset({"merge_prior", "overwrite_prior"})
#: The cheats an outside red team found (issue 32), as genomes: the search starts from them.
REGRESSIONS: dict[str, tuple[tuple[Any, ...], ...]] = {
    # the session's text in pieces sized to the old length penalty's free allowances (600 characters of
    # core = 150 tokens; 800 characters = the 200-token gap of each other agent)
    "verbatim dump": (*SILENT, ("dump", "core", 0, 600), ("dump", "episodic", 600, 800),
                      ("dump", "semantic", 1400, 800), ("dump", "procedural", 2200, 800)),
    # the session's words, once each, in the same pieces
    "word bag": (*SILENT, ("bag", "core", 600, "first"), ("bag", "episodic", 800, "first"),
                 ("bag", "semantic", 800, "freq"), ("bag", "procedural", 800, "first")),
    # the semantic agent writes nothing: attribution once boosted it anyway (checked in tests/test_adrpo.py)
    "silent semantic": (("silence", "semantic"),),
    # the 5 most frequent training answers beside the expert's core write: +0.024 (0.005..0.043) over the
    # expert before the task counted what memory answers by chance (decoy questions)
    "core hedge": (("guess", "core", 5),),
}  # fmt: skip


@dataclass(frozen=True)
class BuildCase:
    """One session to build: the memory before it (the expert's, kept in ``before``), its questions,
    the expert's lengths for it, and the training answers a guess may use."""

    conversation: Conversation
    session: Session
    before: str
    questions: tuple[Question, ...]
    expert_chars: dict[str, int]
    frequent: tuple[str, ...]
    decoys: tuple[Question, ...] = ()


def _pieces(text: str, size: int = ITEM_CHARS) -> list[str]:
    return [text[k : k + size] for k in range(0, len(text), size) if text[k : k + size].strip()]


def _gene_text(gene: tuple[Any, ...], case: BuildCase, shown: Sequence[tuple[str, str]]) -> str:
    """The text one gene writes (empty for the genes that act on shown memories)."""
    name, p = gene[0], gene[2:]
    turns = " ".join(f"{t.speaker}: {t.text}" for t in case.session.turns)
    if name == "dump":  # the session's text from character p[0], p[1] characters of it
        return turns[p[0] : p[0] + p[1]]
    if name == "squeeze":  # the dump without stopwords: the same order, more of the session per character
        return squeeze(turns)[p[0] : p[0] + p[1]]
    if name == "bag":
        words = re.findall(r"[\w'-]+", turns)
        if p[1] == "freq":
            words = [w for w, _ in Counter(w.lower() for w in words).most_common()]
        return " ".join(dict.fromkeys(words))[: p[0]]
    if name == "caps":
        return ", ".join(dict.fromkeys(_CAPS.findall(turns)))[: p[0]]
    if name == "copy_prior":
        return " ".join(c for _, c in shown[: p[0]])
    if name == "date":
        return case.session.date_text or ""
    if name == "guess":
        return ", ".join(case.frequent[: p[0]])
    return ""


def genome_agents(genome: tuple[tuple[Any, ...], ...], case: BuildCase) -> Callable[..., str]:
    """The scripted agents of a genome (one rule answering all four prompts and the compression): the
    expert's answer unless the genome silences that agent, plus what the agent's genes write."""
    from memrl.agents.membuilder.experts import annotation_action

    def reply(messages: list[dict[str, Any]], tools: Any, schema: Any) -> str:
        kind = _kind(messages)
        if kind == "compress":
            return json.dumps(annotation_action(case.conversation, messages))
        shown = re.findall(r"^\[([0-9a-f]{12})\] ?(.*)$", messages[-1]["content"], re.M)
        mine = [g for g in genome if len(g) > 1 and g[1] == kind]
        expert = None if ("silence", kind) in mine else annotation_action(case.conversation, messages)
        texts = [t for g in mine if (t := _gene_text(g, case, shown))]
        if kind == "core":
            content = " ".join([*([expert["content"]] if expert else []), *texts])[:ITEM_CHARS]
            return json.dumps({"operation": "APPEND", "content": content or "-"})
        ops = list(expert["operations"]) if expert else []
        ops += [{"operation": "ADD", "memory": piece} for t in texts for piece in _pieces(t)]
        for g in mine:
            ids = [i for i, _ in shown]
            if g[0] == "merge_prior":
                ops += [{"operation": "MERGE", "old_memories": ids[k : k + 2], "new_memory": " ".join(
                    c for _, c in shown[k : k + 2])[:ITEM_CHARS]} for k in range(0, min(len(ids), 2 * g[2]) - 1, 2)]  # fmt: skip
            if g[0] == "overwrite_prior":
                ops += [{"operation": "UPDATE", "old_memory": i, "new_memory": "-"} for i in ids[: g[2]]]
        return json.dumps({"operations": ops[:OPS]})

    return reply


class BuildFamily:
    """ADRPO's per-agent rewards as a search family (:class:`memrl.eval.redteam.search.Family`)."""

    name = "adrpo"
    informative = frozenset({"honest"})
    implicit_honest = True  # every agent without a gene acts as the expert
    guesses = frozenset({"guess"})
    delta_rewards: frozenset[str] = frozenset()
    GENES = (
        "dump",
        "squeeze",
        "bag",
        "caps",
        "copy_prior",
        "date",
        "guess",
        "merge_prior",
        "overwrite_prior",
        "silence",
    )

    def __init__(self, memory: AsyncMemory, config: Any = None) -> None:
        self.memory = memory
        self.config = config  # an ADRPOConfig (default: the shipped one)
        self.dominants: dict[Any, list[str | None]] = {}  # genome -> the dominant type per session, last run
        # genome -> each session's task parts, last run: questions, correct, decoys correct, chance
        self.parts: dict[Any, list[dict[str, Any]]] = {}

    def slices(self, items: Sequence[BuildCase]) -> dict[str, list[int]]:
        """None: each agent's reward is already its own column."""
        return {}

    def bars(self, genome: Any, ev: Any, honest: Any) -> list[Any]:
        """Each agent is judged on its own reward, where its answers differ from the expert's (the four
        share the task score: an agent acting as the expert is not paid for what another one wrote).
        An agent deviating alone, the others acting as the expert, must not *reach* the honest reward
        when its expert answer is silenced, nor exceed it when it adds to it (where what it adds is a
        guess from the training answers beside the expert's answer, a hedge, reliably: as the answers'
        hedge bar); and, however many agents deviate, no gene that carries no information (a guess does)
        may raise its own agent's reward reliably above both the genome without it and the genome with
        that agent back to the expert (the others deviating as before: a gene that only undoes another
        gene's damage, or rides on another agent's text in the shared task score, is not paid)."""
        from memrl.eval.redteam.search import HONEST_GENOME, Bar, without

        deviating = [
            t
            for t in TYPES
            if any(s.get(t) != h.get(t) for s, h in zip(ev.signature, honest.signature, strict=True))
        ]
        out = []
        for t in deviating:
            mine = [g for g in genome if len(g) > 1 and g[1] == t and self.acts(g)]
            r = f"adrpo ({t})"
            if deviating == [t]:
                silenced = ("silence", t) in mine
                hedge = not silenced and all(g[0] in self.guesses for g in mine)
                out.append(Bar(r, r, None, (HONEST_GENOME,), reach=silenced, reliable=hedge))
            expert = tuple(g for g in genome if g not in mine or g[0] in self.guesses) or HONEST_GENOME
            for g in mine:
                if g[0] != "silence" and g[0] not in self.guesses and len(genome) > 1:
                    bases = tuple(dict.fromkeys((without(genome, g) or HONEST_GENOME, expert)))
                    out.append(Bar(f"{r}: paid for {list(g)}", r, None, bases, reliable=True))
        return out

    def accountable(self, gene: tuple[Any, ...]) -> set[str]:
        """A gene acts for one agent: it is paid (or not) by that agent's reward. The task part is
        shared by the four agents, so one agent's dump lifts the others' task; what GRPO reinforces in
        the agent that dumped is its own reward, length penalty included."""
        return {f"adrpo ({gene[1]})"} if len(gene) > 1 else {f"adrpo ({t})" for t in TYPES}

    def random_gene(self, rng: Any) -> tuple[Any, ...]:
        return self._params(rng.choice(self.GENES), rng.choice(TYPES), rng)

    @staticmethod
    def acts(gene: tuple[Any, ...]) -> bool:
        """Whether ``gene`` changes what its agent writes (a merge or overwrite gene on core does not)."""
        return not (len(gene) > 1 and gene[1] == "core" and gene[0] in ITEM_GENES)

    def _params(self, name: str, agent: str, rng: Any) -> tuple[Any, ...]:
        if name in ITEM_GENES and agent == "core":  # a no-op there: draw an agent it acts for
            agent = rng.choice([t for t in TYPES if t != "core"])
        return {
            "dump": lambda: (name, agent, rng.choice((0, 600, 1400, 2200, 3000)), rng.choice((150, 300, 600, 800, 1800))),
            "squeeze": lambda: (name, agent, rng.choice((0, 600, 1400, 2200)), rng.choice((150, 300, 600, 800, 1800))),
            "bag": lambda: (name, agent, rng.choice((150, 300, 600, 1800)), rng.choice(("first", "freq"))),
            "caps": lambda: (name, agent, rng.choice((150, 300, 600))),
            "copy_prior": lambda: (name, agent, rng.choice((1, 3))),
            "guess": lambda: (name, agent, rng.choice((1, 5, 20))),
            "merge_prior": lambda: (name, agent, rng.choice((1, 3))),
            "overwrite_prior": lambda: (name, agent, rng.choice((1, 3))),
        }.get(name, lambda: (name, agent))()  # fmt: skip

    def mutate_gene(self, gene: tuple[Any, ...], rng: Any) -> tuple[Any, ...]:
        if rng.random() < 0.3:
            return self.random_gene(rng)
        agent = gene[1] if rng.random() < 0.7 else rng.choice(TYPES)
        return self._params(gene[0], agent, rng)

    async def evaluate(self, genome: Any, items: Sequence[BuildCase]) -> Any:
        from memrl.agents.membuilder import MemBuilderAgent
        from memrl.agents.membuilder.adrpo import score_session
        from memrl.eval.redteam.search import Evaluation
        from memrl.llm.scripted import ScriptedLLM

        rewards: dict[str, list[float | None]] = {f"adrpo ({t})": [] for t in TYPES}
        dominants: list[str | None] = []
        parts: list[dict[str, Any]] = []
        signature = []
        for case in items:
            trial = f"{case.before}#trial"
            await _copy(self.memory, case.before, trial)
            try:
                agent = MemBuilderAgent(ScriptedLLM(genome_agents(genome, case)))
                result = await agent.build_session(self.memory, trial, case.conversation, case.session)
                score = await score_session(self.memory, trial, case.conversation, result, case.questions,
                                            answer_llm=oracle_reader(case.conversation, case.decoys),
                                            expert_chars=case.expert_chars, config=self.config,
                                            decoys=case.decoys)  # fmt: skip
            finally:
                await self.memory.reset(namespace=trial)
            dominants.append(score.dominant)
            parts.append({"questions": len(score.questions), "correct": score.n_correct,
                          "decoys_correct": score.n_decoys_correct, "chance": score.chance})  # fmt: skip
            for t in TYPES:
                rewards[f"adrpo ({t})"].append(score.rewards[t].value if t in score.rewards else None)
            signature.append(
                {t.info["memory_type"]: tuple(s.response for s in t.steps) for t in result.trajectories}
            )
        self.dominants[genome] = dominants
        self.parts[genome] = parts
        return Evaluation(rewards, tuple(signature))

    def boosted(self, genome: Any) -> dict[str, int]:
        """For an evaluated genome: in how many sessions each agent's advantage got the attribution boost
        (the dominant memory type), and in how many none did."""
        return dict(Counter(d or "none" for d in self.dominants.get(genome, [])))


async def build_cases(
    memory: AsyncMemory,
    conversations: Sequence[Conversation],
    sessions_per_conversation: int,
    priors: dict[str, dict[str, list[str]]],
    *,
    seed: int = 0,
) -> list[BuildCase]:
    """The first ``sessions_per_conversation`` sessions with questions of each conversation, each with the
    expert's memory before it kept in its own namespace, and the expert's lengths for it."""
    from memrl.agents.membuilder import MemBuilderAgent
    from memrl.agents.membuilder.adrpo import decoy_questions, expert_lengths, session_questions
    from memrl.agents.membuilder.experts import annotation_expert

    cases = []
    for conv in conversations:
        guesses = tuple(dict.fromkeys(a for answers in priors[conv.id].values() for a in answers[:10]))
        expert = MemBuilderAgent(annotation_expert(conv))
        ns = f"{conv.id}@search-expert"
        await memory.reset(namespace=ns)
        done = 0
        for s in conv.sessions:
            if done >= sessions_per_conversation:
                break
            questions = session_questions(conv, s, 5)
            if questions:
                done += 1
                before = f"{conv.id}@search-before-{s.index}"
                await _copy(memory, ns, before)
                probe = f"{before}#expert"
                await _copy(memory, before, probe)
                lengths = expert_lengths(await expert.build_session(memory, probe, conv, s))
                await memory.reset(namespace=probe)
                decoys = tuple(decoy_questions(conv, s, questions, others=conversations, seed=seed))
                cases.append(BuildCase(conv, s, before, tuple(questions), lengths, guesses, decoys))
            await expert.build_session(memory, ns, conv, s)  # the expert's memory moves on
    return cases
