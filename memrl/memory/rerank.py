"""Re-scoring search candidates with what the first ranking does not see: time fit, turn windows, and a
small learned reranker over every signal search has.

Three search options use it (:class:`memrl.memory.search.SearchOptions`; off by default unless the
ablation in the README showed a held-out gain):

- ``date_fit``: time-aware retrieval. When the question names dates (:func:`memrl.memory.dates.question_spans`:
  "on 13 October 2023", "in June", "the week before 9 June 2023"), candidates whose session date or
  resolved relative expressions ("last month" said in July = June) overlap them get ``date_fit`` times
  the best score added: a soft prior, never a filter.
- ``window``: a second dense view. Each candidate is also scored by the best cosine of its window (the
  turn and the turns just before and after it in its session, by insertion order); the window scores,
  min-max normalised over the candidates, times ``window`` times the best score, are added.
- ``rerank``: the ``rerank_depth`` best candidates are re-ordered by a logistic model over
  :data:`FEATURES` (fused score and rank, dense cosine and rank, BM25 score and rank, window cosine,
  session score and share of the candidates, speaker, date fit, when x time expression, query-term
  coverage, shared entities, neighbours among the first hits, length). ``rerank="locomo"`` is the model shipped in
  ``memrl/resources/rerank_locomo.json``, fitted on LoCoMo conversations 0-4 only by
  ``python bench/fit_rerank.py`` (reproducible: same data, same solver, no randomness); a path loads
  another fit; :func:`register` adds a model object in-process (the fitting script records features this way).

Everything here reads per-namespace facts search already keeps (:meth:`SearchIndex._facts`, the term
index, the dense matrix); turn texts are read only for the candidates' date spans, and cached.
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from memrl.errors import ConfigError
from memrl.memory.dates import Span, fits, parse_day, question_spans, turn_spans
from memrl.memory.expand import session_scores
from memrl.memory.query import asks_abstract, asks_when, named_in
from memrl.memory.terms import content_terms, rule_entities

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

RESOURCE = Path(__file__).resolve().parent.parent / "resources" / "rerank_locomo.json"
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


@dataclass
class _Layout:
    """Per-namespace: each unit's session neighbours and representative dense rid; date spans of units
    whose text has been read (cached until the namespace changes)."""

    generation: int
    neighbours: dict[Any, tuple[Any, ...]] = field(default_factory=dict)
    rids: dict[Any, list[int]] = field(default_factory=dict)
    spans: dict[Any, list[Span]] = field(default_factory=dict)


class Rescorer:
    """The date-fit, window and rerank steps of a :class:`memrl.memory.search.SearchIndex` (one per index)."""

    def __init__(self, index: Any) -> None:
        self.index = index
        self._layouts: dict[str, _Layout] = {}

    def forget(self, ns: str) -> None:
        self._layouts.pop(ns, None)

    def layout(self, ns: str, facts: dict[int, tuple[Any, ...]]) -> _Layout:
        gen = self.index.store.generation(ns)
        lay = self._layouts.get(ns)
        if lay is not None and lay.generation == gen:
            return lay
        lay = self._layouts[ns] = _Layout(gen)
        order: dict[Any, list[Any]] = {}
        for rid in sorted(facts):
            unit, _, session = facts[rid][:3]
            key = ("u", unit) if unit is not None else ("r", rid)
            if key not in lay.rids:
                lay.rids[key] = []
                if session is not None:
                    order.setdefault(session, []).append(key)
            lay.rids[key].append(rid)
        for keys in order.values():
            for i, k in enumerate(keys):
                lay.neighbours[k] = tuple(keys[j] for j in (i - 1, i + 1) if 0 <= j < len(keys))
        return lay

    def _spans(self, lay: _Layout, keys: list[Any], date_of: dict[Any, Any]) -> None:
        todo = [k for k in keys if k not in lay.spans and k in lay.rids]
        if not todo:
            return
        first = {lay.rids[k][0]: k for k in todo}
        rows = self.index.store.read(
            f"SELECT rid, COALESCE({self.index.store.json_text('metadata', 'text')}, content) FROM memories "
            f"WHERE rid IN ({','.join('?' * len(first))})",
            list(first),
        )
        for rid, text in rows:
            k = first[rid]
            lay.spans[k] = turn_spans(text or "", parse_day(date_of.get(k)))

    def _cosines(self, idx: Any, qv: np.ndarray | None, lay: _Layout, keys: list[Any]) -> dict[Any, float]:
        if qv is None or idx is None:
            return {}
        # each key's first item that has a vector
        cos = idx.cosines(list(dict.fromkeys(r for k in keys for r in lay.rids.get(k, ()))), qv)
        out: dict[Any, float] = {}
        for k in keys:
            s = next((cos[r] for r in lay.rids.get(k, ()) if r in cos), None)
            if s is not None:
                out[k] = float(s)
        return out

    def apply(
        self,
        ns: str,
        query: str,
        qv: np.ndarray | None,
        idx: Any,
        fused: dict[Any, float],
        rep: dict[Any, int],
        facts: dict[int, tuple[Any, ...]],
        opts: Any,
        dense_c: dict[Any, tuple[int, int, float]],
        bm25_c: dict[Any, tuple[int, int, float]],
        bm25_query: str,
    ) -> dict[Any, float]:
        """``fused`` after the date-fit prior, the window view and the reranker that ``opts`` turn on."""
        if not fused:
            return fused
        lay = self.layout(ns, facts)
        top = max(fused.values())
        scale = top if top > 0 else 1.0
        out = dict(fused)
        wanted = question_spans(query) if (opts.date_fit > 0 or opts.rerank) else []
        date_of = {k: facts[rid][3] for k, rid in rep.items() if rid in facts}
        fit: dict[Any, bool] = {}
        if wanted:
            keys = list(fused)
            self._spans(lay, keys, date_of)
            fit = {k: fits(wanted, lay.spans.get(k, ())) for k in keys}
            if opts.date_fit > 0:
                for k, ok in fit.items():
                    if ok:
                        out[k] += opts.date_fit * scale
        window: dict[Any, float] = {}
        own: dict[Any, float] = {}
        if (opts.window > 0 or opts.rerank) and qv is not None:
            keys = list(fused)
            near = {n for k in keys for n in lay.neighbours.get(k, ())}
            cos = self._cosines(idx, qv, lay, list({*keys, *near}))
            own = {k: cos[k] for k in keys if k in cos}
            window = {
                k: max([cos[n] for n in lay.neighbours.get(k, ()) if n in cos], default=-1.0) for k in keys
            }
            if opts.window > 0 and own:
                best = {k: max(own[k], window[k]) for k in own}
                lo, hi = min(best.values()), max(best.values())
                for k, v in best.items():
                    out[k] += opts.window * scale * (v - lo) / ((hi - lo) or 1.0)
        if not opts.rerank:
            return out
        ranked = sorted(out.items(), key=lambda kv: -kv[1])[: opts.rerank_depth]
        keys = [k for k, _ in ranked]
        x = self.features(
            ns,
            query,
            keys,
            out,
            lay,
            facts,
            rep,
            own,
            window,
            fit,
            bool(wanted),
            dense_c,
            bm25_c,
            bm25_query,
            opts,
        )
        p = load(opts.rerank).score(x, keys, query, ns)
        chosen = set(keys)
        rest_top = max(max((v for k, v in out.items() if k not in chosen), default=0.0), 1e-9)
        # re-ordered candidates score 1 + p (in (1, 2)); the others keep their order below 1
        final = {k: 0.5 * max(v, 0.0) / rest_top for k, v in out.items() if k not in chosen}
        final.update({k: 1.0 + float(s) for k, s in zip(keys, p.tolist(), strict=True)})
        return final

    def features(
        self,
        ns: str,
        query: str,
        keys: list[Any],
        scores: dict[Any, float],
        lay: _Layout,
        facts: dict[int, tuple[Any, ...]],
        rep: dict[Any, int],
        own: dict[Any, float],
        window: dict[Any, float],
        fit: dict[Any, bool],
        date_asked: bool,
        dense_c: dict[Any, tuple[int, int, float]],
        bm25_c: dict[Any, tuple[int, int, float]],
        bm25_query: str,
        opts: Any,
    ) -> np.ndarray:
        """One row of :data:`FEATURES` per candidate in ``keys`` (best first)."""
        nt = self.index.terms.get(
            ns, collapse=opts.collapse, speaker_key=opts.speaker_key, tagger=opts.tagger
        )
        q_terms = set(content_terms(bm25_query))
        speakers = self.index._facts(ns, opts).speakers  # cached per namespace
        named = named_in(query, speakers)
        who = next(iter(named)) if len(named) == 1 else None
        q_ents = rule_entities(query, skip=speakers)
        sessions = session_scores(nt, q_terms)
        s_best = max(sessions.values(), default=0.0) or 1.0
        when, abstract = asks_when(query), asks_abstract(query)
        top = max(scores[k] for k in keys) or 1.0
        best_cos = max(own.values(), default=0.0)
        b_best = max((v[2] for v in bm25_c.values()), default=0.0) or 1.0
        first5 = set(keys[:5])
        mass: dict[Any, float] = {}
        for k in keys:
            sess = facts.get(rep.get(k, -1), (None,) * 5)[2]
            mass[sess] = mass.get(sess, 0.0) + max(scores[k], 0.0) / top
        best_mass = max(mass.values(), default=0.0) or 1.0
        rows = []
        depth = len(keys)
        for rank, k in enumerate(keys, start=1):
            f = facts.get(rep.get(k, -1), (None,) * 5)
            unit = nt.units.get(k)
            cos = own.get(k, 0.0)
            terms = unit.terms if unit is not None else {}
            rows.append([
                scores[k] / top,
                1.0 - math.log1p(rank) / math.log1p(depth),
                cos,
                cos - best_cos,
                1.0 / math.sqrt(dense_c[k][0]) if k in dense_c else 0.0,
                bm25_c[k][2] / b_best if k in bm25_c else 0.0,
                1.0 / math.sqrt(bm25_c[k][0]) if k in bm25_c else 0.0,
                max(window.get(k, -1.0), 0.0),
                sessions.get(unit.session, 0.0) / s_best if unit is not None else 0.0,
                float(who is not None and f[1] == who),
                float(fit.get(k, False)),
                float(date_asked),
                float(when and bool(f[4])),
                len(q_terms & set(terms)) / len(q_terms) if q_terms else 0.0,
                min(len(q_ents & unit.entities), 3) / 3 if unit is not None else 0.0,
                float(any(n in first5 for n in lay.neighbours.get(k, ()))),
                math.log1p(sum(terms.values())) / 5,
                cos * float(abstract),
                mass.get(f[2], 0.0) / best_mass,
                float(when) * (bm25_c[k][2] / b_best if k in bm25_c else 0.0),
            ])  # fmt: skip
        return np.asarray(rows, dtype=np.float64).reshape(-1, len(FEATURES))
