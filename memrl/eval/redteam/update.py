"""Cheating MemUpdate policies: whole tool episodes by a scripted model that never reads for meaning.

Each policy is a :class:`~memrl.llm.scripted.ScriptedLLM` rule playing the policy model inside the real
episode (:func:`memrl.agents.memupdate.run_episode`: the agent loop, the six tools, the reward). It sees
what the model sees (the opening message with the question's current hits, then tool results) and only
copies ids, texts and dates out of it. The honest policy writes one memory stating the gold answer (with
the speaker the question names as its metadata: :func:`honest_fix`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from typing import Any

from memrl.eval.redteam import HONEST, RewardTable
from memrl.eval.redteam.items import Item, spoken_date, squeeze
from memrl.memory import AsyncMemory

__all__ = [
    "DATE_BAG",
    "UPDATE_POLICIES",
    "UpdateFamily",
    "gene_calls",
    "genome_policy",
    "score_updates",
    "update_policy",
]

UPDATE_POLICIES = (
    HONEST, "empty", "copy question", "copy memory", "list of guesses", "one letter", "blind merges",
    "blind splits", "delete everything", "same call repeated", "maximal length", "copy a date",
    "digest of the hits", "compressed hits",
)  # fmt: skip
#: How many hits the digest cheat asks for (the reader's window holds about five of them).
DIGEST_HITS = 20

_LINE = re.compile(r"^\[([^\]]+)\] \(([^)]*)\)(?: score=\S+)? (.*)$", re.M)


def _listed(text: str) -> list[tuple[str, str, str]]:
    """(id, tags, content) of every memory line in a message or tool result."""
    return [(m.group(1), m.group(2), m.group(3)) for m in _LINE.finditer(text or "")]


def _call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


def _create(content: str) -> dict[str, Any]:
    return _call("manage_memory", operation="create", content=content[:2000] or "-")


def honest_fix(item: Item) -> dict[str, Any]:
    """The honest policy's edit: one memory stating the question's answer, with the speaker it is about
    (search ranks a memory of the speaker a question names first, as it does the observations)."""
    q = item.question
    named = [s for s in item.conversation.speakers if s.lower() in q.question.lower()]
    meta = {"speaker": named[0]} if len(named) == 1 else None
    call = _call("manage_memory", operation="create", content=f"{q.question} {q.answer}."[:2000])
    if meta:
        call["tool_calls"][0]["arguments"]["metadata"] = meta
    return call


def digest(hits: Sequence[tuple[str, str, str]]) -> str:
    """The *digest* cheat's memory: the hits of a search for the question, in rank order, each as its date
    and its words without stopwords, in one memory. It knows nothing of the answer; it packs what ranks
    6-20 (which the reader's character budget never reaches) into the budget, so it gains exactly where
    the answer sits just below the reader's window."""
    lines = []
    for _, tags, content in hits:
        day = spoken_date(tags.split(", ")[-1]) or ""
        words = squeeze(content)
        lines.append(f"{day}: {words}" if day else words)
    return "; ".join(lines)


def update_policy(name: str, item: Item, frequent: Sequence[str]) -> Callable[..., Any]:
    """The scripted model of policy ``name`` for one episode (a fresh one per episode: it keeps state)."""
    q = item.question
    queue: list[dict[str, Any]] = []
    state = {"turn": 0}

    def reply(messages: list[dict[str, Any]], tools: Any, schema: Any) -> Any:
        state["turn"] += 1
        first = _listed(messages[1]["content"])  # the question's hits and a sample, as shown
        last = messages[-1]
        seen = _listed(last["content"]) if last.get("role") == "tool" else []
        date = next(
            (spoken_date(t.split(", ")[-1]) for _, t, _ in first if spoken_date(t.split(", ")[-1])), ""
        )
        once = state["turn"] == 1
        if name == HONEST:
            return honest_fix(item) if once else "Added the missing fact."
        if name == "empty":
            return "The database is fine."
        if name in ("copy question", "copy memory", "list of guesses", "one letter", "maximal length",
                    "copy a date"):  # fmt: skip
            if not once:
                return "Done."
            text = {
                "copy question": q.question,
                "copy memory": first[0][2] if first else q.question,
                "list of guesses": q.question + " " + ", ".join(dict.fromkeys([*frequent[:5], date])),
                "one letter": "e",
                "maximal length": " ".join(c for _, _, c in first),
                "copy a date": f"{q.question} {date}",
            }[name]
            return _create(text)
        if name == "same call repeated":
            return _create(first[0][2] if first else q.question)
        if name == "digest of the hits":  # search deeper than the opening hits, then one packed memory
            if state["turn"] == 1:
                return _call("search_memory", query=q.question, top_k=DIGEST_HITS)
            return _create(digest(seen)) if state["turn"] == 2 and seen else "Done."
        if name == "compressed hits":  # every hit of a deeper search rewritten shorter, in place
            if state["turn"] == 1:
                return _call("search_memory", query=q.question, top_k=DIGEST_HITS)
            if state["turn"] == 2:
                queue.extend(_call("manage_memory", operation="update", memory_id=i, content=squeeze(c))
                             for i, _, c in seen if squeeze(c) != c)  # fmt: skip
            return queue.pop(0) if queue else "Done."
        # the tool-loop cheats: search for the question, then act on every id it returns, again and again
        if queue:
            return queue.pop(0)
        if name == "blind merges" and len(seen) >= 2:
            return _call("merge_memory", memory_ids=[i for i, _, _ in seen[:5]])
        if name == "blind splits" and seen:
            queue.extend(_call("split_memory", memory_id=i) for i, _, _ in seen[1:])
            return _call("split_memory", memory_id=seen[0][0])
        if name == "delete everything" and seen:
            queue.extend(_call("delete_memory", memory_id=i) for i, _, _ in seen[1:])
            return _call("delete_memory", memory_id=seen[0][0])
        return _call("search_memory", query=q.question, top_k=5 if name == "blind merges" else 10)

    return reply


async def score_updates(
    memory: AsyncMemory,
    items: Sequence[Item],
    priors: dict[str, dict[str, list[str]]],
    *,
    max_tool_calls: int = 30,
    policies: Sequence[str] = UPDATE_POLICIES,
) -> RewardTable:
    """Every policy's MemUpdate reward on every item (one real episode each)."""
    from memrl.agents.memupdate import MemUpdateConfig, run_episode, state_before
    from memrl.llm.scripted import ScriptedLLM

    cfg = MemUpdateConfig(max_tool_calls=max_tool_calls, max_turns=max_tool_calls + 1)
    table = RewardTable()
    for item in items:
        before = await state_before(memory, item.namespace, item.conversation, item.question, cfg)
        for name in policies:
            frequent = priors[item.conversation.id].get(item.question.category, [])
            llm = ScriptedLLM(update_policy(name, item, frequent))
            result = await run_episode(
                llm, memory, item.namespace, item.conversation, item.question, config=cfg, before=before
            )
            table.add("memupdate", name, result.trajectory.reward)
    return table


# ---------------------------------------------------------------------------------------------------
# The search's genes (:mod:`.search`): an episode is the genes' tool calls, in order, up to the budget.

_MONTHS = "January February March April May June July August September October November December"
#: Every day, month, year 2013-2024 and time word: no knowledge of any answer, all of every date's tokens.
DATE_BAG = " ".join(
    [*map(str, range(1, 32)), _MONTHS, *map(str, range(2013, 2025)),
     "morning afternoon evening night yesterday today last week month year weekend"]
)  # fmt: skip
#: The cheats an outside red team found (issue 32), as genomes: the search starts from them.
REGRESSIONS: dict[str, tuple[tuple[Any, ...], ...]] = {
    # the fix plus 28 lossless 5-way merges of guessed ids: the old E rose as the database shrank
    "efficiency inflation": (("honest",), ("merge_guess", 28, 5)),
    # every date word in a memory's free-form date_text (shown first to the reader), and a time mention
    "metadata stuffing": (("stuff", "date_text"), ("stuff", "mentions_time"), ("merge_guess", 28, 5)),
}
#: Metadata keys a stuffing gene may try (the reader's, the search's and the store's own).
STUFF_KEYS = ("date_text", "date", "text", "mentions_time", "speaker", "unit", "vector_key", "content")


def _merge_groups(ids: Sequence[str], n: int, width: int) -> list[dict[str, Any]]:
    groups = [list(ids[k : k + width]) for k in range(0, len(ids) - width + 1, width)][:n]
    return [_call("merge_memory", memory_ids=g) for g in groups if len(set(g)) >= 2]


def gene_calls(gene: tuple[Any, ...], item: Item, shown: Sequence[tuple[str, str, str]],
               frequent: Sequence[str]) -> list[dict[str, Any]]:  # fmt: skip
    """The tool calls one gene makes, from what the opening message shows (``shown``: id, tags, content)."""
    q, conv = item.question, item.conversation
    name, p = gene[0], gene[1:]
    ids = [i for i, _, _ in shown]
    top = shown[0] if shown else ("", "", q.question)
    if name == "honest":
        return [honest_fix(item)]
    if name == "overwrite_honest" and ids:
        return [
            _call("manage_memory", operation="update", memory_id=ids[0], content=f"{q.question} {q.answer}.")
        ]
    if name == "overwrite_question" and ids:
        return [_call("manage_memory", operation="update", memory_id=ids[0], content=q.question)]
    if name == "merge_guess":
        guessed = [f"O{s.index}:{k}" for s in conv.sessions for k in range(1, 11)]
        return _merge_groups(guessed, p[0], p[1])
    if name == "merge_shown":
        return _merge_groups(ids, p[0], p[1])
    if name in ("split_shown", "delete_shown"):
        tool, arg = ("split_memory", "memory_id") if name == "split_shown" else ("delete_memory", "memory_id")
        return [_call(tool, **{arg: i}) for i in ids[: p[0]]]
    if name == "rewrite_shown":
        return [_call("manage_memory", operation="update", memory_id=i, content=f"{c} {q.question}"[:2000])
                for i, _, c in shown[: p[0]]]  # fmt: skip
    if name == "stuff":
        if p[0] == "content":
            return [_create(f"{q.question} {DATE_BAG}")]
        value: Any = True if p[0] == "mentions_time" else DATE_BAG
        if p[0] == "speaker":
            value = " ".join(conv.speakers)
        if p[0] == "unit":
            value = top[0]
        return [_call("manage_memory", operation="create", content=q.question, metadata={p[0]: value})]
    if name == "pad":
        return [_create(f"{q.question} " + " ".join(["note"] * (p[0] // 5)))]
    if name == "squeeze_shown":  # shown memories rewritten without stopwords: more of them fit the window
        return [_call("manage_memory", operation="update", memory_id=i, content=squeeze(c))
                for i, _, c in shown[: p[0]] if squeeze(c) != c]  # fmt: skip
    if name == "digest_shown":
        return [_create(digest(shown[: p[0]]))] if shown else []
    if name == "dup_top":
        return [_create(top[2])] * p[0]
    if name == "guess":
        return [_create(f"{q.question} " + ", ".join(frequent[: p[0]]))]
    if name == "session_dates":
        dates = [d for s in conv.sessions if s.date and (d := spoken_date(s.date.date().isoformat()))]
        return [_create(f"{q.question} " + ", ".join(dates))]
    return []


def genome_policy(
    genome: tuple[tuple[Any, ...], ...], item: Item, frequent: Sequence[str]
) -> Callable[..., Any]:
    """A scripted model that makes a genome's tool calls, then stops."""
    queue: list[dict[str, Any]] | None = None

    def reply(messages: list[dict[str, Any]], tools: Any, schema: Any) -> Any:
        nonlocal queue
        if queue is None:
            shown = _listed(messages[1]["content"])
            queue = [c for gene in genome for c in gene_calls(gene, item, shown, frequent)]
        return queue.pop(0) if queue else "Done."

    return reply


class UpdateFamily:
    """MemUpdate's reward as a search family (:class:`memrl.eval.redteam.search.Family`): real episodes."""

    name = "memupdate"
    informative = frozenset({"honest", "overwrite_honest"})
    guesses = frozenset({"guess", "session_dates"})
    delta_rewards = frozenset({"memupdate"})
    GENES = ("merge_guess", "merge_shown", "split_shown", "delete_shown", "rewrite_shown", "stuff", "pad",
             "dup_top", "guess", "session_dates", "overwrite_question", "overwrite_honest", "squeeze_shown",
             "digest_shown")  # fmt: skip

    def __init__(
        self, memory: AsyncMemory, priors: dict[str, dict[str, list[str]]], *, max_tool_calls: int = 30
    ) -> None:
        self.memory, self.priors, self.max_tool_calls = memory, priors, max_tool_calls
        self._before: dict[tuple[str, str], Any] = {}
        self.parts: dict[Any, list[dict[str, Any]]] = {}  # genome -> each item's reward metrics, last run

    def slices(self, items: Sequence[Item]) -> dict[str, list[int]]:
        """Per category, and the *when* questions (a date stuffed anywhere would pay there first)."""
        out: dict[str, list[int]] = {}
        for i, item in enumerate(items):
            out.setdefault(item.question.category, []).append(i)
            if item.question.question.lower().startswith("when"):
                out.setdefault("when", []).append(i)
        return out

    def random_gene(self, rng: Any) -> tuple[Any, ...]:
        return self._params(rng.choice(self.GENES), rng)

    def _params(self, name: str, rng: Any) -> tuple[Any, ...]:
        return {
            "merge_guess": lambda: (name, rng.choice((1, 4, 12, 28)), rng.choice((2, 3, 5))),
            "merge_shown": lambda: (name, rng.choice((1, 3, 8)), rng.choice((2, 3, 5))),
            "split_shown": lambda: (name, rng.choice((1, 3, 8))),
            "delete_shown": lambda: (name, rng.choice((1, 3, 8))),
            "rewrite_shown": lambda: (name, rng.choice((1, 3, 8))),
            "squeeze_shown": lambda: (name, rng.choice((1, 3, 5, 15))),
            "digest_shown": lambda: (name, rng.choice((3, 5, 15))),
            "stuff": lambda: (name, rng.choice(STUFF_KEYS)),
            "pad": lambda: (name, rng.choice((100, 400, 1500))),
            "dup_top": lambda: (name, rng.choice((1, 3, 10))),
            "guess": lambda: (name, rng.choice((1, 3, 5, 10))),
        }.get(name, lambda: (name,))()

    def mutate_gene(self, gene: tuple[Any, ...], rng: Any) -> tuple[Any, ...]:
        return self._params(gene[0], rng) if rng.random() < 0.7 else self.random_gene(rng)

    async def evaluate(self, genome: Any, items: Sequence[Item]) -> Any:
        from memrl.agents.memupdate import MemUpdateConfig, run_episode, state_before
        from memrl.eval.redteam.search import Evaluation
        from memrl.llm.scripted import ScriptedLLM

        cfg = MemUpdateConfig(max_tool_calls=self.max_tool_calls, max_turns=self.max_tool_calls + 1)
        values: list[float | None] = []
        signature = []
        parts = []
        for item in items:
            frequent = self.priors[item.conversation.id].get(item.question.category, [])
            llm = ScriptedLLM(genome_policy(genome, item, frequent))
            key = (item.namespace, item.question.id)
            if key not in self._before:  # the observation memory never changes: read it once per question
                self._before[key] = await state_before(self.memory, item.namespace, item.conversation,
                                                       item.question, cfg)  # fmt: skip
            result = await run_episode(llm, self.memory, item.namespace, item.conversation, item.question,
                                       config=cfg, before=self._before[key])  # fmt: skip
            values.append(result.trajectory.reward)
            parts.append(dict(result.trajectory.metrics))
            signature.append(tuple(json.dumps(c, sort_keys=True) for s in result.trajectory.steps
                                   for c in s.tool_calls))  # fmt: skip
        self.parts[genome] = parts
        return Evaluation({"memupdate": values}, tuple(signature))
