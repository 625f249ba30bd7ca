"""The learned reranker's model: the features it reads (:data:`FEATURES`), a logistic regression over them
(:class:`LogisticModel`), its deterministic fit (pointwise or pairwise, Newton's method), and models by name.

:class:`memrl.memory.search.rerank.Rescorer` computes the feature rows at search time and calls :func:`load`;
``python -m bench.fit_rerank`` fits a model on LoCoMo conversations 0-4 and writes it as JSON::

    model = fit_pairwise([(x_question, y_question), ...], l2=0.01)   # rows of FEATURES, 0/1 evidence labels
    Path("rerank.json").write_text(json.dumps(model.to_json()))
    search(..., rerank="rerank.json")                                   # or "locomo", "locomo-mpnet"
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from memrl.errors import ConfigError

#: The reranker's inputs, one row per candidate (see :func:`features`).
FEATURES = (
    "fused",  # fused score / best fused score
    "fused_rank",  # 1 - log(1 + rank) / log(1 + depth)
    "dense",  # cosine to the question
    "dense_gap",  # cosine minus the best candidate cosine
    "dense_rank",  # 1 / sqrt(rank) in the dense list, 0 if absent
    "bm25",  # BM25 score / best BM25 score, 0 if absent
    "bm25_rank",  # 1 / sqrt(rank) in the BM25 list, 0 if absent
    "window",  # best cosine of the turn's neighbours (before, after)
    "session",  # session BM25 / best session BM25
    "speaker",  # the question names this turn's speaker (and only one speaker)
    "date_fit",  # the question names dates and the turn's spans fit them
    "date_asked",  # the question names dates
    "when_time",  # the question asks when and the turn has a time expression
    "coverage",  # share of the question's content terms in the turn
    "entities",  # question entities named by the turn (capped at 3) / 3
    "near_top",  # a neighbour is among the 5 best candidates
    "length",  # log(1 + content terms) / 5
    "abstract_dense",  # the question asks an inference x cosine
    "session_mass",  # the turn's session's share of the candidates' scores / the best session's share
    "when_bm25",  # the question asks when x BM25 feature
)

RESOURCE = Path(__file__).resolve().parents[2] / "resources" / "rerank_locomo.json"  # memrl/resources
# Shipped models by name: ``locomo`` fitted over MiniLM's features, ``locomo-mpnet`` over the mpnet embedder's.
SHIPPED = {"locomo": RESOURCE, "locomo-mpnet": RESOURCE.with_name("rerank_locomo_mpnet.json")}


class Model(Protocol):
    """Scores candidates from their feature rows (higher = better)."""

    def score(self, x: np.ndarray, keys: list[Any], query: str, ns: str) -> np.ndarray: ...


@dataclass(frozen=True)
class LogisticModel:
    """``sigmoid(bias + coef . (x - mean) / std)``: a logistic regression over :data:`FEATURES`."""

    coef: np.ndarray
    bias: float
    mean: np.ndarray
    std: np.ndarray
    meta: dict[str, Any] = field(default_factory=dict)

    def score(self, x: np.ndarray, keys: list[Any], query: str, ns: str) -> np.ndarray:
        z = self.bias + ((x - self.mean) / self.std) @ self.coef
        return 1.0 / (1.0 + np.exp(-z))

    def to_json(self) -> dict[str, Any]:
        return {
            "features": list(FEATURES),
            "coef": [round(float(v), 6) for v in self.coef],
            "bias": round(float(self.bias), 6),
            "mean": [round(float(v), 6) for v in self.mean],
            "std": [round(float(v), 6) for v in self.std],
            **self.meta,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any], source: str = "model") -> LogisticModel:
        if list(data.get("features", [])) != list(FEATURES):
            raise ConfigError(
                f"{source}: its features {data.get('features')} are not {list(FEATURES)}; re-fit it"
            )
        arr = {k: np.asarray(data[k], dtype=np.float64) for k in ("coef", "mean", "std")}
        meta = {k: v for k, v in data.items() if k not in ("features", "coef", "bias", "mean", "std")}
        return cls(
            arr["coef"], float(data["bias"]), arr["mean"], np.where(arr["std"] > 0, arr["std"], 1.0), meta
        )


def _newton(z: np.ndarray, y: np.ndarray, reg: np.ndarray, iters: int) -> np.ndarray:
    """Weights of an L2-regularised logistic regression on rows ``z`` (Newton's method, deterministic)."""
    w = np.zeros(z.shape[1])
    for _ in range(iters):
        p = 1.0 / (1.0 + np.exp(-(z @ w)))
        grad = z.T @ (p - y) + reg * w
        hess = (z * (p * (1 - p))[:, None]).T @ z + np.diag(reg + 1e-9)
        step = np.linalg.solve(hess, grad)
        w -= step
        if np.abs(step).max() < 1e-8:
            break
    return w


def _standardise(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    mean, std = x.mean(axis=0), x.std(axis=0)
    return mean, np.where(std > 1e-9, std, 1.0)


def fit_logistic(x: np.ndarray, y: np.ndarray, *, l2: float = 1.0, iters: int = 50) -> LogisticModel:
    """Pointwise logistic regression (is this candidate evidence?), features standardised, L2 ``l2`` on
    the coefficients (not the bias). ``y`` is 0/1."""
    if len(x) == 0 or y.min() == y.max():
        raise ConfigError("fitting the reranker needs candidates of both classes (evidence and not)")
    mean, std = _standardise(x)
    z = np.hstack([np.ones((len(x), 1)), (x - mean) / std])
    reg = np.full(z.shape[1], l2)
    reg[0] = 0.0
    w = _newton(z, y, reg, iters)
    return LogisticModel(w[1:], float(w[0]), mean, std)


def fit_pairwise(
    groups: list[tuple[np.ndarray, np.ndarray]], *, l2: float = 1.0, iters: int = 50
) -> LogisticModel:
    """Pairwise logistic regression (RankNet with a linear scorer): for each group (one question's
    candidate rows ``x`` and 0/1 labels ``y``), every (evidence, other) pair should score evidence higher.
    Only the order of its scores means anything (bias 0)."""
    pos_neg = [(x[y > 0], x[y <= 0]) for x, y in groups if 0 < y.sum() < len(y)]
    if not pos_neg:
        raise ConfigError("fitting the reranker needs candidates of both classes (evidence and not)")
    mean, std = _standardise(np.vstack([x for x, _ in groups]))
    diffs = np.vstack([((p[:, None, :] - n[None, :, :]) / std).reshape(-1, len(std)) for p, n in pos_neg])
    z = np.vstack([diffs, -diffs])  # both orders: the fit is symmetric, no bias needed
    y = np.concatenate([np.ones(len(diffs)), np.zeros(len(diffs))])
    w = _newton(z, y, np.full(z.shape[1], l2), iters)
    return LogisticModel(w, 0.0, mean, std)


_REGISTERED: dict[str, Model] = {}


def register(name: str, model: Model | None) -> None:
    """Make ``model`` available as ``rerank=name`` in this process (``None`` removes it)."""
    if model is None:
        _REGISTERED.pop(name, None)
    else:
        _REGISTERED[name] = model


@functools.lru_cache(maxsize=8)
def _load_file(path: str) -> LogisticModel:
    p = Path(path)
    if not p.is_file():
        raise ConfigError(
            f"rerank model {path!r} not found; use rerank='locomo', 'locomo-mpnet' or a JSON file from bench/fit_rerank.py"
        )
    try:
        data = json.loads(p.read_text())
    except json.JSONDecodeError as e:
        raise ConfigError(f"rerank model {path}: not JSON ({e})") from None
    return LogisticModel.from_json(data, str(p))


def load(name: str) -> Model:
    """The model named ``name``: registered in-process, shipped (``locomo``, ``locomo-mpnet``), or a JSON
    file path."""
    if name in _REGISTERED:
        return _REGISTERED[name]
    return _load_file(str(SHIPPED.get(name, name)))
