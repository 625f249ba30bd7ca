"""Tests of memrl.scoring.metrics and memrl.eval.stats against hand-computed values and the real LoCoMo file."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest

from memrl.eval.stats import (
    bootstrap_ci,
    category_table,
    cluster_bootstrap_ci,
    paired_difference,
    to_markdown,
)
from memrl.scoring.metrics import (
    LOCOMO_CATEGORIES,
    best_over_golds,
    bleu1,
    boxed_answer,
    boxed_match,
    exact_match,
    hit_at_k,
    locomo_category,
    locomo_f1,
    locomo_session_of,
    ndcg_at_k,
    normalize_answer,
    recall_at_k,
    session_recall_at_k,
    squad_scores,
    sub_em,
    token_f1,
)

LOCOMO = Path(os.environ.get("MEMRL_DATA_DIR", Path(__file__).resolve().parents[2] / "shared" / "data")) / (
    "locomo/locomo10.json"
)


# ---------------------------------------------------------------------------------------------------
# normalisation


def test_normalize_answer_drops_punctuation_articles_and_the_word_and():
    assert normalize_answer("The  Cat, and a DOG!") == "cat dog"
    assert normalize_answer("An apple; the end.") == "apple end"
    # "and"/"a" inside words are kept: only whole words go.
    assert normalize_answer("Andrew sandy banana") == "andrew sandy banana"


def test_normalize_answer_squad_mode_keeps_and_and_accepts_ints_and_none():
    assert normalize_answer("cats and dogs", drop_and=False) == "cats and dogs"
    assert normalize_answer(2022) == "2022"
    assert normalize_answer(None) == ""


# ---------------------------------------------------------------------------------------------------
# LoCoMo F1, one rule per category


def test_single_hop_stemming_makes_running_match_run():
    assert locomo_f1("running", "run", 4) == 1.0
    # "She was running" -> stems [she, wa, run] vs [run]: P = 1/3, R = 1, F1 = 0.5
    assert locomo_f1("She was running", "run", "single-hop") == pytest.approx(0.5)


def test_temporal_plain_f1_with_int_answer():
    assert locomo_f1(2022, 2022, 2) == 1.0
    # [in, 2022] vs [2022]: P = 1/2, R = 1 -> 2/3
    assert locomo_f1("in 2022", 2022, "temporal") == pytest.approx(2 / 3)
    # commas are not split outside category 1: "7 May, 2023" is one answer of three tokens
    assert locomo_f1("7 May 2023", "7 May, 2023", 2) == 1.0


def test_multi_hop_averages_best_match_over_several_gold_parts():
    gold = "pottery, camping, painting"
    # gold parts: pottery -> 1, camping -> 1, painting -> 0; mean = 2/3
    assert locomo_f1("camping, pottery", gold, 1) == pytest.approx(2 / 3)
    # one prediction part "pottery camping" ("and" dropped): F1 2/3 for pottery and camping, 0 for painting
    assert locomo_f1("pottery and camping", gold, "multi-hop") == pytest.approx((2 / 3 + 2 / 3 + 0) / 3)
    assert locomo_f1("painting, camping, pottery", gold, 1) == 1.0
    # extra prediction parts cost nothing: only gold parts are averaged
    assert locomo_f1("pottery, camping, painting, surfing", gold, 1) == 1.0


def test_multi_hop_int_answer():
    assert locomo_f1("3", 3, 1) == 1.0
    assert locomo_f1("three", 3, 1) == 0.0


def test_open_domain_uses_gold_before_first_semicolon():
    gold = "National park; she likes the outdoors"
    assert locomo_f1("a national park", gold, 3) == 1.0
    # the prediction is not cut: [nation, park, she, like, outdoor] vs [nation, park] -> P 2/5, R 1
    assert locomo_f1(gold, gold, "open-domain") == pytest.approx(2 * 0.4 / 1.4)
    # everything after the first ';' is dropped, even further ';'
    assert locomo_f1("yes", "Yes; a; b", 3) == 1.0


def test_adversarial_needs_one_of_the_two_official_phrases():
    assert locomo_f1("That is not mentioned in the conversation.", None, 5) == 1.0
    assert locomo_f1("NO INFORMATION AVAILABLE", "self-care is important", "adversarial") == 1.0
    assert locomo_f1("It was never mentioned", None, 5) == 0.0
    assert locomo_f1("self-care is important", "self-care is important", 5) == 0.0
    assert locomo_f1("No info available", None, 5) == 0.0


def test_empty_strings_score_zero_even_against_each_other():
    assert locomo_f1("", "Paris", 4) == 0.0
    assert locomo_f1("", "", 4) == 0.0
    assert locomo_f1("the", "a", 2) == 0.0  # both normalise to nothing


def test_category_names_and_errors():
    assert [locomo_category(n) for n in LOCOMO_CATEGORIES.values()] == [1, 2, 3, 4, 5]
    assert locomo_category("Single Hop") == 4
    assert locomo_category("multi_hop") == 1
    assert locomo_category("3") == 3
    for bad in (0, 6, "commonsense", True):
        with pytest.raises(ValueError):
            locomo_category(bad)
    with pytest.raises(ValueError, match="needs a gold answer"):
        locomo_f1("x", None, 4)


@pytest.mark.data
def test_real_locomo_answers_scored_against_themselves():
    if not LOCOMO.exists():
        pytest.skip(f"{LOCOMO} not available")
    qas = [qa for sample in json.loads(LOCOMO.read_text()) for qa in sample["qa"]]
    assert len(qas) == 1986
    imperfect: dict[int, list[str]] = {1: [], 2: [], 3: [], 4: []}
    adversarial_hits = []
    for qa in qas:
        cat = qa["category"]
        if cat == 5:
            # The official rule ignores the gold and only looks for the two phrases.
            assert locomo_f1("No information available.", qa.get("answer"), 5) == 1.0
            if locomo_f1(qa["adversarial_answer"], qa.get("answer"), 5) == 1.0:
                adversarial_hits.append(qa["adversarial_answer"])
            continue
        if locomo_f1(qa["answer"], qa["answer"], cat) != 1.0:
            imperfect[cat].append(str(qa["answer"]))
    # Categories 1, 2 and 4 (ints and multi-part answers included) score exactly 1.
    assert imperfect[1] == imperfect[2] == imperfect[4] == []
    # Category 5: the (wrong) adversarial answer scores 0, except two whose adversarial answer is itself
    # "Not mentioned" (the Jon/Gina temporary-job questions of conv-30).
    assert adversarial_hits == ["Not mentioned", "Not mentioned"]
    # Category 3 is the exception: the official code cuts the GOLD at ';' but not the prediction, so an
    # answer carrying its justification ("National park; she likes the outdoors") scores < 1 against
    # itself. These are exactly the 11 category-3 answers containing ';', and each scores 1 once cut.
    with_semicolon = [str(qa["answer"]) for qa in qas if qa["category"] == 3 and ";" in str(qa["answer"])]
    assert sorted(imperfect[3]) == sorted(with_semicolon)
    assert len(with_semicolon) == 11
    for answer in with_semicolon:
        assert locomo_f1(answer.split(";")[0], answer, 3) == 1.0


# ---------------------------------------------------------------------------------------------------
# SQuAD-style metrics


def test_exact_match_and_token_f1_do_not_stem_and_keep_and():
    assert exact_match("The Eiffel Tower!", "eiffel tower") == 1.0
    assert exact_match("cats and dogs", "cats dogs") == 0.0
    assert token_f1("running", "run") == 0.0
    # [paris, france] vs [paris]: P 1/2, R 1 -> 2/3
    assert token_f1("Paris, France", "Paris") == pytest.approx(2 / 3)
    assert token_f1("", "") == 0.0


def test_sub_em_either_direction_but_never_for_empty():
    assert sub_em("It is in Paris, France", "paris") == 1.0
    assert sub_em("Paris", "Paris, France") == 1.0
    assert sub_em("London", "Paris") == 0.0
    assert sub_em("", "Paris") == 0.0  # the original scored 1 here ("" in s)
    assert sub_em("the", "Paris") == 0.0


def test_bleu1_precision_and_brevity_penalty():
    # short prediction: [cat, sat] vs [cat, sat, on, mat]: precision 1, BP = exp(1 - 4/2)
    assert bleu1("the cat sat", "the cat sat on the mat") == pytest.approx(math.exp(-1))
    # long prediction: [cat, sat, on, mat, today] vs [cat, sat]: precision 2/5, BP 1
    assert bleu1("cat sat on the mat today", "cat sat") == pytest.approx(0.4)
    # counts are clipped: [cat, cat, cat] vs [cat] -> 1/3
    assert bleu1("cat cat cat", "cat") == pytest.approx(1 / 3)
    assert bleu1("", "cat") == 0.0
    assert bleu1("cat", "cat") == 1.0


def test_best_over_golds_and_squad_scores():
    assert best_over_golds(exact_match, "NYC", ["New York", "nyc"]) == 1.0
    assert best_over_golds(exact_match, "x", []) == 0.0
    assert best_over_golds(token_f1, "2019", 2019) == 1.0
    scores = squad_scores("Paris, France", ["Paris", "Lyon"])
    assert scores == {"em": 0.0, "f1": pytest.approx(2 / 3), "sub_em": 1.0, "bleu1": pytest.approx(0.5)}


# ---------------------------------------------------------------------------------------------------
# \boxed{}


def test_boxed_answer_takes_the_last_box_and_matches_nested_braces():
    assert boxed_answer(r"first \boxed{a} then \boxed{\frac{1}{2}} end") == r"\frac{1}{2}"
    assert boxed_answer("no box here") is None
    assert boxed_answer(r"\boxed{unclosed {brace}") is None
    assert boxed_answer(r"\boxed{}") == ""


def test_boxed_answer_only_looks_at_the_final_300_characters():
    text = r"\boxed{early}" + "x" * 300
    assert boxed_answer(text) is None
    assert boxed_answer(r"\boxed{late}" + "x" * 280) == "late"


def test_a_box_longer_than_the_window_counts_when_it_ends_there():
    """MemAgent's rule wants the box to start in the final 300 characters: a 388-character gold (LoCoMo
    conv-49) could never be matched. The box must end there instead (at most 299 characters after it)."""
    gold = "the " + "x" * 380 + " end"
    reply = "Reasoning. " * 50 + rf"\boxed{{{gold}}}"
    assert len(gold) == 388 and boxed_answer(reply) == gold and boxed_match(reply, [gold])
    assert boxed_answer(rf"\boxed{{{gold}}}" + "y" * 299) == gold
    assert boxed_answer(rf"\boxed{{{gold}}}" + "y" * 300) is None


def test_boxed_match_ignores_case_and_whitespace_against_any_gold():
    assert boxed_match(r"The answer is \boxed{ New  York }", ["Paris", "new york"])
    assert boxed_match(r"\boxed{1 000}", 1000)
    assert not boxed_match(r"\boxed{New York City}", ["new york"])
    assert not boxed_match("New York", ["new york"])  # no box, no match


# ---------------------------------------------------------------------------------------------------
# retrieval


def test_recall_and_hit_at_k():
    retrieved = ["D1:1", "D2:5", "D3:3", "D1:2"]
    assert recall_at_k(retrieved, ["D1:2", "D2:5"], k=2) == 0.5
    assert recall_at_k(retrieved, ["D1:2", "D2:5"]) == 1.0
    assert recall_at_k(retrieved, ["D9:9"], k=4) == 0.0
    assert recall_at_k(retrieved, ["D2:5", "D2:5", "D9:9"]) == 0.5  # duplicates count once
    assert hit_at_k(retrieved, ["D9:9", "D3:3"], k=3) == 1.0
    assert hit_at_k(retrieved, ["D9:9", "D3:3"], k=2) == 0.0
    assert recall_at_k(retrieved, [], k=2) is None  # no evidence: excluded, not 0 or 1
    assert hit_at_k(retrieved, []) is None
    with pytest.raises(ValueError):
        recall_at_k(retrieved, ["D1:1"], k=-1)


def test_session_recall_with_mapping_and_locomo_ids():
    session_of = {"m1": 1, "m2": 3, "D1:4": 1, "D2:2": 2, "D3:9": 3}
    # evidence sessions 1, 2, 3; retrieved memories come from sessions 1 and 3
    assert session_recall_at_k(["m1", "m2"], ["D1:4", "D2:2", "D3:9"], session_of) == pytest.approx(2 / 3)
    assert session_recall_at_k(["m1", "m2"], ["D1:4", "D2:2", "D3:9"], session_of, k=1) == pytest.approx(
        1 / 3
    )
    assert locomo_session_of("D12:3") == 12
    assert locomo_session_of("D") is None
    assert locomo_session_of("D:11:26") is None
    # malformed evidence is dropped; per evidence id, so two turns of session 1 weigh twice
    got = session_recall_at_k(["D1:1"], ["D1:5", "D1:6", "D2:1", "D"], locomo_session_of)
    assert got == pytest.approx(2 / 3)
    assert session_recall_at_k(["D1:1"], ["D"], locomo_session_of) is None


def test_ndcg_at_k_by_hand():
    log2_3 = math.log2(3)
    # LongMemEval's DCG: ranks 1 and 2 weigh 1, rank r > 2 weighs 1/log2(r); ideal = min(k, relevant) at top
    assert ndcg_at_k(["a", "b", "c"], ["a", "c"], k=3) == pytest.approx((1 + 1 / log2_3) / 2)  # 0.8155
    assert ndcg_at_k(["x", "a"], ["a"], k=2) == 1.0  # rank 2 weighs as much as rank 1
    assert ndcg_at_k(["x", "a"], ["a"], k=1) == 0.0
    assert ndcg_at_k(["x", "y", "a"], ["a"], k=3) == pytest.approx(1 / log2_3)  # 0.6309
    assert ndcg_at_k(["x", "y", "z", "a"], ["a", "b"], k=4) == pytest.approx(0.5 / 2)  # 1/log2(4) of 1 + 1
    # the ideal list holds min(k, 3) relevant ids: k=2 -> 2, k=None -> all 3
    assert ndcg_at_k(["a", "b"], ["a", "b", "c"], k=2) == 1.0
    assert ndcg_at_k(["a", "b"], ["a", "b", "c"]) == pytest.approx(2 / (2 + 1 / log2_3))  # 0.7602
    # a repeated id earns nothing after its first rank, and keeps its rank; duplicate relevant ids count once
    assert ndcg_at_k(["a", "a", "b"], ["a", "b", "b"], k=3) == pytest.approx((1 + 1 / log2_3) / 2)
    assert ndcg_at_k(["a", "b"], ["a", "b"], k=3) == 1.0
    # LongMemEval's recall_any and recall_all at k are hit@k and recall@k == 1
    ranked = ["x", "a", "y", "b"]
    assert (hit_at_k(ranked, ["a", "b"], k=2), recall_at_k(ranked, ["a", "b"], k=2) == 1.0) == (1.0, False)
    assert recall_at_k(ranked, ["a", "b"], k=4) == 1.0
    assert ndcg_at_k(ranked, [], k=3) is None and ndcg_at_k(ranked, ["a"], k=0) == 0.0
    with pytest.raises(ValueError):
        ndcg_at_k(ranked, ["a"], k=-1)


# ---------------------------------------------------------------------------------------------------
# stats


def test_bootstrap_ci_is_deterministic_and_brackets_the_mean():
    values = [0.12, 0.95, 0.33, 0.71, 0.05, 0.88, 0.41, 0.67, 0.29, 0.59]
    a = bootstrap_ci(values, seed=3)
    assert a == bootstrap_ci(values, seed=3)
    mean, low, high = a
    assert mean == pytest.approx(0.5)
    assert min(values) < low < mean < high < max(values)
    assert bootstrap_ci(values, seed=4) != a
    # a wider level gives a wider interval
    _, low90, high90 = bootstrap_ci(values, alpha=0.1, seed=3)
    assert low <= low90 and high90 <= high


def test_bootstrap_ci_edge_cases():
    assert bootstrap_ci([0.5, 0.5, 0.5]) == (0.5, 0.5, 0.5)
    assert bootstrap_ci([2.0]) == (2.0, 2.0, 2.0)
    assert all(math.isnan(x) for x in bootstrap_ci([]))
    assert bootstrap_ci([1.0, None, float("nan"), 1.0]) == (1.0, 1.0, 1.0)
    with pytest.raises(ValueError):
        bootstrap_ci([1.0], alpha=1.5)


def test_cluster_bootstrap_resamples_conversations_not_questions():
    """Two conversations with different scores: the question-level bootstrap treats 200 questions as
    independent and gives a narrow interval; resampling the conversations gives one that reaches towards
    either conversation's mean (a resample may hold the same conversation twice)."""
    values = [0.9 + 0.01 * (i % 5) for i in range(100)] + [0.1 + 0.01 * (i % 5) for i in range(100)]
    clusters = ["a"] * 100 + ["b"] * 100
    mean, lo, hi = cluster_bootstrap_ci(values, clusters, seed=1)
    _, plain_lo, plain_hi = bootstrap_ci(values, seed=1)
    assert mean == pytest.approx(0.52)
    assert lo < 0.2 and hi > 0.85 and hi - lo > 5 * (plain_hi - plain_lo)
    assert cluster_bootstrap_ci(values, clusters, seed=1) == (mean, lo, hi)  # deterministic
    # one conversation: the ordinary bootstrap of its questions (no between-cluster spread)
    one = cluster_bootstrap_ci(values[:100], clusters[:100])
    assert 0.9 < one[1] < one[0] < one[2] < 0.95
    # missing values left out; identical values collapse the interval
    assert cluster_bootstrap_ci([1.0, None, float("nan"), 1.0], ["a", "a", "b", "b"]) == (1.0, 1.0, 1.0)
    assert all(math.isnan(x) for x in cluster_bootstrap_ci([], []))
    with pytest.raises(ValueError):
        cluster_bootstrap_ci([1.0], ["a", "b"])


def test_paired_difference_is_the_interval_of_the_per_item_differences():
    """b - a per item, scaled: the plain bootstrap of the differences, or the cluster bootstrap over the
    items' conversations when they are given; rounded, with whether the interval excludes 0."""
    a = [0.2, 0.4, 0.1, 0.5, 0.3, 0.0]
    b = [0.5, 0.4, 0.6, 0.5, 0.9, 0.2]
    diffs = [100 * (y - x) for x, y in zip(a, b, strict=True)]
    mean, lo, hi = bootstrap_ci(diffs, n_resamples=10_000)
    got = paired_difference(a, b, scale=100)
    assert got == {"diff": round(mean, 2), "ci": [round(lo, 2), round(hi, 2)], "excludes_0": lo > 0 or hi < 0}
    assert got["diff"] == pytest.approx(160 / 6, abs=0.005) and got["excludes_0"]  # (30+0+50+0+60+20) / 6
    clusters = ["c1", "c1", "c2", "c2", "c3", "c3"]
    mean, lo, hi = cluster_bootstrap_ci(diffs, clusters, n_resamples=10_000)
    assert paired_difference(a, b, clusters, scale=100) == {
        "diff": round(mean, 2), "ci": [round(lo, 2), round(hi, 2)], "excludes_0": lo > 0 or hi < 0,
    }  # fmt: skip
    same = paired_difference(a, a)
    assert same == {"diff": 0.0, "ci": [0.0, 0.0], "excludes_0": False}
    with pytest.raises(ValueError, match="cannot pair 2 items with 1"):
        paired_difference([0.0, 1.0], [1.0])


def test_category_table_and_markdown():
    rows = [
        {"category": 4, "f1": 1.0},
        {"category": 4, "f1": 0.0},
        {"category": 1, "f1": 0.5},
        {"category": 1, "f1": None},  # missing values are skipped
        {"category": 2},
    ]
    table = category_table(rows, "f1", "category", labels=LOCOMO_CATEGORIES)
    assert [r["category"] for r in table] == ["multi-hop", "single-hop", "overall"]
    assert [r["n"] for r in table] == [1, 2, 3]
    assert table[1]["mean"] == pytest.approx(0.5)
    assert table[2]["mean"] == pytest.approx(0.5)  # micro average over all 3 values
    assert table[0]["ci_low"] == table[0]["ci_high"] == 0.5
    md = to_markdown(table, columns=["category", "n", "mean"]).splitlines()
    assert md[0] == "| category | n | mean |"
    assert md[1] == "|---|---:|---:|"
    assert md[2] == "| multi-hop | 1 | 0.500 |"
    assert len(md) == 2 + len(table)
    assert to_markdown([]) == ""
