"""Adaptive fusion (``fusion="adaptive"``): the dense weight of one query from its lists' features, on a
real SQLite store with the deterministic hashing embedder; and bench/fusion_fit.py's fitting and
leave-one-dataset-out protocol on tables the test writes."""

from __future__ import annotations

import json
import math

import pytest

from bench import fusion_fit
from memrl.errors import ConfigError, ValidationError
from memrl.eval.retrieval.config import RetrievalConfig
from memrl.memory.embedders.providers import HashingEmbedder
from memrl.memory.facade.memory import AsyncMemory
from memrl.memory.search.adaptive import FEATURES, STEPS, dense_weight, features, load_model
from memrl.memory.search.options import SearchOptions
from memrl.memory.store.base import NewItem

TURNS = [
    ("Caroline went to a pottery class on Friday", "Caroline"),
    ("Melanie painted a lake sunrise last year", "Melanie"),
    ("I adopted a dog from the shelter", "user"),
    ("my sister visits me every summer", "user"),
    ("the pottery bowls came out of the kiln", "Caroline"),
    ("we talked about camping in the mountains", "Melanie"),
]


def logit(w: float) -> float:
    return math.log(w / (1 - w))


def test_features_and_the_weight_they_give():
    dense = {("u", i): (i + 1, i, 0.9 - 0.05 * i) for i in range(12)}
    bm25 = {("u", i): (j + 1, i, 10.0 - j) for j, i in enumerate([0, 1, 20, 21, 22, 23, 24, 25, 26, 27, 28])}
    f = features(
        "When did Caroline go to the pottery class?", "pottery class", dense, bm25, {"Caroline", "Mel"}
    )
    assert len(f) == len(FEATURES)
    overlap, dgap, bgap, length, named, first, when = f
    assert overlap == 0.2 and dgap == pytest.approx((0.9 - 0.45) / 0.9) and bgap == pytest.approx(0.9)
    assert length == pytest.approx(2 / 15) and (named, first, when) == (1.0, 0.0, 1.0)
    f_user = features("What did I adopt?", "adopt", dense, bm25, {"user", "assistant"})
    assert f_user[4:] == [0.0, 1.0, 0.0]  # first person means the store's user
    bias_only = [logit(0.3)] + [0.0] * len(FEATURES)
    assert dense_weight(f, bias_only) == 0.3 and dense_weight(f_user, bias_only) == 0.3
    named_lexical = [logit(0.7)] + [0.0] * 4 + [-2 * logit(0.7), 0.0, 0.0]  # naming a speaker: lean on BM25
    assert dense_weight(f, named_lexical) == 0.3 and dense_weight(f_user, named_lexical) == 0.7
    assert dense_weight(f, [50.0] + [0.0] * len(FEATURES)) == 0.9 and min(STEPS) == 0.1
    with pytest.raises(ValueError, match="coefficients"):
        dense_weight(f, [0.0, 1.0])


async def test_adaptive_search_is_convex_search_at_the_weight_it_picks(db_path):
    m = AsyncMemory(db_path, embedder=HashingEmbedder(64))
    await m.add_many(
        [NewItem(t, "episodic", {"speaker": s, "unit": f"D1:{i}"}) for i, (t, s) in enumerate(TURNS)]
    )
    queries = ("When did Caroline go to pottery?", "What did I adopt?", "camping mountains")
    for w in (0.3, 0.8):
        model = tuple([logit(w)] + [0.0] * len(FEATURES))
        for q in queries:
            fixed = await m.search(q, fusion="convex", weights=(w, round(1 - w, 1)))
            adaptive = await m.search(q, fusion="adaptive", fusion_model=model)
            assert [(h.item.id, h.score) for h in adaptive] == [(h.item.id, h.score) for h in fixed]
    # the trace gives the features the fitting reads, and the weight chosen
    model = tuple([logit(0.7)] + [0.0] * 4 + [-2 * logit(0.7), 0.0, 0.0])
    opts = SearchOptions(fusion="adaptive", fusion_model=model)
    for q, want in (("When did Caroline go to pottery?", 0.3), ("What did I adopt?", 0.7)):
        trace: dict = {}
        await m.index.search_modes("default", q, opts, ("hybrid",), trace=trace)
        assert len(trace["features"]) == len(FEATURES) and trace["dense_weight"] == want
    with pytest.raises(ValidationError, match="fusion_model"):
        await m.search("pottery", fusion="adaptive")
    await m.close()


def test_a_fitted_model_by_path_and_the_config_that_needs_one(tmp_path):
    path = tmp_path / "model.json"
    path.write_text(json.dumps({"coef": [0.5] + [0.0] * len(FEATURES)}))
    assert load_model(str(path)) == (0.5,) + (0.0,) * len(FEATURES)
    cfg = RetrievalConfig(fusion="adaptive", fusion_model=str(path))
    assert cfg.search_options()["fusion_model"] == load_model(str(path))
    with pytest.raises(ConfigError, match="fusion-model"):
        RetrievalConfig(fusion="adaptive").search_options()
    with pytest.raises(FileNotFoundError):
        load_model("no-such-model")
    assert RetrievalConfig().search_options()["fusion_model"] is None


def _table(n: int, lexical_when_named: bool, named_share: float) -> dict:
    """Questions whose best dense weight is 0.1 when a speaker is named (else 0.9), or the reverse."""
    out: dict = {
        "ids": [],
        "clusters": [],
        "features": [],
        "dense": [],
        "bm25": [],
        "defaults": [],
        "table": [],
    }
    for i in range(n):
        named = float(i < named_share * n)
        best = 0 if (named == 1.0) == lexical_when_named else len(STEPS) - 1
        out["ids"].append(f"q{i}")
        out["clusters"].append(f"c{i % 7}")
        out["features"].append([0.5, 0.2, 0.5, 0.3, named, 1.0 - named, 0.0])
        out["table"].append([1.0 if j == best else 0.5 for j in range(len(STEPS))])
        out["dense"].append(1.0 if best else 0.5)
        out["bm25"].append(0.5 if best else 1.0)
        out["defaults"].append(out["table"][-1][2])
    return out


def test_fitting_finds_the_rule_and_the_protocol_scores_it_held_out():
    a, b = _table(70, True, 0.8), _table(70, True, 0.3)
    coef, l2, cv = fusion_fit.fit_cv(a)
    assert fusion_fit.per_query(coef, a).mean() == 1.0 and str(l2) in cv  # every question at its best weight
    out = fusion_fit.protocol({"a": a, "b": b})
    s = out["settings"]
    assert set(s["adaptive, fitted on a"]) >= {"b"} and "a" not in s["adaptive, fitted on a"]
    assert s["adaptive, fitted on a"]["b"]["hybrid"] == 1.0  # the rule carries over to b
    assert s["convex, weight fitted on a (0.1)"]["b"]["hybrid"] == pytest.approx(0.3 * 1 + 0.7 * 0.5)
    assert out["best"].startswith("adaptive") and s[out["best"]]["method_worst"] > 0
    both = fusion_fit.pooled({"a": a, "b": b})
    assert both["in_sample"] == {"a": 1.0, "b": 1.0} and both["fitted_on"] == {"a": 70, "b": 70}
    assert fusion_fit.check_weight(both["coef"], a["features"][0]) == 0.1  # a named speaker: BM25-heavy
    for r in s.values():
        scored = [v for v in r.values() if isinstance(v, dict)]
        assert r["worst_margin"] == min(v["margin"] for v in scored)


def test_lodo_from_kept_tables_with_a_third_data_set(tmp_path, capsys):
    from bench import search_defaults

    tables = {
        "locomo": _table(70, True, 0.8),
        "longmemeval": _table(49, True, 0.2),
        "mine": _table(35, True, 0.5),
    }
    path = tmp_path / "tables.json"
    path.write_text(json.dumps(tables))
    # every data set is in the kept tables, so nothing is searched (the paths are never opened)
    search_defaults.main(["--data-dir", str(tmp_path / "none"), "--lodo", "--tables", str(path),
                          "--extra", "mine=longmemeval:" + str(tmp_path / "none.json")])  # fmt: skip
    text = capsys.readouterr().out.strip().splitlines()
    out = json.loads(text[-1])
    assert set(out["datasets"]) == {"locomo", "longmemeval", "mine"}
    fitted = out["settings"]["adaptive, fitted on mine"]
    assert set(fitted) >= {"locomo", "longmemeval"} and "mine" not in fitted
    assert out["models"]["pooled"]["fitted_on"] == {"locomo": 70, "longmemeval": 49, "mine": 35}
    assert any("**chosen**" in line and out["best"] in line for line in text)
    with pytest.raises(SystemExit):
        search_defaults.main(["--lodo", "--extra", "no-colon"])
