"""Date-fit prior, window view and learned reranker (memrl/memory/search/rerank.py), on a real store with a
deterministic embedder."""

from __future__ import annotations

import json

import numpy as np
import pytest

from memrl.errors import ConfigError
from memrl.memory.embedders.providers import HashingEmbedder
from memrl.memory.facade.memory import AsyncMemory
from memrl.memory.search import rerank_model
from memrl.memory.store.base import NewItem


def turn(i: str, session: int, day: str, speaker: str, text: str) -> NewItem:
    return NewItem(
        f"{speaker}: {text}",
        "episodic",
        {"unit": i, "speaker": speaker, "text": f"{speaker}: {text}", "date": day, "session": session},
        evidence=(i,),
        session=str(session),
        id=i,
    )


CONV = [
    turn("D1:1", 1, "2023-05-08T10:00:00", "Ann", "We went hiking in the hills, lovely trip"),
    turn("D1:2", 1, "2023-05-08T10:00:00", "Bob", "Sounds lovely, I stayed home"),
    turn("D2:1", 2, "2023-07-03T10:00:00", "Ann", "We went hiking again last month with my sister"),
    turn("D2:2", 2, "2023-07-03T10:00:00", "Bob", "Nice, I painted a sunset"),
    turn("D3:1", 3, "2023-09-01T10:00:00", "Ann", "Hiking is my favourite thing"),
]


async def test_date_fit_prefers_turns_whose_dates_fit(db_path):
    m = AsyncMemory(db_path, embedder=HashingEmbedder(64))
    await m.add_many(CONV)
    q = "When did Ann go hiking in June?"
    plain = await m.search(q, mode="bm25", top_k=3, date_fit=0.0, spread=0.0, session_stage=0.0)
    fitted = await m.search(q, mode="bm25", top_k=3, date_fit=1.0, spread=0.0, session_stage=0.0)
    assert [h.item.id for h in plain][0] != "D2:1"
    # "last month" said on 3 July 2023 = June: the only turn about June comes first
    assert fitted[0].item.id == "D2:1"
    # a soft prior: the other hiking turns are still there
    assert {"D1:1", "D3:1"} <= {h.item.id for h in fitted}
    await m.close()


async def test_window_view_lifts_the_neighbours_of_a_similar_turn(db_path):
    m = AsyncMemory(db_path, embedder=HashingEmbedder(64))
    await m.add_many(CONV)
    q = "Bob painted a sunset"
    hits = await m.search(q, mode="dense", top_k=5, window=0.0)
    with_window = await m.search(q, mode="dense", top_k=5, window=5.0)
    base_rank = [h.item.id for h in hits].index("D2:1")
    # D2:1 sits next to the matching D2:2: its window cosine is the best one, so it moves up
    assert [h.item.id for h in with_window].index("D2:1") < base_rank
    assert with_window[0].item.id in ("D2:1", "D2:2")
    await m.close()


def test_fit_logistic_learns_the_informative_feature():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(400, len(rerank_model.FEATURES)))
    y = (x[:, 3] + 0.1 * rng.normal(size=400) > 0).astype(float)
    model = rerank_model.fit_logistic(x, y, l2=1.0)
    assert int(np.argmax(np.abs(model.coef))) == 3 and model.coef[3] > 0
    acc = ((model.score(x, [], "", "") > 0.5) == (y > 0)).mean()
    assert acc > 0.95
    again = rerank_model.LogisticModel.from_json(json.loads(json.dumps(model.to_json())))
    np.testing.assert_allclose(again.score(x, [], "", ""), model.score(x, [], "", ""), atol=1e-4)
    with pytest.raises(ConfigError, match="both classes"):
        rerank_model.fit_logistic(x, np.zeros(400))


async def test_rerank_reorders_candidates_by_the_model(db_path, tmp_path):
    m = AsyncMemory(db_path, embedder=HashingEmbedder(64))
    await m.add_many(CONV)
    q = "When did Ann go hiking in June?"
    seen: list[tuple[list, np.ndarray]] = []

    class ByDateFit:  # a model that trusts only the date-fit feature (and records what it was given)
        def score(self, x, keys, query, ns):
            seen.append((keys, x))
            return (
                x[:, rerank_model.FEATURES.index("date_fit")]
                + 0.01 * x[:, rerank_model.FEATURES.index("fused")]
            )

    rerank_model.register("by-date", ByDateFit())
    try:
        hits = await m.search(q, mode="hybrid", top_k=3, rerank="by-date")
    finally:
        rerank_model.register("by-date", None)
    assert hits[0].item.id == "D2:1"
    keys, x = seen[0]
    assert x.shape == (len(keys), len(rerank_model.FEATURES))
    row = dict(zip(rerank_model.FEATURES, x[keys.index(("u", "D2:1"))], strict=True))
    assert row["date_fit"] == 1.0 and row["date_asked"] == 1.0 and row["speaker"] == 1.0
    assert row["near_top"] in (0.0, 1.0) and 0 < row["coverage"] <= 1
    # a model file: the JSON a fit writes; a wrong one is one clear error
    model = rerank_model.LogisticModel(np.eye(len(rerank_model.FEATURES))[rerank_model.FEATURES.index("date_fit")] * 5, 0.0,
                                 np.zeros(len(rerank_model.FEATURES)), np.ones(len(rerank_model.FEATURES)))  # fmt: skip
    path = tmp_path / "m.json"
    path.write_text(json.dumps(model.to_json()))
    hits = await m.search(q, mode="hybrid", top_k=3, rerank=str(path))
    assert hits[0].item.id == "D2:1"
    (tmp_path / "bad.json").write_text(
        json.dumps({"features": ["x"], "coef": [1], "bias": 0, "mean": [0], "std": [1]})
    )
    with pytest.raises(ConfigError, match="re-fit"):
        await m.search(q, mode="hybrid", top_k=3, rerank=str(tmp_path / "bad.json"))
    with pytest.raises(ConfigError, match="not found"):
        await m.search(q, mode="hybrid", top_k=3, rerank=str(tmp_path / "missing.json"))
    await m.close()


@pytest.mark.parametrize("name", ["locomo", "locomo-mpnet"])
def test_shipped_model_loads_and_matches_the_features(name):
    model = rerank_model.load(name)
    assert isinstance(model, rerank_model.LogisticModel) and model.coef.shape == (len(rerank_model.FEATURES),)
    assert "conversations 0-4" in model.meta["fitted_on"]
    assert model.meta.get("embedder", "minilm") == ("mpnet" if name == "locomo-mpnet" else "minilm")


def test_fit_pairwise_orders_evidence_first():
    rng = np.random.default_rng(1)
    groups = []
    for _ in range(60):
        x = rng.normal(size=(10, len(rerank_model.FEATURES)))
        y = np.zeros(10)
        y[int(np.argmax(x[:, 5] - 0.5 * x[:, 0]))] = 1.0  # evidence: high feature 5, low feature 0
        groups.append((x, y))
    model = rerank_model.fit_pairwise(groups, l2=0.1)
    assert model.coef[5] > 0 > model.coef[0] and abs(model.coef[5]) > abs(model.coef[2])
    top1 = np.mean([y[np.argmax(model.score(x, [], "", ""))] for x, y in groups])
    assert top1 > 0.9
    with pytest.raises(ConfigError, match="both classes"):
        rerank_model.fit_pairwise([(groups[0][0], np.zeros(10))])
