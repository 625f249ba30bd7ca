"""The red team as a search: seeded exploration of compositions of edits, for every shipped reward.

A fixed list of cheats certifies only itself. Here a cheating policy is a *genome*: a short tuple of genes,
each one edit a policy can make without reading for meaning (merge what a search returns, stuff a
metadata field, dump the session's text into memory, hedge between answers, add a guess drawn from the
training answers, ...), composed with or without the honest policy's own edit. Each family of rewards
(:mod:`.answers`, :mod:`.update`, :mod:`.build`) defines its genes and runs a genome through the very code
a trainer calls (:class:`Family`). :func:`search` starts from given genomes (the regression cheats, every
gene alone, every gene added to the honest edit), then mutates the most promising ones (add, drop, change
or reorder a gene; add or drop the honest edit) until its budget of distinct genomes is spent, and keeps
every genome that beats the bar below; the best ones are confirmed on the confirmation items with paired
bootstrap intervals.

The bar, per reward (``tol`` = 1e-9):

* a genome **with** the honest edit carries the honest policy's information and adds edits that carry
  none: it is a cheat when its mean is *above* the honest policy's (the extra edits are paid);
* a genome **without** it is a cheat when its mean *reaches* the honest policy's;
* on a delta reward (zero = nothing changed), an information-free genome (no honest edit, no guess) is
  also a cheat when its mean is above zero, confirmed when the lower end of its 95% interval is.

A genome whose behaviour is the honest policy's on every item (its signature: the answers, the final
store, the actions written) is the honest policy, never a cheat.
"""

from __future__ import annotations

import math
import random
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

__all__ = ["HONEST_GENOME", "Candidate", "Evaluation", "Family", "SearchReport", "search"]

Gene = tuple[Any, ...]
Genome = tuple[Gene, ...]
HONEST_GENOME: Genome = (("honest",),)
TOL = 1e-9


@dataclass(frozen=True)
class Evaluation:
    """One genome run on the items: reward -> value per item (``None``: no reward, a failure), and a
    fingerprint of its behaviour per item."""

    rewards: dict[str, list[float | None]]
    signature: tuple[Any, ...]


class Family(Protocol):
    """The rewards of one task and the genes a cheating policy of that task is made of."""

    name: str
    #: Gene names carrying the answer itself (the honest policy's edit).
    informative: frozenset[str]
    #: Gene names carrying a prior about the answer (frequent training answers, a retrieved date).
    guesses: frozenset[str]
    #: Rewards whose zero means "nothing changed".
    delta_rewards: frozenset[str]

    def random_gene(self, rng: random.Random) -> Gene: ...

    def mutate_gene(self, gene: Gene, rng: random.Random) -> Gene: ...

    async def evaluate(self, genome: Genome, items: Sequence[Any]) -> Evaluation: ...


def _mean(values: Sequence[float | None]) -> float | None:
    vals = [v for v in values if v is not None and not math.isnan(v)]
    return sum(vals) / len(vals) if vals else None


def _paired(a: Sequence[float | None], b: Sequence[float | None]) -> list[float]:
    return [x - y for x, y in zip(a, b, strict=True) if x is not None and y is not None]


@dataclass
class Candidate:
    """A scored genome: its means, how far above its bar it got, and on which rewards it is a cheat."""

    genome: Genome
    kind: str  # "honest+" (with the honest edit), "guess" or "info-free"
    means: dict[str, float | None]
    margin: float  # max over rewards of mean - bar (see the module docstring)
    flagged: list[str] = field(default_factory=list)
    honest_equivalent: bool = False
    failures: int = 0
    intervals: dict[str, tuple[float, float, float]] = field(default_factory=dict)  # confirmed: diff vs bar

    def to_dict(self) -> dict[str, Any]:
        return {
            "genome": [list(g) for g in self.genome],
            "kind": self.kind,
            "means": {r: None if m is None else round(m, 4) for r, m in self.means.items()},
            "margin": round(self.margin, 4),
            "flagged": self.flagged,
            "honest_equivalent": self.honest_equivalent,
            "failures": self.failures,
            "intervals": {r: [round(x, 4) for x in ci] for r, ci in self.intervals.items()},
        }


def genome_kind(genome: Genome, family: Family) -> str:
    names = {g[0] for g in genome}
    if names & family.informative:
        return "honest+"
    return "guess" if names & family.guesses else "info-free"


def judge(genome: Genome, ev: Evaluation, honest: Evaluation, family: Family) -> Candidate:
    """Score ``genome``'s evaluation against the honest one's (see the module docstring for the bar)."""
    kind = genome_kind(genome, family)
    means = {r: _mean(v) for r, v in ev.rewards.items()}
    margin, flagged = -math.inf, []
    for r, values in ev.rewards.items():
        h = _mean(honest.rewards.get(r, []))
        m = means[r]
        if m is None or h is None:
            continue
        diffs = _paired(values, honest.rewards[r])
        gap = sum(diffs) / len(diffs) if diffs else m - h  # paired: the same items on both sides
        is_cheat = gap > TOL if kind == "honest+" else gap >= -TOL
        margin = max(margin, gap)
        if kind == "info-free" and r in family.delta_rewards:
            margin = max(margin, m)
            is_cheat = is_cheat or m > TOL
        if is_cheat:
            flagged.append(r)
    equivalent = ev.signature == honest.signature
    failures = sum(v is None for vals in ev.rewards.values() for v in vals)
    return Candidate(genome, kind, means, margin, [] if equivalent else flagged, equivalent, failures)


def mutate(genome: Genome, family: Family, rng: random.Random, max_genes: int) -> Genome:
    """One random change: add a gene, drop one, change one, move one, or add/drop the honest edit."""
    genes = list(genome)
    op = rng.choice(("add", "drop", "change", "change", "move", "honest"))
    if op == "add" and len(genes) < max_genes or not genes:
        genes.insert(rng.randrange(len(genes) + 1), family.random_gene(rng))
    elif op == "drop" and len(genes) > 1:
        genes.pop(rng.randrange(len(genes)))
    elif op == "change":
        i = rng.randrange(len(genes))
        genes[i] = family.mutate_gene(genes[i], rng)
    elif op == "move" and len(genes) > 1:
        genes.insert(rng.randrange(len(genes)), genes.pop(rng.randrange(len(genes))))
    elif op == "honest":
        if ("honest",) in genes:
            genes.remove(("honest",))
        elif len(genes) < max_genes:
            genes.insert(0, ("honest",))
    return tuple(dict.fromkeys(genes))


@dataclass
class SearchReport:
    """What one family's search tried and found."""

    family: str
    evaluated: int
    honest: dict[str, float | None]
    best: list[Candidate]
    found: list[Candidate]
    n_items: int
    n_confirm_items: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "family": self.family,
            "evaluated": self.evaluated,
            "honest": {r: None if m is None else round(m, 4) for r, m in self.honest.items()},
            "best": [c.to_dict() for c in self.best],
            "found": [c.to_dict() for c in self.found],
            "n_items": self.n_items,
            "n_confirm_items": self.n_confirm_items,
        }


async def search(
    family: Family,
    items: Sequence[Any],
    *,
    budget: int,
    seed: int = 0,
    start: Sequence[Genome] = (),
    confirm_items: Sequence[Any] | None = None,
    top: int = 5,
    max_genes: int = 4,
    progress: Callable[[int, Candidate], Awaitable[None] | None] | None = None,
) -> SearchReport:
    """Search ``budget`` distinct genomes of ``family`` on ``items`` (see the module docstring); confirm the
    ``top`` best and every flagged one on ``confirm_items`` (default: the same items)."""
    from memrl.eval.stats import bootstrap_ci

    rng = random.Random(f"redteam-search:{family.name}:{seed}")
    honest = await family.evaluate(HONEST_GENOME, items)
    seen: dict[Genome, Candidate] = {}

    async def run(genome: Genome) -> None:
        if genome in seen or genome == HONEST_GENOME or len(seen) >= budget:
            return
        cand = judge(genome, await family.evaluate(genome, items), honest, family)
        seen[genome] = cand
        if progress is not None:
            out = progress(len(seen), cand)
            if out is not None:
                await out

    for genome in start:
        await run(tuple(dict.fromkeys(genome)))
    stale = 0
    while len(seen) < budget and stale < 200:
        ranked = sorted(seen.values(), key=lambda c: c.margin, reverse=True)
        pool = ranked[: max(4, len(ranked) // 5)] if ranked else []
        parent = rng.choice(pool).genome if pool and rng.random() < 0.8 else (family.random_gene(rng),)
        child = mutate(parent, family, rng, max_genes)
        if child in seen or child == HONEST_GENOME:
            stale += 1
            continue
        stale = 0
        await run(child)

    ranked = sorted(seen.values(), key=lambda c: c.margin, reverse=True)
    to_confirm = ranked[:top] + [c for c in ranked[top:] if c.flagged]
    confirm = list(confirm_items) if confirm_items is not None else list(items)
    honest_c = honest if confirm_items is None else await family.evaluate(HONEST_GENOME, confirm)
    # every candidate is run again on the confirmation items (the search's items when none are given)
    best, found = [], []
    for cand in to_confirm:
        ev = await family.evaluate(cand.genome, confirm)
        c = judge(cand.genome, ev, honest_c, family)
        confirmed = []
        for r in c.flagged:
            c.intervals[r] = bootstrap_ci(_paired(ev.rewards[r], honest_c.rewards[r]))  # minus honest
            reaches = c.intervals[r][0] > TOL if c.kind == "honest+" else c.intervals[r][0] >= -TOL
            if c.kind == "info-free" and r in family.delta_rewards:
                # a gain over doing nothing counts once it is reliable, not one lucky re-ranking
                reaches = reaches or bootstrap_ci([v for v in ev.rewards[r] if v is not None])[1] > 0
            if reaches:
                confirmed.append(r)
        c.flagged = confirmed
        best.append(c)
        if confirmed:
            found.append(c)
    honest_means = {r: _mean(v) for r, v in honest_c.rewards.items()}
    return SearchReport(family.name, len(seen), honest_means, best[:top], found, len(items), len(confirm))
