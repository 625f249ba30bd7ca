"""Tests of memrl.rewards: every formula at its boundary points, with hand-computed values."""

from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memrl.errors import ConfigError
from memrl.rewards import (
    ADRPOConfig,
    RewardOutcome,
    Rubric,
    adrpo_agent_reward,
    adrpo_reward,
    answer_coverage,
    answer_f1,
    answer_reward,
    attribution_weights,
    context_window,
    core_length_penalty,
    dominant_type,
    efficiency_factor,
    memagent_eval,
    memagent_reward,
    memupdate_reward,
    relative_length_penalty,
    score_memupdate,
    short_sub_em,
    task_reward,
)
from memrl.rewards.answer import committed_refusal
from memrl.rewards.memupdate import Probe, edit_size, retention, span_coverage, tokens
from memrl.scoring.metrics import locomo_f1, sub_em

# ---------------------------------------------------------------------------------------------------
# RewardOutcome


def test_outcome_is_a_value_or_a_failure_never_both():
    assert RewardOutcome.ok(0.5).value == 0.5
    failed = RewardOutcome.failed("judge timeout")
    assert failed.is_failure and failed.value is None
    with pytest.raises(ValueError, match="no reward: judge timeout"):
        failed.unwrap()
    with pytest.raises(ValueError):
        RewardOutcome(value=1.0, failure="x")
    with pytest.raises(ValueError):
        RewardOutcome(value=None)
    with pytest.raises(ValueError):
        RewardOutcome.ok(math.nan)
    with pytest.raises(TypeError):
        RewardOutcome.ok(True)
    out = RewardOutcome.values_or_nan([RewardOutcome.ok(1.0), failed])
    assert out[0] == 1.0 and math.isnan(out[1])
    assert failed.to_dict() == {"value": None, "failure": "judge timeout", "invalid": None, "metrics": {}}


# ---------------------------------------------------------------------------------------------------
# MemUpdate


def test_tokens_are_normalised_words():
    assert tokens("Paris, France. The capital!") == {"paris", "france", "capital"}


def test_answer_coverage_fraction_and_clamps():
    # answer tokens {paris, france}; only "paris" is in memory -> 1/2
    assert answer_coverage("Paris, France", ["I live in paris."]) == 0.5
    assert answer_coverage("Paris, France", ["paris", "France is nice"]) == 1.0
    assert answer_coverage("Paris", ["nothing relevant"]) == 0.1  # clamped up from 0
    assert answer_coverage("Paris", []) == 0.1
    assert answer_coverage(2022, ["since 2022"]) == 1.0  # int answers work
    with pytest.raises(ValueError):
        answer_coverage("the, a!", ["x"])  # no scorable token


def test_coverage_needs_the_answer_stated_together_not_scattered_over_a_word_list():
    # every day, month and year of a decade in one memory holds each token of any date, never together
    days = " ".join(str(d) for d in range(1, 32))
    months = "January February March April May June July August September October November December"
    bag = f"{days} {months} " + " ".join(str(y) for y in range(2013, 2025))
    assert answer_coverage("7 May 2023", [bag]) == pytest.approx(1 / 3)
    assert answer_coverage("7 May 2023", ["[7 May 2023] Caroline went to the support group."]) == 1.0
    assert (
        answer_coverage("the week before 9 June 2023", ["She went camping the week before 9 June 2023"])
        == 1.0
    )
    # each part of a list answer may come from a different memory
    assert span_coverage("Paris, Rome", ["trip to Paris", "then Rome"]) == (2, 2)
    assert span_coverage("Paris, Rome", ["trip to Paris"], question="Did she see Rome?") == (1, 1)


def test_edit_size_counts_changed_memories_and_retention_counts_lost_words():
    old = ["red bus", "cold tea", "tall tree", "new shoe", "old dog", "warm sun"]
    assert edit_size(old, old) == 0 and efficiency_factor(old, old) == 1.0
    assert edit_size(old, [*old, "new fact"]) == 1  # a create
    assert edit_size(old, ["red bus stop", *old[1:]]) == 1  # an update
    assert edit_size(old, old[1:]) == 1  # a delete
    merged = ["\n".join(old[:5]), old[5]]
    assert edit_size(old, merged) == 5  # a 5-way merge: 5 texts gone, 1 new
    assert retention(old, merged) == 1.0  # lossless: every word kept
    assert retention(old, old[1:]) == 0.0  # "red bus" is nowhere any more
    assert retention(old, ["red car", *old[1:]]) == 0.5
    # economy 1 / (1 + (k - 1) / 8): one change is free, each further one costs
    assert efficiency_factor(old, [*old, "blue kite"]) == 1.0
    assert efficiency_factor(old, merged) == pytest.approx(1 / (1 + 4 / 8))
    assert efficiency_factor(old, [*old[:5], "warm rain"]) == pytest.approx(0.5)


def test_memupdate_reward_formula_and_end_to_end_outcome():
    assert memupdate_reward(0.2, 0.6, 0.5) == pytest.approx(0.2)  # a gain is discounted by E
    assert memupdate_reward(0.6, 0.2, 0.1) == pytest.approx(-0.4)  # a loss is charged in full
    assert memupdate_reward(0.2, 0.6, 1.0, 0.1) == pytest.approx(0.3)  # minus the collateral
    old_texts = ["x " + str(i) for i in range(10)]
    out = score_memupdate(
        "Paris, France",
        retrieved_old=["She lives in Lyon"],  # P_old = 0.1 (clamped)
        retrieved_new=["She moved to Paris"],  # P_new = 0.5
        old_texts=old_texts,
        new_texts=[*old_texts, "She moved to Paris"],  # one create: E = 1
        probes=[Probe("Lyon", "Where did she live?", ["She lives in Lyon"], ["She moved to Paris"])],
    )
    assert out.metrics["p_old"] == 0.1 and out.metrics["p_new"] == 0.5
    assert out.metrics["efficiency"] == 1.0
    assert out.metrics["collateral"] == pytest.approx(0.9)  # the probe lost its answer: 1.0 -> 0.1
    assert out.value == pytest.approx((0.5 - 0.1) - 0.9)


def test_memupdate_failure_is_a_failure_not_minus_point_one():
    out = score_memupdate("?!", ["x"], ["y"], ["a"], ["b"])
    assert out.is_failure and out.value is None
    assert "no scorable token" in out.failure


def test_memupdate_coverage_reads_a_character_budget_not_an_item_count():
    # past the budget nothing counts, however few items came before
    filler = ["x" * 120] * 5  # 5 items, 604 characters with their separators: over the 500 budget
    assert score_memupdate("Paris", ["x"], [*filler, "paris"], ["m"], ["m"]).metrics["p_new"] == 0.1
    # short items: more of them fit, and the sixth one counts
    short = ["x" * 10] * 5
    assert score_memupdate("Paris", ["x"], [*short, "paris"], ["m"], ["m"]).metrics["p_new"] == 1.0
    # merging the top items into one longer item shows the reader no more text than before
    top = ["Alice likes tea and long walks", "Bob moved to Paris in May", "Carol sings"] * 10
    merged = ["\n".join(top[:5]), *top[5:]]
    seen = "\n".join(context_window(top, 200))
    assert "\n".join(context_window(merged, 200)) == seen == "\n".join(context_window(["\n".join(top)], 200))
    assert sum(map(len, context_window(top, 200))) <= 200


def test_context_window_cuts_at_word_boundaries():
    assert context_window(["abc def", "ghi jkl mno"], 12) == ["abc def", "ghi"]
    assert context_window(["abc def", "ghi jkl mno"], 16) == ["abc def", "ghi jkl"]
    assert context_window(["abcdefgh"], 4) == []  # no half word (it could be a different token)
    assert context_window(["ab", "cd"], 2) == ["ab"]
    with pytest.raises(ValueError):
        context_window(["a"], 0)


# ---------------------------------------------------------------------------------------------------
# MemBuilder / ADRPO


def test_adrpo_config_defaults_help_and_validation():
    cfg = ADRPOConfig()
    assert (cfg.expert_length_penalty_weight, cfg.attribution_boost_factor) == (0.8, 4.0)
    assert (cfg.core_length_start_penalty, cfg.core_length_max_penalty) == (150, 400)
    assert (cfg.other_length_upper_tolerance, cfg.other_length_lower_tolerance) == (1.3, 0.5)
    assert (cfg.other_length_min_diff_tokens, cfg.length_smoothing_tokens) == (0, 50)  # no free gap
    assert all(text for text in ADRPOConfig.help().values())
    assert set(ADRPOConfig.help()) == {f.name for f in dataclasses.fields(ADRPOConfig)}
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.n_questions = 3  # type: ignore[misc]
    with pytest.raises(ConfigError):
        ADRPOConfig(core_length_start_penalty=400, core_length_max_penalty=150)
    with pytest.raises(ConfigError):
        ADRPOConfig(other_length_lower_tolerance=1.5)
    with pytest.raises(ConfigError):
        ADRPOConfig(expert_length_penalty_weight=1.5)


def test_task_reward_values_parse_failure_and_judge_failure():
    assert task_reward(3).value == pytest.approx(0.6)
    assert task_reward(5).value == 1.0
    assert task_reward(2, n_questions=4).value == 0.5
    bad_json = task_reward(5, parsed=False)
    assert bad_json.value == -1.0 and bad_json.invalid  # the floor of the task's range, flagged
    judge_down = task_reward(4, n_failed=1)
    assert judge_down.is_failure and judge_down.value is None
    assert task_reward(0, n_questions=0).is_failure
    with pytest.raises(ValueError):
        task_reward(6)
    # what the memory answers by chance (decoys) is taken back, signed: a clip at 0 would keep the
    # sessions a guess wins and forgive those it loses
    assert task_reward(4, chance=1.5).value == pytest.approx(0.5)
    assert task_reward(1, chance=2.5).value == pytest.approx(-0.3)
    assert task_reward(0, chance=5).value == -1.0 == task_reward(0, parsed=False).value
    # a broken reply is never worth more than a valid one, whatever the valid one's task
    assert all(task_reward(c, chance=ch).value >= task_reward(c, parsed=False, chance=ch).value
               for c in range(6) for ch in (0.0, 2.5, 5.0))  # fmt: skip
    with pytest.raises(ValueError):
        task_reward(4, chance=6)


def test_core_length_penalty_boundaries():
    assert core_length_penalty(0) == 0.0
    assert core_length_penalty(600) == 0.0  # t = 150
    assert core_length_penalty(604) == pytest.approx(1 / 250)  # t = 151
    assert core_length_penalty(1100) == pytest.approx(0.5)  # t = 275
    assert core_length_penalty(1600) == 1.0  # t = 400
    assert core_length_penalty(10_000) == 1.0


def test_relative_length_penalty_boundaries():
    raw = ADRPOConfig(length_smoothing_tokens=0)  # the plain ratio model / expert
    assert relative_length_penalty(1300, 1000, raw) == 0.0  # rho = 1.3
    assert relative_length_penalty(500, 1000, raw) == 0.0  # rho = 0.5
    assert relative_length_penalty(1650, 1000, raw) == pytest.approx(0.5)  # (1.65 - 1.3) / 0.7
    assert relative_length_penalty(2000, 1000, raw) == pytest.approx(1.0)
    assert relative_length_penalty(5000, 1000, raw) == 1.0  # capped
    assert relative_length_penalty(350, 1000, raw) == pytest.approx(0.5)  # (0.5 - 0.35) / 0.3
    assert relative_length_penalty(200, 1000, raw) == pytest.approx(1.0)
    assert relative_length_penalty(0, 1000, raw) == 1.0  # capped
    # default: rho = (model + 50) / (expert + 50): a few tokens either way are no explosion
    assert relative_length_penalty(20, 5) == 0.0  # rho = 70 / 55 = 1.27 (plain ratio: 4)
    assert relative_length_penalty(1650, 1000) == pytest.approx((1700 / 1050 - 1.3) / 0.7)
    # no free allowance: 199 tokens beyond a 75-token expert (the verbatim dump's piece) is charged in full
    assert relative_length_penalty(75 + 199, 75) == 1.0
    # expert wrote nothing: every token written counts (LP 1 from 50 tokens)
    assert relative_length_penalty(15, 0) == 0.0
    assert relative_length_penalty(50, 0) == 1.0
    # the original's 200-token gap, as a setting: skipped whatever rho is
    original = ADRPOConfig(other_length_min_diff_tokens=200, length_smoothing_tokens=0)
    assert relative_length_penalty(150, 20, original) == 0.0  # rho 7.5, gap 130
    assert relative_length_penalty(220, 20, original) == 1.0  # gap 200: no longer skipped
    assert relative_length_penalty(300, 0, original) == 1.0
    assert relative_length_penalty(100, 0, original) == 0.0


def test_core_length_penalty_with_the_experts_core_write():
    # 600 characters is the absolute rule's free allowance (150 tokens) ...
    assert core_length_penalty(600) == 0.0
    # ... but not when the expert's core write for the session was 100 characters: (150+50)/(25+50) > 2
    assert core_length_penalty(600, expert_chars=100) == 1.0
    assert core_length_penalty(120, expert_chars=100) == 0.0  # about the expert's length: free
    assert core_length_penalty(1600, expert_chars=6000) == 1.0  # the absolute rule still applies


def test_relative_length_penalty_needs_one_unit():
    cfg = ADRPOConfig(length_smoothing_tokens=0)
    expert_chars = model_chars = 4000
    # Same text length, both converted to tokens: no penalty.
    assert relative_length_penalty(cfg.tokens(model_chars), cfg.tokens(expert_chars), cfg) == 0.0
    # The original compared model chars / 4 to expert chars: rho = 0.25, a heavy penalty for equal lengths.
    assert relative_length_penalty(model_chars / 4, expert_chars, cfg) == pytest.approx((0.5 - 0.25) / 0.3)


def test_adrpo_reward_applies_penalty_only_when_task_positive():
    assert adrpo_reward(0.6, 0.5) == pytest.approx(0.6 * (1 - 0.8 * 0.5))
    assert adrpo_reward(1.0, 1.0) == pytest.approx(0.2)
    assert adrpo_reward(1.0, 0.0) == 1.0
    assert adrpo_reward(0.0, 1.0) == 0.0
    assert adrpo_reward(0.5, 1.0, weight=0.0) == 0.5
    with pytest.raises(ValueError):
        adrpo_reward(0.5, 1.5)


def test_adrpo_agent_reward_composes_and_never_rewards_a_failure():
    out = adrpo_agent_reward(task_reward(4), core_length_penalty(1100))
    assert out.value == pytest.approx(0.8 * (1 - 0.8 * 0.5))
    assert out.metrics["length_penalty"] == pytest.approx(0.5)
    # A reward-server error: the original paid min(0.8, 0.05 * ops) here. We pay nothing, not even 0.
    server_error = RewardOutcome.failed("reward server: HTTP 500")
    out = adrpo_agent_reward(server_error, 0.0)
    assert out.is_failure and out.value is None
    # An unparseable agent keeps its floor (-1) and its flag; a negative task is not scaled by LP (a
    # longer write never raises the reward: r is monotone in the task and non-increasing in LP)
    out = adrpo_agent_reward(task_reward(5, parsed=False), 0.0)
    assert out.value == -1.0 and out.invalid
    assert adrpo_agent_reward(task_reward(1, chance=2.0), 1.0).value == pytest.approx(-0.2)
    assert (
        adrpo_agent_reward(task_reward(1, chance=0.5), 1.0).value
        > adrpo_agent_reward(task_reward(1, chance=2.0), 0.0).value
    )


def test_dominant_type_counts_and_tie_break():
    per_question = [["episodic", "semantic"], ["semantic", "semantic"], ["procedural", "core"]]
    assert dominant_type(per_question) == "semantic"
    # tie between semantic and procedural (2 each): the earlier in episodic/semantic/procedural wins
    assert dominant_type([["procedural", "semantic"], ["procedural", "semantic"]]) == "semantic"
    assert dominant_type([["core"], []]) is None  # core is never retrieved, so it never dominates
    assert dominant_type([]) is None

    class FakeEnum:  # MemoryType-like values (with .value) are accepted
        value = "Procedural"

    assert dominant_type([[FakeEnum()]]) == "procedural"


def test_attribution_weights():
    agents = ["core", "episodic", "semantic", "procedural"]
    assert attribution_weights(agents, "semantic") == [1.0, 1.0, 4.0, 1.0]
    assert attribution_weights(agents, "episodic", alpha=2.0) == [1.0, 2.0, 1.0, 1.0]
    assert attribution_weights(agents, None) == [1.0] * 4
    with pytest.raises(ValueError):
        attribution_weights(agents, "core")


# ---------------------------------------------------------------------------------------------------
# MemAgent


def test_memagent_reward():
    assert memagent_reward(r"Memory says... \boxed{ New York }", ["new york"]) == 1.0
    assert memagent_reward(r"\boxed{Boston}", ["new york", "NYC"]) == 0.0
    assert memagent_reward("new york", ["new york"]) == 0.0  # no box
    assert memagent_reward(None, ["x"]) == 0.0


def test_memagent_eval_reports_em_f1_subem_on_the_boxed_answer():
    scores = memagent_eval(r"So: \boxed{the city of Paris}", ["Paris"])
    assert scores["reward"] == 0.0  # "thecityofparis" != "paris"
    assert scores["em"] == 0.0
    assert scores["sub_em"] == 1.0
    assert scores["f1"] == pytest.approx(0.5)  # [city, of, paris] vs [paris]
    assert scores["has_boxed"] == 1.0
    assert memagent_eval("Paris", ["Paris"]) == {
        "reward": 0.0,
        "em": 0.0,
        "f1": 0.0,
        "sub_em": 0.0,
        "has_boxed": 0.0,
    }


# ---------------------------------------------------------------------------------------------------
# Rubric


def correct(answer: str, gold: str) -> float:
    return float(answer == gold)


def length(answer: str) -> float:
    return float(len(answer))


def judge(answer: str) -> RewardOutcome:
    return RewardOutcome.failed("judge unreachable")


def exploding(answer: str) -> float:
    raise RuntimeError("boom")


def test_rubric_weighted_sum_and_zero_weight_metrics():
    rubric = Rubric([(correct, 1.0), (length, 0.0)]).add(lambda gold: 0.5, weight=2.0, name="bonus")
    out = rubric.score(answer="Paris", gold="Paris", unused="ignored")
    assert out.value == pytest.approx(1.0 + 2.0 * 0.5)  # length has weight 0: logged only
    assert out.metrics == {"correct": 1.0, "length": 5.0, "bonus": 0.5}
    assert rubric.names == ["correct", "length", "bonus"]


def test_rubric_failures():
    out = Rubric([correct, judge]).score(answer="a", gold="a")
    assert out.is_failure and "judge unreachable" in out.failure
    assert out.metrics["correct"] == 1.0 and out.metrics["judge/failed"] == 1.0
    out = Rubric([correct, (exploding, 1.0)]).score(answer="a", gold="a")
    assert out.is_failure and "RuntimeError: boom" in out.failure
    # a failing weight-0 metric does not sink the reward
    out = Rubric([correct, (exploding, 0.0)]).score(answer="a", gold="a")
    assert out.value == 1.0 and out.metrics["exploding/failed"] == 1.0
    # mis-wiring is a bug, not a rollout failure
    with pytest.raises(TypeError):
        Rubric([correct]).score(answer="a")
    with pytest.raises(ValueError, match="duplicate"):
        Rubric([correct, correct])


def test_rubric_passes_through_outcome_metrics_and_invalid_flags():
    out = Rubric([lambda: task_reward(2, parsed=False)]).score()
    assert out.value == -1.0 and "not valid JSON" in out.invalid
    out = Rubric([(lambda: task_reward(3), 1.0)]).score()
    assert out.metrics["<lambda>/correct"] == 3.0


# ---------------------------------------------------------------------------------------------------
# Training answer rewards (memrl.rewards.answer)


def test_answer_f1_charges_every_extra_list_part_where_the_official_metric_does_not():
    gold = "Paris, Rome"
    guesses = "Paris, Rome, Lisbon, Berlin, Madrid, Oslo"
    assert locomo_f1(guesses, gold, 1) == 1.0  # the official multi-hop F1 pays every guess list in full
    assert answer_f1(guesses, gold, 1) == pytest.approx(2 / 6)  # precision 2/6 x recall 1
    assert answer_f1("Paris, Rome", gold, 1) == 1.0 and answer_f1("Rome and Paris", gold, 1) < 1.0
    assert answer_f1("Paris", gold, 1) == pytest.approx(1 / 2)  # one right part of two: P 1, R 0.5
    assert answer_f1("Paris, Paris, Paris", gold, 1) == pytest.approx(1 / 3)  # official 1/2, 3 parts for 2
    # other categories: stems of the whole answer, precision x recall (every extra word costs)
    assert answer_f1("she was running", "run", 4) == pytest.approx(1 / 3)  # official F1: 0.5
    assert locomo_f1("she was running", "run", 4) == 0.5
    assert answer_f1("pottery", "pottery; she loves it", 3) == 1.0  # the gold is cut at its first ";"
    assert answer_f1("Not mentioned", None, 5) == 1.0
    assert answer_f1("", "Paris", 4) == 0.0 and answer_f1("Paris", "Paris") == 1.0


def test_multi_hop_reward_is_locomos_comma_split_f1_with_parts_past_the_golds_charged():
    """Issue 54: multi-hop F1 fell in every trained run while the reward paid "Lisbon" 0.5 and "Lisbon and
    Porto" 0.125 for the gold "Lisbon, Porto" (one-to-one parts, precision x recall): dropping list items
    paid. The reward is now the official metric wherever the answer has no more comma parts than the gold."""
    gold = "Lisbon, Porto"
    for pred in ("Lisbon", "Lisbon, Porto", "Porto, Lisbon", "Lisbon and Porto", "Lisbon, Oslo",
                 "the city of Lisbon, Porto", "Oslo", "", "Lisbon, Porto,"):  # fmt: skip
        assert answer_f1(pred, gold, 1) == locomo_f1(pred, gold, 1), pred
    assert answer_f1("Lisbon", gold, 1) == pytest.approx(0.5)
    assert answer_f1("Lisbon", gold, 1) < answer_f1("Lisbon, Porto", gold, 1) == 1.0
    assert answer_f1("Lisbon and Porto", gold, 1) == pytest.approx(2 / 3)  # was 0.125: below "Lisbon"
    # one value repeated is one right part among three written, not the list
    assert locomo_f1("Lisbon, Lisbon, Lisbon", gold, 1) == 0.5
    assert answer_f1("Lisbon, Lisbon, Lisbon", gold, 1) == pytest.approx(1 / 3)
    assert answer_f1("Lisbon, Lisbon", gold, 1) == pytest.approx(0.5)  # as "Lisbon" alone, not the list
    # parts past the gold's count: free under the metric, charged n_gold / n_pred here
    assert locomo_f1("Lisbon, Porto, Oslo, Rome", gold, 1) == 1.0
    assert answer_f1("Lisbon, Porto, Oslo, Rome", gold, 1) == pytest.approx(0.5)
    # k guesses holding the right one earn 1/k: what committing to one of them earns on average
    assert answer_f1("Oslo, Rome, Paris", "Paris", 1) == pytest.approx(1 / 3)
    assert answer_reward("f1", "Lisbon", [gold], "multi-hop") == pytest.approx(0.5)  # a name works too
    assert answer_reward("f1", "Lisbon", [gold], 1) < answer_reward("f1", "Lisbon, Porto", [gold], 1)


@pytest.mark.parametrize(
    ("kind", "prediction", "golds", "category", "before"),
    [  # the values the answer rewards gave before issue 54 (the multi-hop change must not touch these)
        ("f1", "she was running", ["run"], 4, 1 / 3),
        ("f1", "Paris Rome", ["Paris"], 4, 0.5),
        ("f1", "Lisbon, Porto", ["Lisbon"], 4, 0.5),
        ("f1", "7 May 2023", ["May 7, 2023"], 2, 1.0),
        ("f1", "in the summer of 2022", ["summer 2022"], 2, 0.5),
        ("f1", "pottery and painting", ["pottery; she loves it"], 3, 0.5),
        ("f1", "adoption agencies", ["Adoption agencies"], None, 1.0),
        ("f1", "Not mentioned", [], 5, 1.0),
        ("em", "Paris", ["paris"], 1, 1.0),
        ("sub_em", "in Paris, France", ["Paris, France"], 1, 1.0),
    ],
)
def test_other_categories_and_kinds_are_paid_as_before(kind, prediction, golds, category, before):
    assert answer_reward(kind, prediction, golds, category) == pytest.approx(before)


def test_a_hedge_never_pays_more_than_committing():
    """A policy torn between two answers earns 1/2 on average by committing to either; token F1 paid the
    hedge 2/3 whichever was right. Precision x recall pays it 1/2: no more than committing."""
    for gold in ("Paris", "Rome"):
        assert answer_f1("Paris Rome", gold, 4) == pytest.approx(1 / 2)
        assert answer_f1("Paris, Rome", gold, 1) == pytest.approx(1 / 2)
    # three candidates: 1/3 against the 1/3 of a committed guess among three
    assert answer_f1("Paris Rome Oslo", "Oslo", 4) == pytest.approx(1 / 3)


def test_adversarial_questions_pay_a_committed_refusal_only():
    """LoCoMo's rule pays anything containing "not mentioned": an answer hedged with a refusal scored 1."""
    hedge = "adoption agencies (not mentioned)"
    assert locomo_f1(hedge, None, 5) == 1.0  # the official metric (reports) pays it
    assert answer_f1(hedge, "adoption agencies", 5) == 0.0
    assert answer_reward("f1", "any sentence that has not mentioned in it", ["x"], 5) == 0.0
    for refusal in ("Not mentioned in the conversation", "No information available", "not mentioned"):
        assert committed_refusal(refusal) == 1.0
        assert all(answer_reward(kind, refusal, [], 5) == 1.0 for kind in ("f1", "em", "sub_em"))
    assert committed_refusal("Paris") == 0.0 and committed_refusal("") == 0.0


def test_short_sub_em_needs_one_short_answer_holding_the_whole_gold():
    assert sub_em("e", "Emily") == 1.0 and short_sub_em("e", ["Emily"]) == 0.0  # a fragment
    assert short_sub_em("Emily", ["Emily"]) == 1.0
    assert short_sub_em("it was Emily", ["Emily"]) == 1.0  # up to 3 extra words that state nothing
    assert short_sub_em("I think that it was Emily", ["Emily"]) == 0.0
    assert short_sub_em("in May 2023", ["May 2023"]) == 1.0
    # a hedge without separators is one part within 3 extra words: it named both answers
    assert short_sub_em("Likely yes likely no", ["Likely no"]) == 0.0
    assert short_sub_em("Likely yes likely no", ["Likely yes"]) == 0.0
    assert short_sub_em("not Emily", ["Emily"]) == 0.0 and short_sub_em("maybe Emily", ["Emily"]) == 0.0
    assert short_sub_em("Emily, Rose", ["Emily"]) == 0.0  # a list of guesses
    assert short_sub_em("Emily or Rose", ["Emily"]) == 0.0
    assert short_sub_em("Emily and Rose", ["Emily and Rose"]) == 1.0
    assert short_sub_em("Paris, Rome", ["Paris, Rome"]) == 1.0  # the gold itself is a list: as many parts
    assert short_sub_em("", ["x"]) == 0.0 and short_sub_em("x", []) == 0.0
    assert answer_reward("sub_em", "in Paris", ["Paris"]) == 1.0
    with pytest.raises(ValueError, match="unknown answer reward"):
        answer_reward("bleu", "x", ["x"])


# --- read's value-set reward (tasks asking for several values, e.g. niah_multivalue) -------------------------

VALUE_GOLDS = ["3091054", "4495418", "9031354", "5546449"]


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ("so \\boxed{3091054, 4495418, 9031354, 5546449}", 1.0),
        ("\\boxed{5546449; 9031354 and 4495418\n3091054}", 1.0),  # order and separators do not matter
        ("\\boxed{3091054, 4495418}", 0.5),
        ("\\boxed{3091054, 3091054, 3091054, 3091054}", 0.0625),  # one value repeated is one value
        ("\\boxed{3091054, 4495418, 9031354, 5546449, 1111111}", 0.8),  # a wrong value costs precision
        ("\\boxed{3091054449541890313545546449}", 0.0),  # glued: no value named
        ("3091054, 4495418, 9031354, 5546449", 0.0),  # no box
        ("\\boxed{}", 0.0),
        ("\\boxed{3091054\u30014495418\u30019031354\u30015546449}", 1.0),  # ideographic commas
        ("\\boxed{3091054\uff0c4495418\uff1b9031354\uff0c5546449}", 1.0),  # full-width comma, semicolon
        ("\\boxed{3091054-4495418-9031354-5546449}", 1.0),  # hyphens: no gold holds one
        ("\\boxed{3091054 \u2013 4495418 \u2014 9031354 - 5546449}", 1.0),  # en, em and spaced dashes
        ("\\boxed{3091054-3091054-3091054-3091054}", 0.0625),  # splitting finer only adds parts
    ],
)
def test_value_set_reward(reply, expected):
    from memrl.rewards import value_set_reward

    assert value_set_reward(reply, VALUE_GOLDS) == pytest.approx(expected)


def test_value_set_reward_keeps_multi_word_values_whole():
    from memrl.rewards.memagent import value_parts, value_set_reward

    assert value_parts("New York, Paris", ["new york", "paris"]) == ["newyork", "paris"]
    assert value_set_reward("\\boxed{New York and Paris}", ["new york", "paris"]) == 1.0


def test_value_set_reward_keeps_hyphenated_values_whole_when_a_gold_holds_a_hyphen():
    from memrl.rewards.memagent import value_parts, value_set_reward

    uuids = ["1b4e28ba-2fa1-11d2-883f-0016d3cca427", "6fa459ea-ee8a-3ca4-894e-db77e160355e"]
    assert value_parts(" - ".join(uuids), uuids) == uuids
    assert value_set_reward("\\boxed{" + "\u3001".join(uuids) + "}", uuids) == 1.0
    assert value_set_reward("\\boxed{1b4e28ba, 2fa1, 11d2, 883f, 0016d3cca427}", uuids) == 0.0


@given(st.lists(st.sampled_from(VALUE_GOLDS + ["1111111", "2222222", "77"]), min_size=1, max_size=12))
def test_no_value_list_pays_more_than_the_honest_list_of_the_golds_it_names(parts):
    """Padding, repeats and order never raise the reward above listing the golds it names once each; it
    reaches 1.0 only for exactly the gold set."""
    from memrl.rewards import value_set_reward

    named = sorted(set(parts) & set(VALUE_GOLDS))
    got = value_set_reward("\\boxed{" + ", ".join(parts) + "}", VALUE_GOLDS)
    honest = value_set_reward("\\boxed{" + ", ".join(named) + "}", VALUE_GOLDS) if named else 0.0
    assert got <= honest + 1e-12
    assert (got == 1.0) == (sorted(parts) == sorted(VALUE_GOLDS))
