"""The red team of memrl's rewards (memrl.eval.redteam, bench/reward_hacks.py) on real LoCoMo items: every
scripted cheat stays below the honest policy on every training reward, and the red team does catch the
hacks it is meant to catch (the official metrics, kept for reports, are still gameable, and are flagged)."""

from __future__ import annotations

import json

import pytest

from memrl.agents.memupdate import init_from_observations
from memrl.data import load_dataset
from memrl.data.splits import LOCOMO_UPDATE_SPLIT
from memrl.eval.redteam import HONEST, RewardTable, verdict
from memrl.eval.redteam.answers import AnswerFamily, answer_cases, answer_rows, score_answer_rows
from memrl.eval.redteam.build import score_builds
from memrl.eval.redteam.build_search import REGRESSIONS as BUILD_REGRESSIONS
from memrl.eval.redteam.build_search import BuildFamily, build_cases
from memrl.eval.redteam.campaign import search_all
from memrl.eval.redteam.items import pick_questions, priors
from memrl.eval.redteam.search import HONEST_GENOME, _mean, compare, search
from memrl.eval.redteam.update import REGRESSIONS as UPDATE_REGRESSIONS
from memrl.eval.redteam.update import UpdateFamily, score_updates
from memrl.memory.facade.memory import AsyncMemory
from memrl.rewards import ADRPOConfig

pytestmark = pytest.mark.data


@pytest.fixture
def convs(locomo_path):
    loaded = load_dataset("locomo", locomo_path, include_adversarial=True)[
        0
    ]  # the search asks category 5 too
    return [c for c in loaded if c.id in LOCOMO_UPDATE_SPLIT["train"]][:2]


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
    from bench.reward_hacks import engine_scores

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


async def test_the_packing_cheats_do_what_they_claim_and_are_not_paid(memory, convs):
    """Two cheats of the reader's character budget, added after the issue-32 list: one memory packing the
    top 20 hits of a deeper search (dates kept, stopwords dropped) and every hit rewritten without its
    stopwords in place. They must really pack (the calls succeed, the texts are shorter and keep their
    content words), and earn no positive mean: the answer is rarely just below the reader's window, and
    what the digest pushes out of other questions' windows is charged."""
    from memrl.agents.memupdate import MemUpdateConfig, run_episode, state_before
    from memrl.eval.redteam.items import squeeze
    from memrl.eval.redteam.update import DIGEST_HITS, update_policy
    from memrl.llm.scripted import ScriptedLLM

    def arguments_of(call):
        a = call["arguments"]
        return json.loads(a) if isinstance(a, str) else a

    assert (
        squeeze("Caroline went to the LGBTQ support group on 7 May")
        == "Caroline went LGBTQ support group 7 May"
    )
    items = pick_questions(convs, 1, seed=3)
    cfg = MemUpdateConfig(max_tool_calls=30, max_turns=31)
    table = RewardTable()
    for item in items:
        before = await state_before(memory, item.namespace, item.conversation, item.question, cfg)
        for name in (HONEST, "digest of the hits", "compressed hits"):
            llm = ScriptedLLM(update_policy(name, item, []))
            result = await run_episode(llm, memory, item.namespace, item.conversation, item.question, config=cfg,
                                       before=before)  # fmt: skip
            table.add("memupdate", name, result.trajectory.reward)
            calls = [(c["name"], arguments_of(c), r) for s in result.trajectory.steps
                     for c, r in zip(s.tool_calls, s.tool_results, strict=True)]  # fmt: skip
            if name == HONEST:
                continue
            assert calls[0][0] == "search_memory" and calls[0][1]["top_k"] == DIGEST_HITS
            edits = [(a, r) for _, a, r in calls[1:]]
            assert edits and all(r["ok"] and r["kind"] == "ok" for _, r in edits), (name, edits)
            if name == "digest of the hits":
                ((args, _),) = edits
                assert args["operation"] == "create" and " the " not in f" {args['content']} "
            else:
                assert len(edits) >= 5 and all(a["operation"] == "update" for a, _ in edits)
    means = table.means()["memupdate"]
    assert means["digest of the hits"] <= 0.0 and means["compressed hits"] <= 0.0
    assert verdict(table) == [] and means[HONEST] > 0.0


async def test_adrpo_cheats_stay_below_the_expert(memory, convs):
    table = await score_builds(memory, convs[:1], 2)
    means = table.means()
    assert verdict(table) == []
    for t in ("core", "episodic", "semantic", "procedural"):
        assert means[f"adrpo ({t})"][HONEST] > means[f"adrpo ({t})"]["maximal length"]


# ---------------------------------------------------------------------------------------------------
# Issue 32: the cheats an outside red team found, and the search that replaces a fixed list


async def test_the_issues_memupdate_cheats_stay_below_the_fix(memory, convs):
    """Efficiency inflation (the fix plus 28 blind 5-way merges: 0.102 against the fix's 0.044 under the
    old E) and metadata stuffing (every date word in a memory's date_text, shown first to the reader)."""
    family = UpdateFamily(memory, priors(convs))
    items = pick_questions(convs, 2, seed=1)
    honest = await family.evaluate(HONEST_GENOME, items)
    assert _mean(honest.rewards["memupdate"]) > 0.2
    for name, genome in UPDATE_REGRESSIONS.items():
        row = (await compare(family, genome, items, honest))["memupdate"]
        assert row["high"] < 0, (name, row)  # below the fix, the interval excluding 0
    stuffing = await family.evaluate(UPDATE_REGRESSIONS["metadata stuffing"], items)
    assert _mean(stuffing.rewards["memupdate"]) <= 0.0  # it adds no information: nothing to gain


async def test_the_issues_adrpo_cheats_stay_below_the_expert(memory, convs):
    """The verbatim dump sized to the old length penalty's free allowances (0.362 against the expert's
    0.262) and a bag of the session's words (0.338), on every agent's reward."""
    cases = await build_cases(memory, convs, 3, priors(convs))
    family = BuildFamily(memory)
    honest = await family.evaluate(HONEST_GENOME, cases)
    for name in ("verbatim dump", "word bag"):
        rows = await compare(family, BUILD_REGRESSIONS[name], cases, honest)
        for t in ("core", "episodic", "semantic", "procedural"):
            assert rows[f"adrpo ({t})"]["diff"] < 0, (name, t, rows[f"adrpo ({t})"])
    # under the original's length penalty (a 200-token free gap, the plain ratio) the dump paid
    original = BuildFamily(memory, ADRPOConfig(other_length_min_diff_tokens=200, length_smoothing_tokens=0))
    old_honest = await original.evaluate(HONEST_GENOME, cases)
    old = await compare(original, BUILD_REGRESSIONS["verbatim dump"], cases, old_honest)
    assert max(old[f"adrpo ({t})"]["diff"] for t in ("episodic", "semantic", "procedural")) > 0


async def test_the_search_finds_no_cheat_and_the_regressions_are_its_start(memory, convs):
    report = await search_all(memory, convs, budget=30, per_category=4, update_per_category=1, sessions=2,
                              max_tool_calls=12)  # fmt: skip
    assert report["found"] == []
    for name, fam in report["families"].items():
        assert fam["evaluated"] >= 30 and fam["judged"] >= 10, name
        assert fam["regressions"], name
        for reg in fam["regressions"].values():
            rows = [
                row for label, row in reg["vs_honest"].items() if "[" not in label and row["diff"] is not None
            ]
            if all(g[0] == "guess" for g in reg["genome"]):  # a hedge: never reliably above honest
                assert all(row["low"] <= 0 for row in rows), (name, reg)
            else:  # a cheat: below it
                assert all(row["diff"] < 0 for row in rows), (name, reg)


async def test_the_search_finds_what_an_official_metric_pays_for(memory, convs):
    """A check that can fail: LoCoMo's official metric (kept for reports) pays an adversarial question any
    output containing "not mentioned", so an answer hedged with a refusal collects both; the search finds
    such a hedge from random genes alone (no regression among its starting genomes)."""
    from memrl.eval.redteam.campaign import pick_adversarial
    from memrl.scoring import metrics as M

    items = pick_questions(convs, 4) + pick_adversarial(convs, 8)
    cases = await answer_cases(memory, items, priors(convs))
    official = {"locomo_f1 (official)": lambda text, case: M.locomo_f1(text, case.gold, case.category)}
    report = await search(AnswerFamily(official), cases, budget=150, seed=0)
    assert any(any("hedge" in f for f in c.flagged) for c in report.found), [c.to_dict() for c in report.best]


def test_the_frequent_answers_answer_decoys_as_often_as_the_sessions_questions(locomo_path):
    """What makes the core hedge unpaid in expectation: over every session of the training conversations,
    the 5 answers the hedge appends are the gold of the decoys (other conversations' questions, names
    swapped) at least as often as of the session's own questions, whatever the decoys' seed. (A single
    draw over a few sessions can miss: seed 0 on the first 6 sessions per conversation draws none of 171.)"""
    from memrl.agents.membuilder.adrpo import decoy_questions, session_questions
    from memrl.scoring.metrics import normalize_answer

    loaded = load_dataset("locomo", locomo_path, include_adversarial=True)[0]
    train = [c for c in loaded if c.id in LOCOMO_UPDATE_SPLIT["train"]]
    known = priors(train)
    own, decoys = 0, [0, 0, 0]
    for conv in train:
        frequent = tuple(dict.fromkeys(a for answers in known[conv.id].values() for a in answers[:10]))
        guesses = {normalize_answer(a) for a in frequent[:5]}  # the hedge's, as build_cases has them
        for s in conv.sessions:
            qs = session_questions(conv, s, 5)
            own += sum(normalize_answer(q.answer) in guesses for q in qs)
            for seed in range(3):
                ds = decoy_questions(conv, s, qs, others=train, seed=seed)
                assert len(ds) == len(qs) and not {d.question for d in ds} & {
                    q.question for q in conv.questions
                }
                decoys[seed] += sum(normalize_answer(d.answer) in guesses for d in ds)
    assert own >= 10 and min(decoys) >= own, (own, decoys)


def test_value_set_reward_resists_every_cheat_on_generated_multivalue_items():
    """read's value-set reward: no fixed policy reaches the honest list (repeats, padding, every number in
    the document, values outside the box); RULER's substring metric and the single-value boxed match,
    shown beside it, are flagged by nothing only because they are report-only: both pay a cheat."""
    from memrl.eval.redteam.values import BOXED_MATCH, RULER_METRIC, multivalue_items, score_value_sets

    essays = " ".join(
        f"Essay sentence {i} is about startups and has the year 19{i % 90 + 10} in it." for i in range(300)
    )
    items = multivalue_items(6, seed=3, tokens=800, essays=essays)
    table = score_value_sets(items)
    means = table.means()
    assert verdict(table) == []
    assert means["values"][HONEST] == 1.0 and means["values"]["half the values"] == 0.5
    assert (
        means["values"]["one value repeated"]
        < means["values"]["one value"]
        < means["values"]["half the values"]
    )
    # one hyphen-joined token is split as the list is (no gold holds a hyphen): no more than the list pays
    assert means["values"]["every number, hyphen-joined"] == means["values"]["every number in the document"]
    assert means[RULER_METRIC]["every number in the document"] == 1.0  # why RULER's metric is not the reward
    assert means[BOXED_MATCH]["one value"] == 1.0 > means[BOXED_MATCH][HONEST]
