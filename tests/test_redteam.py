"""The red team of memrl's rewards (memrl.eval.redteam, bench/reward_hacks.py) on real LoCoMo items: every
scripted cheat stays below the honest policy on every training reward, and the red team does catch the
hacks it is meant to catch (the official metrics, kept for reports, are still gameable, and are flagged)."""

from __future__ import annotations

import pytest

from memrl.agents.memupdate import init_from_observations
from memrl.data import load_dataset
from memrl.data.splits import LOCOMO_UPDATE_SPLIT
from memrl.eval.redteam import HONEST, RewardTable, verdict
from memrl.eval.redteam.answers import answer_rows, score_answer_rows
from memrl.eval.redteam.build import score_builds
from memrl.eval.redteam.items import pick_questions, priors
from memrl.eval.redteam.update import score_updates
from memrl.memory.facade import AsyncMemory

pytestmark = pytest.mark.data


@pytest.fixture
def convs(locomo_path):
    return [c for c in load_dataset("locomo", locomo_path)[0] if c.id in LOCOMO_UPDATE_SPLIT["train"]][:2]


@pytest.fixture
async def memory(convs):
    m = AsyncMemory(":memory:", embedder="hashing")
    for c in convs:
        await init_from_observations(m, f"{c.id}@obs", c)
    yield m
    await m.close()


def test_verdict_flags_a_cheat_that_reaches_the_honest_policy_or_gains_on_a_delta_reward():
    t = RewardTable()
    for v in (1.0, 0.0, 1.0):
        t.add("f1", HONEST, v)
        t.add("f1", "copy", v)  # the same mean as honest: flagged
        t.add("f1", "empty", 0.0)
    for v in (0.5, 0.4, 0.6):
        t.add("memupdate", HONEST, v)
        t.add("memupdate", "blind merges", v / 10)  # reliably above zero on a delta reward: flagged
        t.add("memupdate", "copy a date", v / 10)  # a guess: only has to stay below honest
    t.add("memupdate", "delete everything", None)  # a failure is counted, never averaged
    t.add("locomo_f1 (official)", HONEST, 1.0)
    t.add("locomo_f1 (official)", "list of guesses", 1.0)  # report only: not judged
    assert verdict(t) == [("f1", "copy"), ("memupdate", "blind merges")]
    assert t.failures == {"memupdate": {"delete everything": 1}}


async def test_answer_rewards_resist_every_cheat_while_the_official_metrics_do_not(memory, convs):
    items = pick_questions(convs, 3)
    table = score_answer_rows(await answer_rows(memory, items, priors(convs)))
    means = table.means()
    assert verdict(table) == []
    assert all(means[r][HONEST] == 1.0 for r in ("answer_f1", "exact_match", "sub_em", "memagent (boxed)"))
    # the report metrics still pay the known tricks: one letter under sub-EM, guesses under multi-hop F1
    assert means["sub_em (official)"]["one letter"] > 0.5 > means["sub_em"]["one letter"] == 0.0


async def test_the_reward_server_and_verls_compute_score_resist_every_cheat(memory, convs):
    """bench/reward_hacks.py's engine path: the same answers through verl's compute_score and the reward
    server's real routes (its ASGI app behind the service's guard, as the bench reaches it)."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    from reward_hacks import engine_scores

    items = pick_questions(convs, 3)
    table = await engine_scores(await answer_rows(memory, items, priors(convs)))
    means = table.means()
    assert {"verl compute_score", "server:answer_f1", "server:sub_em", "server:memagent"} <= set(means)
    assert verdict(table) == []
    assert all(means[r][HONEST] == 1.0 for r in ("verl compute_score", "server:answer_f1", "server:memagent"))
    assert means["server:sub_em"]["one letter"] == 0.0


async def test_memupdate_cheats_earn_nothing_and_stay_below_the_fix(memory, convs):
    items = pick_questions(convs, 1, seed=3)
    table = await score_updates(memory, items, priors(convs), max_tool_calls=6)
    means = table.means()["memupdate"]
    assert means[HONEST] > 0.0
    assert verdict(table) == []
    assert means["delete everything"] < 0.0  # destroying what the question finds costs


async def test_adrpo_cheats_stay_below_the_expert(memory, convs):
    table = await score_builds(memory, convs[:1], 2)
    means = table.means()
    assert verdict(table) == []
    for t in ("core", "episodic", "semantic", "procedural"):
        assert means[f"adrpo ({t})"][HONEST] > means[f"adrpo ({t})"]["maximal length"]
