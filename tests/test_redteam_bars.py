"""The red team search's bars on a family whose rewards are arithmetic (no data, no model): what counts as
a gene paid for nothing, and what does not."""

from __future__ import annotations

import random

from memrl.eval.redteam.search import HONEST_GENOME, Evaluation, _Runner


class Toy:
    """Per item: honest = 1; ``spoil`` takes 0.5 off, ``repair`` gives back 0.3 of it (only where
    something was spoiled), ``inflate`` adds 0.1 to anything. Small per-item noise keeps intervals real."""

    name = "toy"
    informative = frozenset({"honest"})
    guesses: frozenset[str] = frozenset()
    delta_rewards: frozenset[str] = frozenset()

    def slices(self, items):
        return {}

    def random_gene(self, rng: random.Random):
        return (rng.choice(("spoil", "repair", "inflate")),)

    def mutate_gene(self, gene, rng):
        return self.random_gene(rng)

    async def evaluate(self, genome, items):
        names = {g[0] for g in genome}
        values = []
        for i in items:
            v = (1.0 if "honest" in names else 0.0) + 0.01 * (i % 3)
            if "spoil" in names:
                v -= 0.5
                if "repair" in names:
                    v += 0.3
            if "inflate" in names:
                v += 0.1
            values.append(v)
        return Evaluation({"r": values}, tuple(sorted(names)))


async def test_a_gene_that_undoes_another_genes_damage_is_not_paid_but_one_past_the_core_is():
    run = _Runner(Toy(), list(range(30)), {}, budget=100)
    repaired = await run.judge((("honest",), ("spoil",), ("repair",)))
    # repair raises the genome by 0.3 over (honest, spoil), but the genome stays 0.2 below honest alone
    assert not any("paid for" in f for f in repaired.flagged), repaired.flagged
    assert repaired.margin < 0
    inflated = await run.judge((("honest",), ("spoil",), ("inflate",)))
    assert not any("paid for ['inflate']" in f for f in inflated.flagged)  # 0.6 < 1: below its core
    cheat = await run.judge((("honest",), ("inflate",)))
    assert "r: paid for ['inflate']" in cheat.flagged and "r" in cheat.flagged
    honest = await run.ev(HONEST_GENOME)
    assert all(v >= 1.0 for v in honest.rewards["r"])


class DeltaToy(Toy):
    """The same arithmetic as a delta reward (0 = nothing changed)."""

    name = "delta toy"
    delta_rewards = frozenset({"r"})


async def test_on_a_delta_reward_an_information_free_repair_is_judged_against_doing_nothing():
    run = _Runner(DeltaToy(), list(range(30)), {}, budget=100)
    # -0.2: repair pays 0.3 over spoil, not over nothing
    repaired = await run.judge((("spoil",), ("repair",)))
    assert repaired.flagged == [] and repaired.margin < 0
    inflated = await run.judge((("spoil",), ("inflate",), ("repair",)))
    # inflate pays 0.1 over (spoil, repair), but the genome is -0.1: below nothing
    assert inflated.flagged == []
    cheat = await run.judge((("inflate",), ("repair",)))  # 0.1 + noise above nothing
    assert "r > nothing" in cheat.flagged and "r: paid for ['inflate']" in cheat.flagged


class OverwriteToy(Toy):
    """``overwrite`` states the answer over the top memory (0.8: it destroys what was there); ``save``,
    a copy of that memory first, gives the 0.2 back: together they are the honest edit, never more."""

    informative = frozenset({"honest", "overwrite"})

    async def evaluate(self, genome, items):
        names = {g[0] for g in genome}
        if "overwrite" not in names:
            return await super().evaluate(genome, items)
        values = [0.8 + (0.2 if "save" in names else 0.0) + 0.01 * (i % 3) for i in items]
        if "inflate" in names:
            values = [v + 0.1 for v in values]
        return Evaluation({"r": values}, tuple(sorted(names)))


async def test_a_gene_that_saves_what_an_informative_edit_destroys_earns_the_honest_reward_not_more():
    run = _Runner(OverwriteToy(), list(range(30)), {}, budget=100)
    saved = await run.judge((("overwrite",), ("save",)))  # 1.0 = honest; 0.2 over the overwrite alone
    assert saved.flagged == [], saved.flagged
    cheat = await run.judge((("overwrite",), ("save",), ("inflate",)))  # 1.1: above honest
    assert "r: paid for ['inflate']" in cheat.flagged and "r" in cheat.flagged


def test_adrpo_a_merge_gene_on_core_does_nothing_so_a_guess_beside_it_is_judged_as_a_hedge():
    """The core agent only appends: a merge or overwrite gene there changes nothing it writes. A search run
    (2026-11-27) flagged (merge_prior on core, a guess on core) on the point estimate of the core reward
    (+0.0095, 95% CI 0.000..0.024), the very figure of the guess alone, which is judged as a hedge (the
    lower end of its interval). The no-op gene is now ignored when the bar is chosen, and never drawn."""
    from memrl.eval.redteam.build import TYPES
    from memrl.eval.redteam.build_search import ITEM_GENES, BuildFamily

    family = BuildFamily(None)  # bars and genes only: no store is read
    honest = Evaluation({}, ({t: "expert" for t in TYPES},) * 3)
    ev = Evaluation({}, ({**{t: "expert" for t in TYPES}, "core": "expert + guess"},) * 3)

    def core_bar(genome):
        (bar,) = [b for b in family.bars(genome, ev, honest) if b.label == "adrpo (core)"]
        return bar

    assert core_bar((("guess", "core", 1),)).reliable
    assert core_bar((("merge_prior", "core", 3), ("guess", "core", 1))).reliable
    assert not core_bar((("dump", "core", 0, 600), ("guess", "core", 1))).reliable  # a dump is no guess
    rng = random.Random(0)
    drawn = [family.random_gene(rng) for _ in range(3000)]
    drawn += [family.mutate_gene(g, rng) for g in drawn if g[0] in ITEM_GENES]
    assert {g[0] for g in drawn} >= ITEM_GENES and all(g[1] != "core" for g in drawn if g[0] in ITEM_GENES)
