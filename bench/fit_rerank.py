"""Fit the learned reranker (memrl/memory/search/rerank.py) on LoCoMo conversations 0-4, reproducibly.

    MEMRL_DATA_DIR=/work/shared/data python -m bench.fit_rerank [--embed-cache FILE] [--out PATH] [--embedder mpnet]
    # train-clean: fit on MemUpdate's 7 training conversations only (0-4 hold the test conversations conv-26,
    # conv-30 and conv-43), then score it on the test split alone
    python -m bench.fit_rerank --fit-on train --out runs/rerank_train.json
    memrl eval retrieval --dataset locomo --split test --modes hybrid --rerank runs/rerank_train.json

Builds every LoCoMo conversation with the default ``raw`` builder (BM25 statistics are global to the
store, as in ``memrl eval retrieval``), runs the default hybrid search for every question of categories
1-4 with a recording model in the reranker's place (it keeps the ranking and stores each candidate's
feature row), labels a candidate 1 when its turn is evidence, and fits a logistic model on conversations
0-4 only (``--fit-on train``: the training split's conversations; Newton's method, deterministic): pointwise (is this candidate evidence?) or pairwise (evidence
above the other candidates), the objective and L2 strength picked by leave-one-conversation-out
recall@10 within 0-4. Conversations 5-9 are never used here: they are the held-out half the ablation
reports. Writes ``memrl/resources/rerank_locomo.json`` (weights + how they were fitted) and prints one
JSON line last: the chosen objective and L2, cross-validated recall@10 on 0-4 before/after re-ranking, rows used.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from memrl.eval.retrieval import aevaluate, load_conversations, open_memory
from memrl.eval.retrieval.config import RetrievalConfig
from memrl.eval.retrieval.search import namespace_of
from memrl.memory.search import rerank_model
from memrl.scoring.metrics import recall_at_k

L2_GRID = (0.01, 0.1, 1.0, 10.0, 100.0)
OBJECTIVES = ("pointwise", "pairwise")
TUNE = 5  # conversations 0-4 (in the data set's order) are the tuning half


class Recorder:
    """A stand-in model that keeps the ranking it is given and records every feature row."""

    def __init__(self) -> None:
        self.rows: list[tuple[str, str, list[Any], np.ndarray]] = []

    def score(self, x: np.ndarray, keys: list[Any], query: str, ns: str) -> np.ndarray:
        self.rows.append((ns, query, list(keys), x.copy()))
        return np.linspace(1.0, 0.5, len(keys)) if len(keys) else np.zeros(0)


def _recall10(groups: list[tuple[np.ndarray, list[str], tuple[str, ...], Any]], order_of: Any) -> float:
    vals = []
    for x, ids, evidence, conv in groups:
        order = order_of(x)
        vals.append(recall_at_k(conv.covered([ids[i] for i in order[:10]]), evidence))
    return float(np.mean(vals)) if vals else float("nan")


async def collect(config: RetrievalConfig) -> tuple[list[Any], Recorder]:
    convs = load_conversations(config)
    rec = Recorder()
    rerank_model.register("record", rec)
    memory = open_memory(config)
    try:
        await aevaluate(convs, dataclasses.replace(config, rerank="record"), memory=memory, progress=True)
    finally:
        await memory.close()
        rerank_model.register("record", None)
    return convs, rec


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--embed-cache", default="auto", help="embedding cache file (as memrl eval retrieval)")
    ap.add_argument("--out", default=str(rerank_model.RESOURCE), help="where the fitted model goes")
    ap.add_argument("--depth", type=int, default=50, help="candidates re-ordered per question")
    ap.add_argument(
        "--embedder", default="minilm", help="embedder spec (as memrl eval retrieval): minilm, mpnet"
    )
    ap.add_argument("--fit-on", default="0-4", choices=["0-4", "train"],
                    help="0-4: the first five conversations (the shipped models); train: MemUpdate's 7 training "
                         "conversations, no test conversation")  # fmt: skip
    args = ap.parse_args()
    t0 = time.perf_counter()
    config = RetrievalConfig(
        dataset="locomo",
        modes=("hybrid",),
        embed_cache=args.embed_cache,
        rerank_depth=args.depth,
        embedder=args.embedder,
    )
    convs, rec = asyncio.run(collect(config))
    if args.fit_on == "train":
        from memrl.data.splits import LOCOMO_UPDATE_SPLIT

        tune = [c for c in convs if c.id in LOCOMO_UPDATE_SPLIT["train"]]
    else:
        tune = convs[:TUNE]
    by_ns = {namespace_of(c): c for c in tune}
    questions = {(namespace_of(c), q.question): q for c in tune for q in c.questions if config.selects(q)}
    groups = []  # (features, turn ids, evidence, conversation) per tuning question with evidence
    for ns, query, keys, x in rec.rows:
        q = questions.get((ns, query))
        if q is None or not q.evidence:
            continue
        ids = [k[1] if k[0] == "u" else str(k[1]) for k in keys]
        groups.append((x, ids, q.evidence, by_ns[ns]))
    if not groups:
        sys.exit("fit_rerank: no tuning questions recorded; is LoCoMo in $MEMRL_DATA_DIR?")

    def labels(g: tuple[np.ndarray, list[str], tuple[str, ...], Any]) -> np.ndarray:
        covered = g[3].covered
        return np.array([float(bool(set(covered([i])) & set(g[2]))) for i in g[1]])

    conv_of = [g[3].id for g in groups]
    folds = sorted(set(conv_of))
    base = _recall10(groups, lambda x: np.arange(len(x)))
    cv: dict[tuple[str, float], float] = {}

    def fit(objective: str, gs: list[Any], l2: float) -> rerank_model.LogisticModel:
        if objective == "pairwise":
            return rerank_model.fit_pairwise([(g[0], labels(g)) for g in gs], l2=l2)
        return rerank_model.fit_logistic(
            np.vstack([g[0] for g in gs]), np.concatenate([labels(g) for g in gs]), l2=l2
        )

    for objective in OBJECTIVES:
        for l2 in L2_GRID:
            recalls = []
            for held in folds:
                train = [g for g, c in zip(groups, conv_of, strict=True) if c != held]
                test = [g for g, c in zip(groups, conv_of, strict=True) if c == held]
                model = fit(objective, train, l2)
                rank = lambda x, m=model: np.argsort(-m.score(x, [], "", ""), kind="stable")  # noqa: E731
                recalls.append((_recall10(test, rank), len(test)))
            cv[objective, l2] = sum(r * n for r, n in recalls) / sum(n for _, n in recalls)
            print(json.dumps({"objective": objective, "l2": l2, "cv_recall_at_10": round(cv[objective, l2], 4)}),
                  file=sys.stderr)  # fmt: skip
    objective, best = max(cv, key=lambda k: (cv[k], k[0] == "pointwise", -k[1]))
    y_all = np.concatenate([labels(g) for g in groups])
    model = fit(objective, groups, best)
    meta = {
        "fitted_on": ("LoCoMo conversations 0-4 (" if args.fit_on == "0-4" else "LoCoMo's training split (")
        + ", ".join(folds)
        + "), categories 1-4, default hybrid search",
        "command": "python -m bench.fit_rerank"
        + ("" if args.embedder == "minilm" else f" --embedder {args.embedder}")
        + ("" if args.fit_on == "0-4" else f" --fit-on {args.fit_on}"),
        "embedder": args.embedder,
        "depth": args.depth,
        "objective": objective,
        "l2": best,
        "rows": int(len(y_all)),
        "positives": int(y_all.sum()),
        "cv_recall_at_10": {f"{o} l2={v}": round(r, 4) for (o, v), r in cv.items()},
        "recall_at_10_before": round(base, 4),
    }
    model = dataclasses.replace(model, meta=meta)
    Path(args.out).write_text(json.dumps(model.to_json(), indent=1) + "\n")
    print(json.dumps({"out": args.out, "objective": objective, "l2": best, "cv_recall_at_10": cv[objective, best], "recall_at_10_before": base,
                      "questions": len(groups), "rows": int(len(y_all)), "positives": int(y_all.sum()),
                      "coef": dict(zip(rerank_model.FEATURES, [round(float(c), 3) for c in model.coef], strict=True)),
                      "wall_s": round(time.perf_counter() - t0, 1)}))  # fmt: skip


if __name__ == "__main__":
    main()
