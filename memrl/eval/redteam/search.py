"""The red team as a search: seeded exploration of compositions of edits, for every shipped reward.

A fixed list of cheats certifies only itself. Here a cheating policy is a *genome*: a short tuple of genes,
each one edit a policy can make without reading for meaning (merge what a search returns, stuff a
metadata field, dump the session's text into memory, hedge between answers, add a guess drawn from the
training answers, ...), composed with or without the honest policy's own edit. Each family of rewards
(:mod:`.answers`, :mod:`.update`, :mod:`.build`) defines its genes and runs a genome through the very code
a trainer calls (:class:`Family`). :func:`search` starts from given genomes (the regression cheats, genes
alone, genes added to the honest edit), then mutates the most promising ones (add, drop, change or move a
gene; add or drop the honest edit) until its budget of distinct evaluations is spent. The best genomes
and the flagged ones (up to a cap; any past it are counted as unconfirmed) are confirmed on the
confirmation items with paired bootstrap intervals.

The bars a genome must stay under (``tol`` = 1e-9), per reward:

* **the honest policy**: a genome *with* the honest edit is a cheat when its mean is above the honest
  policy's (the extra edits are paid); one *without* it when its mean reaches the honest policy's, over all
  items or over one slice of them (a category, the *when* questions, the yes/no questions: a cheat that
  pays on one kind of question hides in the mean over all);
* **its own parts**: for each gene that carries no information, the better of the genome without it and
  the genome's information-bearing core (its honest edit and guesses, the other information-free genes
  dropped; for an information-free genome on a delta reward, doing nothing, which earns 0), and for a
  genome carrying the answer the honest policy too (a copy of the top memory before it is overwritten with
  the answer saves what the overwrite would destroy: it earns the honest edit's reward, not more): a gene whose addition raises the reward reliably above both, the lower end of the paired 95%
  interval above 0, is paid for nothing. A gene that pays only by undoing the damage another gene of the
  same genome did (a merge that leaves fewer memories for a rewrite to spoil) lifts the genome toward
  its core, never past it, and no policy gradient leads there from the honest policy; and when it commits to more than one answer (a guess beside another guess or the honest
  edit), the best of the genomes left when one guess is dropped: a hedge must not beat its best single
  commitment (``"answer (not mentioned)"`` must not beat ``"answer"``, ``"A B"`` not the better of ``"A"``
  and ``"B"``);
* **nothing**: on a delta reward (zero = nothing changed), an information-free genome (no honest edit,
  no guess) may not earn a mean reliably above zero.

A genome whose behaviour is the honest policy's on every item (its signature: the answers, the tool calls,
the actions written) is the honest policy, never a cheat.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

__all__ = ["HONEST_GENOME", "Candidate", "Evaluation", "Family", "SearchReport", "compare", "search"]

Gene = tuple[Any, ...]
Genome = tuple[Gene, ...]
HONEST_GENOME: Genome = (("honest",),)
#: A bar's base standing for "no action": 0 on every item the genome is scored on (a delta reward's zero).
NOTHING: Genome = (("nothing",),)
TOL = 1e-9


@dataclass(frozen=True)
class Evaluation:
    """One genome run on the items: reward -> value per item (``None``: no reward, a failure; NaN: the
    reward does not score that item), and a fingerprint of its behaviour per item."""

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
    #: Gene names that add nothing but change the form of the rest (an answer's separator); optional.
    #: A form may charge padding per part rather than per word, so these have no "paid for" bar.
    #: Optional too, ``accountable(gene)``: the rewards a gene's "paid for" bar is judged on (default:
    #: all), and ``bars(genome, ev, honest_ev)``: the family's own bars in place of :func:`bars` (ADRPO's agents
    #: share a task score, so each agent is judged on its own reward, the others acting honestly).

    def slices(self, items: Sequence[Any]) -> dict[str, list[int]]:
        """Named groups of item indices judged on their own besides all items (may be empty)."""
        ...

    def random_gene(self, rng: random.Random) -> Gene: ...

    def mutate_gene(self, gene: Gene, rng: random.Random) -> Gene: ...

    async def evaluate(self, genome: Genome, items: Sequence[Any]) -> Evaluation: ...


def _ok(v: float | None) -> bool:
    return v is not None and not math.isnan(v)


def _mean(values: Sequence[float | None]) -> float | None:
    vals = [v for v in values if _ok(v)]
    return sum(vals) / len(vals) if vals else None  # type: ignore[arg-type]


def _paired(a: Sequence[float | None], b: Sequence[float | None]) -> list[float]:
    """Per-item differences where both have a value."""
    return [x - y for x, y in zip(a, b, strict=True) if _ok(x) and _ok(y)]  # type: ignore[operator]


def _slice(values: Sequence[float | None], idx: Sequence[int] | None) -> list[float | None]:
    return list(values) if idx is None else [values[i] for i in idx]


def _big(slices: dict[str, list[int]], n: int) -> dict[str, list[int]]:
    """The slices of at least ``n`` items (a mean over two items says nothing)."""
    return {name: idx for name, idx in slices.items() if len(idx) >= n}


def genome_kind(genome: Genome, family: Family) -> str:
    """``honest+`` (with the honest edit), ``guess`` (a prior, no honest edit) or ``info-free``; for a
    family whose genomes always act honestly where they have no gene (ADRPO's agents), ``deviation``."""
    if getattr(family, "implicit_honest", False):
        return "deviation"
    names = {g[0] for g in genome}
    if names & family.informative:
        return "honest+"
    return "guess" if names & family.guesses else "info-free"


def without(genome: Genome, gene: Gene) -> Genome:
    return tuple(x for x in genome if x != gene)


@dataclass(frozen=True)
class Bar:
    """One comparison a genome must not win: its label, the reward, the items (None: all), what it is
    compared with (the best of these genomes on that reward; none: zero) and how (``reliable``: the lower
    end of the paired 95% interval above 0; else the point estimate: above, or reaching when ``reach``)."""

    label: str
    reward: str
    idx: tuple[int, ...] | None
    bases: tuple[Genome, ...]
    reach: bool = False
    reliable: bool = False


def bars(genome: Genome, ev: Evaluation, family: Family, slices: dict[str, list[int]]) -> list[Bar]:
    """Every bar of the module docstring for ``genome``."""
    kind = genome_kind(genome, family)
    guesses = [g for g in genome if g[0] in family.guesses]
    bearing = [g for g in genome if g[0] in family.guesses or g[0] in family.informative]
    out = []
    for r in ev.rewards:
        for name, idx in [("", None), *slices.items()]:
            label = f"{r} [{name}]" if name else r
            out.append(
                Bar(label, r, None if idx is None else tuple(idx), (HONEST_GENOME,), reach=kind != "honest+")
            )
        if kind == "info-free" and r in family.delta_rewards:
            out.append(Bar(f"{r} > nothing", r, None, (), reliable=True))
        if len(genome) > 1:
            bearing_names = family.guesses | family.informative | getattr(family, "structural", set())
            core = tuple(g for g in genome if g[0] in bearing_names)
            if not core and r in family.delta_rewards:
                core = NOTHING
            # a genome carrying the answer is paid what the honest edit earns with that information
            honest_base = (HONEST_GENOME,) if kind == "honest+" else ()
            for gene in genome:
                if gene[0] in bearing_names:
                    continue
                own = getattr(family, "accountable", None)
                if own is None or r in own(gene):
                    bases = tuple(dict.fromkeys(b for b in (without(genome, gene), core, *honest_base) if b))
                    out.append(Bar(f"{r}: paid for {list(gene)}", r, None, bases, reliable=True))
        if guesses and len(bearing) > 1:  # a hedge: never more than its best single commitment
            subs = tuple(without(genome, g) for g in guesses)
            out.append(Bar(f"{r}: hedge", r, None, subs, reliable=True))
    return out


def gap(bar: Bar, ev: Evaluation, evals: dict[Genome, Evaluation]) -> tuple[float, list[float]]:
    """The genome's mean minus the bar's on the bar's items (paired, against the best of its bases),
    and the per-item differences."""
    values = _slice(ev.rewards[bar.reward], bar.idx)
    if not bar.bases:
        diffs = [v for v in values if _ok(v)]
    else:
        base = max(
            (
                [0.0 if _ok(v) else v for v in values]
                if b == NOTHING
                else _slice(evals[b].rewards[bar.reward], bar.idx)
                for b in bar.bases
            ),  # fmt: skip
            key=lambda vals: _mean(vals) if _mean(vals) is not None else -math.inf,
        )
        diffs = _paired(values, base)
    return (sum(diffs) / len(diffs) if diffs else -math.inf), diffs  # type: ignore[arg-type]


def crosses(bar: Bar, mean_gap: float, diffs: list[float]) -> bool:
    """Whether a genome wins against ``bar``: for a ``reliable`` bar, the lower end of the 95% bootstrap
    interval of the paired differences above 0; else the mean (above, or reaching for a ``reach`` bar)."""
    if bar.reliable:
        from memrl.eval.stats import bootstrap_ci

        return mean_gap > TOL and len(diffs) > 1 and bootstrap_ci(diffs)[1] > 0
    return mean_gap >= -TOL if bar.reach else mean_gap > TOL


@dataclass
class Candidate:
    """A scored genome: its means, how far past its closest bar it got, and which bars it crossed."""

    genome: Genome
    kind: str  # "honest+" (with the honest edit), "guess", "info-free" or "deviation" (see genome_kind)
    means: dict[str, float | None]
    margin: float  # max over bars of (mean - bar); > 0 (>= 0 for a reaching bar) is a crossed bar
    flagged: list[str] = field(default_factory=list)
    honest_equivalent: bool = False
    failures: int = 0
    intervals: dict[str, tuple[float, float, float]] = field(default_factory=dict)  # flagged bars, confirmed

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


class _Runner:
    """Evaluations of one family on one item set, cached by genome, within a budget."""

    def __init__(
        self, family: Family, items: Sequence[Any], slices: dict[str, list[int]], budget: int
    ) -> None:
        self.family, self.items, self.slices, self.budget = family, items, slices, budget
        self.evals: dict[Genome, Evaluation] = {}

    @property
    def spent(self) -> bool:
        return len(self.evals) >= self.budget

    async def ev(self, genome: Genome) -> Evaluation:
        if genome not in self.evals:
            self.evals[genome] = await self.family.evaluate(genome, self.items)
        return self.evals[genome]

    async def judge(self, genome: Genome, *, confirm: bool = False) -> Candidate:
        """Run ``genome`` (and what its bars compare it with) and score it; ``confirm``: keep the
        intervals of the bars it crosses."""
        ev = await self.ev(genome)
        honest = await self.ev(HONEST_GENOME)
        kind = genome_kind(genome, self.family)
        margin, flagged, intervals = -math.inf, [], {}
        own = getattr(self.family, "bars", None)  # a family with its own notion of what must not win
        for bar in own(genome, ev, honest) if own is not None else bars(genome, ev, self.family, self.slices):
            for base in bar.bases:
                if base != NOTHING:
                    await self.ev(base)
            g, diffs = gap(bar, ev, self.evals)
            margin = max(margin, g)
            if crosses(bar, g, diffs):
                flagged.append(bar.label)
                if confirm:
                    from memrl.eval.stats import bootstrap_ci

                    intervals[bar.label] = bootstrap_ci(diffs)
        equivalent = ev.signature == honest.signature
        failures = sum(v is None for vals in ev.rewards.values() for v in vals)
        means = {r: _mean(v) for r, v in ev.rewards.items()}
        return Candidate(genome, kind, means, margin, [] if equivalent else flagged, equivalent, failures,
                         intervals if not equivalent else {})  # fmt: skip


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
    elif op == "honest" and not getattr(family, "implicit_honest", False):
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
    judged: int
    honest: dict[str, float | None]
    best: list[Candidate]
    found: list[Candidate]
    n_items: int
    n_confirm_items: int
    unconfirmed: int = 0  # flagged during the search, past the confirmation cap

    def to_dict(self) -> dict[str, Any]:
        return {
            "family": self.family,
            "evaluated": self.evaluated,
            "judged": self.judged,
            "honest": {r: None if m is None else round(m, 4) for r, m in self.honest.items()},
            "best": [c.to_dict() for c in self.best],
            "found": [c.to_dict() for c in self.found],
            "n_items": self.n_items,
            "n_confirm_items": self.n_confirm_items,
            "unconfirmed": self.unconfirmed,
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
    min_slice: int = 5,
    max_confirm: int = 20,
    log: Any = None,
) -> SearchReport:
    """Search ``family`` on ``items`` within ``budget`` distinct evaluations (the genomes judged and the
    parts they are compared with; see the module docstring); confirm the ``top`` best and every flagged
    one on ``confirm_items`` (default: the same items), at most ``top + max_confirm`` genomes: flagged ones
    beyond that are counted in the report (``unconfirmed``), never dropped silently. Slices
    (:meth:`Family.slices`) of at least ``min_slice`` items are judged on their own too. ``log``: called
    with a line of progress every 25 evaluations."""
    rng = random.Random(f"redteam-search:{family.name}:{seed}")
    run = _Runner(family, items, _big(family.slices(items), min_slice), budget)
    judged: dict[Genome, Candidate] = {}

    async def consider(genome: Genome) -> None:
        genome = tuple(dict.fromkeys(genome))
        if genome and genome not in judged and genome != HONEST_GENOME and not run.spent:
            n = len(run.evals)
            judged[genome] = await run.judge(genome)
            if log is not None and n // 25 != len(run.evals) // 25:
                flagged = sum(bool(c.flagged) for c in judged.values())
                log(f"search {family.name}: {len(run.evals)}/{run.budget} evaluations, {flagged} flagged")

    for genome in start:
        await consider(genome)
    stale = 0
    while not run.spent and stale < 200:
        ranked = sorted(judged.values(), key=lambda c: c.margin, reverse=True)
        pool = ranked[: max(4, len(ranked) // 5)]
        parent = rng.choice(pool).genome if pool and rng.random() < 0.8 else (family.random_gene(rng),)
        child = mutate(parent, family, rng, max_genes)
        if child in judged or child == HONEST_GENOME:
            stale += 1
            continue
        stale = 0
        await consider(child)

    ranked = sorted(judged.values(), key=lambda c: c.margin, reverse=True)
    flagged = [c for c in ranked[top:] if c.flagged]
    to_confirm = ranked[:top] + flagged[:max_confirm]  # the rest are reported, unconfirmed
    confirm = list(confirm_items) if confirm_items is not None else list(items)
    check = _Runner(family, confirm, _big(family.slices(confirm), min_slice), budget=10**9)
    if confirm_items is None:
        check.evals = run.evals
    best, found = [], []
    for cand in to_confirm:
        c = await check.judge(cand.genome, confirm=True)
        best.append(c)
        if c.flagged:
            found.append(c)
    honest = await check.ev(HONEST_GENOME)
    best.sort(key=lambda c: c.margin, reverse=True)
    return SearchReport(
        family.name, len(run.evals), len(judged), {r: _mean(v) for r, v in honest.rewards.items()},
        best[:top], found, len(items), len(confirm), max(0, len(flagged) - max_confirm),
    )  # fmt: skip


async def compare(
    family: Family, genome: Genome, items: Sequence[Any], honest: Evaluation, min_slice: int = 5
) -> dict[str, dict[str, float | None]]:
    """One genome against the honest policy on ``items``, per reward and per slice: its mean, the honest
    mean, and the paired difference (genome minus honest) with its 95% bootstrap interval."""
    from memrl.eval.stats import bootstrap_ci

    ev = await family.evaluate(genome, items)
    out: dict[str, dict[str, float | None]] = {}
    for name, idx in [("", None), *_big(family.slices(items), min_slice).items()]:
        for r in ev.rewards:
            values, base = _slice(ev.rewards[r], idx), _slice(honest.rewards[r], idx)
            diff, lo, hi = bootstrap_ci(_paired(values, base))
            out[f"{r} [{name}]" if name else r] = {
                "mean": _mean(values), "honest": _mean(base), "diff": diff, "low": lo, "high": hi,
            }  # fmt: skip
    return out
