"""Adaptive fusion fitted on training items, and the leave-one-dataset-out protocol that scores it.

Used by ``python -m bench.search_defaults --lodo`` (the commands are there). For each data set
:func:`collect` searches every question once with today's defaults in all three modes (dense and BM25
recall, and the adaptive-fusion features of :mod:`memrl.memory.search.adaptive`), then once per dense weight
of :data:`~memrl.memory.search.adaptive.STEPS` in hybrid mode: a table of turn recall@10 per question and
weight. Since an adaptive model only picks one of those weights per question, a model's recall on any data
set is read off the table exactly (:func:`per_query`), which makes fitting (:func:`fit`, a coordinate
search on the training items' mean recall, L2 strength chosen by 5-fold cross-validation within the
training set) and scoring cheap. :func:`protocol` fits every setting on one data set, scores it on each
other one, and ranks the settings by their worst held-out margin over the better single mode.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from memrl.eval.retrieval import aevaluate
from memrl.eval.retrieval.config import CORE_CATEGORIES, RetrievalConfig
from memrl.eval.stats import paired_difference
from memrl.memory.search import FEATURES, STEPS, dense_weight

L2_GRID = (0.0, 0.001, 0.003, 0.01, 0.03)


def _kept(rows: list[dict[str, Any]], mode: str) -> list[dict[str, Any]]:
    return [r for r in rows if r["recall"].get(mode, {}).get("10") is not None
            and (r["category_id"] is None or r["category_id"] in CORE_CATEGORIES)]  # fmt: skip


async def collect(convs: list, base: RetrievalConfig, dataset: str, memory: Any) -> dict[str, Any]:
    """One data set's table: question ids, conversations, features, dense / BM25 recall@10 and hybrid
    recall@10 at every weight of STEPS (the defaults' run gives the row order)."""
    cfg = dataclasses.replace(base, dataset=dataset)
    rows = _kept((await aevaluate(convs, cfg, memory=memory, progress=False))["rows"], "hybrid")
    ids = [r["question_id"] for r in rows]
    table = np.zeros((len(rows), len(STEPS)))
    for j, w in enumerate(STEPS):
        run = dataclasses.replace(cfg, modes=("hybrid",), fusion="convex", dense_weight=w,
                                  bm25_weight=round(1 - w, 2))  # fmt: skip
        by_id = {
            r["question_id"]: r for r in (await aevaluate(convs, run, memory=memory, progress=False))["rows"]
        }
        table[:, j] = [by_id[i]["recall"]["hybrid"]["10"] for i in ids]
    return {
        "ids": ids,
        "clusters": [r["conversation"] for r in rows],
        "features": [r["fusion"]["features"] for r in rows],
        "dense": [r["recall"]["dense"]["10"] for r in rows],
        "bm25": [r["recall"]["bm25"]["10"] for r in rows],
        "defaults": [r["recall"]["hybrid"]["10"] for r in rows],
        "table": table.tolist(),
    }


def _weights_index(coef: np.ndarray, feats: np.ndarray) -> np.ndarray:
    z = np.clip(coef[0] + feats @ coef[1:], -30, 30)
    w = 1.0 / (1.0 + np.exp(-z))
    return np.clip(np.rint(w * 10) - 1, 0, len(STEPS) - 1).astype(int)


def per_query(coef: Any, data: dict[str, Any]) -> np.ndarray:
    """Each question's recall@10 under the model ``coef`` (read off the weight table)."""
    feats, table = np.asarray(data["features"], float), np.asarray(data["table"], float)
    return table[np.arange(len(table)), _weights_index(np.asarray(coef, float), feats)]


def _objective(coef: np.ndarray, feats: np.ndarray, table: np.ndarray, l2: float) -> float:
    idx = _weights_index(coef, feats)
    return float(table[np.arange(len(table)), idx].mean() - l2 * np.sum(coef[1:] ** 2))


def fit(data: dict[str, Any], l2: float, rows: np.ndarray | None = None) -> np.ndarray:
    """Coefficients maximising mean recall@10 minus ``l2`` times the squared feature coefficients, by
    coordinate search from the best fixed weight (bias only), on ``rows`` of ``data`` (all by default)."""
    feats, table = np.asarray(data["features"], float), np.asarray(data["table"], float)
    if rows is not None:
        feats, table = feats[rows], table[rows]
    best_fixed = STEPS[int(np.argmax(table.mean(axis=0)))]
    coef = np.zeros(len(FEATURES) + 1)
    coef[0] = math.log(best_fixed / (1 - best_fixed))
    score = _objective(coef, feats, table, l2)
    for step in (2.0, 1.0, 0.5, 0.25):
        for _ in range(3):
            moved = False
            for i in range(len(coef)):
                for delta in (-4, -3, -2, -1, 1, 2, 3, 4):
                    trial = coef.copy()
                    trial[i] += delta * step
                    s = _objective(trial, feats, table, l2)
                    if s > score + 1e-9:
                        coef, score, moved = trial, s, True
            if not moved:
                break
    return coef


def fit_cv(data: dict[str, Any], folds: int = 5) -> tuple[np.ndarray, float, dict[str, float]]:
    """:func:`fit` with the L2 strength of :data:`L2_GRID` that scores best over ``folds`` folds of the
    training conversations (questions of one conversation in one fold): (coef, l2, CV recall per l2)."""
    clusters = sorted(set(data["clusters"]))
    fold_of = {c: i % folds for i, c in enumerate(clusters)}
    fold = np.array([fold_of[c] for c in data["clusters"]])
    cv: dict[str, float] = {}
    for l2 in L2_GRID:
        got = np.zeros(len(fold))
        for f in range(folds):
            train, test = np.flatnonzero(fold != f), np.flatnonzero(fold == f)
            if len(train) and len(test):
                got[test] = per_query(fit(data, l2, train), data)[test]
        cv[str(l2)] = round(float(got.mean()), 4)
    l2 = max(L2_GRID, key=lambda v: (cv[str(v)], v))
    return fit(data, l2), l2, cv


def _against(data: dict[str, Any], recall: np.ndarray) -> dict[str, Any]:
    """recall@10 of a setting on one data set, beside dense and BM25, with its paired margin over the
    better of the two (a bootstrap over conversations, each LongMemEval question its own)."""
    dense, bm25 = np.asarray(data["dense"]), np.asarray(data["bm25"])
    single = dense if dense.mean() >= bm25.mean() else bm25
    diff = paired_difference(
        list(single), list(recall), clusters=data["clusters"], n_resamples=2000, digits=4
    )
    return {"hybrid": round(float(recall.mean()), 4), "dense": round(float(dense.mean()), 4),
            "bm25": round(float(bm25.mean()), 4), "margin": diff["diff"], "ci": diff["ci"], "n": len(recall)}  # fmt: skip


def protocol(tables: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Leave one data set out. Settings: each fixed convex weight (nothing fitted), the convex weight
    fitted on a data set, and adaptive fusion fitted on a data set. A fitted setting is scored only on the
    data sets it was not fitted on; a fixed one on all. Ranked by the worst held-out margin (then its
    worst interval's lower end)."""
    names = list(tables)
    settings: dict[str, dict[str, Any]] = {}
    for j, w in enumerate(STEPS):
        label = f"convex {w:.1f}/{1 - w:.1f}" + (" (the default before issue 60)" if w == 0.3 else "")
        settings[label] = {t: _against(tables[t], np.asarray(tables[t]["table"])[:, j]) for t in names}
    models: dict[str, Any] = {}
    for s in names:
        table_s = np.asarray(tables[s]["table"])
        j = int(np.argmax(table_s.mean(axis=0)))
        settings[f"convex, weight fitted on {s} ({STEPS[j]:.1f})"] = {
            t: _against(tables[t], np.asarray(tables[t]["table"])[:, j]) for t in names if t != s
        }
        coef, l2, cv = fit_cv(tables[s])
        models[s] = {"coef": [round(float(c), 3) for c in coef], "l2": l2, "cv_recall": cv,
                     "in_sample": _against(tables[s], per_query(coef, tables[s]))}  # fmt: skip
        settings[f"adaptive, fitted on {s}"] = {
            t: _against(tables[t], per_query(coef, tables[t])) for t in names if t != s
        }
    for res in settings.values():
        scored = [v for v in res.values() if isinstance(v, dict)]
        res["worst_margin"] = min(v["margin"] for v in scored)
        res["worst_ci_low"] = min(v["ci"][0] for v in scored)
    # a method fitted per data set is judged by its worst over every held-out pair
    for method in ("convex, weight fitted on", "adaptive, fitted on"):
        rows = [r for n, r in settings.items() if n.startswith(method)]
        for r in rows:
            r["method_worst"] = min(x["worst_margin"] for x in rows)
    best = max(settings, key=lambda n: (settings[n].get("method_worst", settings[n]["worst_margin"]),
                                        settings[n]["worst_ci_low"]))  # fmt: skip
    return {"settings": settings, "best": best, "models": models,
            "oracle": {t: round(float(np.asarray(tables[t]["table"]).max(axis=1).mean()), 4) for t in names},
            "features": list(FEATURES)}  # fmt: skip


def pooled(tables: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The model to ship if adaptive fusion wins the protocol: fitted (:func:`fit_cv`) on every data
    set's training items together, each data set's conversations their own clusters."""
    keys = ("clusters", "features", "dense", "bm25", "defaults", "table")
    data = {k: [x for n, t in tables.items() for x in (t[k] if k != "clusters" else [f"{n}/{c}" for c in t[k]])]
            for k in keys}  # fmt: skip
    data["ids"] = [f"{n}/{i}" for n, t in tables.items() for i in t["ids"]]
    coef, l2, cv = fit_cv(data)
    return {"coef": [round(float(c), 3) for c in coef], "l2": l2, "cv_recall": cv, "features": list(FEATURES),
            "fitted_on": {n: len(t["ids"]) for n, t in tables.items()},
            "in_sample": {n: round(float(per_query(coef, t).mean()), 4) for n, t in tables.items()}}  # fmt: skip


def check_weight(coef: Any, feats: list[float]) -> float:
    """The weight the search itself gives (memrl.memory.search.adaptive), for a consistency check."""
    return dense_weight(feats, [float(c) for c in coef])
