"""Summary statistics for evaluation results: bootstrap confidence intervals and per-category tables.

Typical use, on a list of per-question result rows::

    from memrl.eval.stats import category_table, to_markdown
    table = category_table(rows, value_key="f1", category_key="category")
    print(to_markdown(table))

Two systems scored on the same items are compared by :func:`paired_difference` (per-item differences, a
cluster bootstrap when the items' conversations are given)::

    paired_difference(before_f1, after_f1, clusters=conversation_ids, scale=100)
    # {"diff": 3.1, "ci": [0.4, 5.9], "excludes_0": True}

Missing values (``None`` or NaN, e.g. a retrieval recall for a question without evidence) are left out
of every statistic; ``n`` counts the values actually used. The overall row is the mean over all used
rows (micro average), not the mean of the category means.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

__all__ = ["bootstrap_ci", "category_table", "cluster_bootstrap_ci", "paired_difference", "to_markdown"]

# Resampling is done in chunks so that memory stays bounded (n_resamples x n can be large).
_CHUNK_ELEMENTS = 2_000_000


def _clean(values: Iterable[Any]) -> np.ndarray:
    """Float array of the values that are neither ``None`` nor NaN."""
    out = [float(v) for v in values if v is not None]
    arr = np.asarray(out, dtype=np.float64)
    return arr[~np.isnan(arr)]


def bootstrap_ci(
    values: Iterable[float | None], n_resamples: int = 1000, alpha: float = 0.05, seed: int = 0
) -> tuple[float, float, float]:
    """Mean and percentile-bootstrap ``1 - alpha`` confidence interval: ``(mean, low, high)``.

    Deterministic for a given ``seed``. With no values all three are NaN; with one value the interval
    collapses onto it.
    """
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be >= 1, got {n_resamples}")
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    arr = _clean(values)
    n = arr.size
    if n == 0:
        return (math.nan, math.nan, math.nan)
    mean = float(arr.mean())
    if n == 1:
        return (mean, mean, mean)
    rng = np.random.default_rng(seed)
    means = np.empty(n_resamples, dtype=np.float64)
    rows_per_chunk = max(1, _CHUNK_ELEMENTS // n)
    for start in range(0, n_resamples, rows_per_chunk):
        stop = min(n_resamples, start + rows_per_chunk)
        idx = rng.integers(0, n, size=(stop - start, n))
        means[start:stop] = arr[idx].mean(axis=1)
    low, high = np.quantile(means, [alpha / 2.0, 1.0 - alpha / 2.0])
    return (mean, float(low), float(high))


def cluster_bootstrap_ci(
    values: Sequence[float | None],
    clusters: Sequence[Any],
    n_resamples: int = 2000,
    alpha: float = 0.05,
    seed: int = 0,
) -> tuple[float, float, float]:
    """Mean over every value and a two-stage cluster bootstrap ``1 - alpha`` interval: ``(mean, low, high)``.

    Questions about one conversation are not independent (one memory answers them all), so the interval
    resamples conversations: each resample draws as many clusters as there are, with replacement, then the
    values within each drawn cluster with replacement, and takes the mean of all the values drawn (micro
    average, like the point estimate). With few clusters the interval is wide, as it should be; with one
    cluster it is the ordinary bootstrap of its values. ``values[i]`` belongs to ``clusters[i]``; missing
    values (``None``/NaN) are left out. Paired comparisons pass per-question differences.
    """
    if len(values) != len(clusters):
        raise ValueError(f"{len(values)} values but {len(clusters)} cluster labels")
    groups: dict[Any, list[float]] = {}
    for v, c in zip(values, clusters, strict=True):
        if v is not None and not (isinstance(v, float) and math.isnan(v)):
            groups.setdefault(c, []).append(float(v))
    arrays = [np.asarray(g, dtype=np.float64) for g in groups.values()]
    if not arrays:
        return (math.nan, math.nan, math.nan)
    mean = float(np.concatenate(arrays).mean())
    rng = np.random.default_rng(seed)
    means = np.empty(n_resamples, dtype=np.float64)
    k = len(arrays)
    for r in range(n_resamples):
        drawn = rng.integers(0, k, size=k)
        total = count = 0.0
        for c in drawn:
            a = arrays[c]
            total += float(a[rng.integers(0, a.size, size=a.size)].sum())
            count += a.size
        means[r] = total / count
    low, high = np.quantile(means, [alpha / 2.0, 1.0 - alpha / 2.0])
    return (mean, float(low), float(high))


def paired_difference(
    a: Sequence[float],
    b: Sequence[float],
    clusters: Sequence[Any] | None = None,
    *,
    scale: float = 1.0,
    n_resamples: int = 10_000,
    seed: int = 0,
    digits: int = 2,
) -> dict[str, Any]:
    """Mean of ``scale * (b[i] - a[i])`` over the items, with its paired bootstrap 95% interval.

    ``a`` and ``b`` score the same items in the same order. The interval is :func:`bootstrap_ci` of the
    per-item differences, or :func:`cluster_bootstrap_ci` when ``clusters`` (one label per item) is given:
    items that share a conversation are not independent. Returns ``{"diff", "ci": [low, high],
    "excludes_0"}``, the numbers rounded to ``digits``; ``excludes_0`` is whether the interval lies wholly
    on one side of 0 (read ``ci[0] > 0`` for "b is better").
    """
    if len(a) != len(b):
        raise ValueError(f"cannot pair {len(a)} items with {len(b)}")
    diffs = [scale * (y - x) for x, y in zip(a, b, strict=True)]
    if clusters is None:
        diff, lo, hi = bootstrap_ci(diffs, n_resamples=n_resamples, seed=seed)
    else:
        diff, lo, hi = cluster_bootstrap_ci(diffs, list(clusters), n_resamples=n_resamples, seed=seed)
    return {
        "diff": round(diff, digits),
        "ci": [round(lo, digits), round(hi, digits)],
        "excludes_0": bool(lo > 0 or hi < 0),
    }


def _sort_key(cat: Any) -> tuple[int, Any]:
    # Numbers first in numeric order, then everything else by its text; keeps mixed keys sortable.
    if isinstance(cat, (int, float)) and not isinstance(cat, bool):
        return (0, cat)
    if isinstance(cat, tuple):  # an explicit sort key (e.g. (category id, context length, name))
        return (2, cat)
    return (1, str(cat))


def category_table(
    rows: Iterable[Mapping[str, Any]],
    value_key: str,
    category_key: str,
    *,
    labels: Mapping[Any, str] | Callable[[Any], str] | None = None,
    n_resamples: int = 1000,
    alpha: float = 0.05,
    seed: int = 0,
    overall: bool = True,
) -> list[dict[str, Any]]:
    """One row per category, sorted by category, then an ``"overall"`` row.

    Each row is ``{"category", "n", "mean", "ci_low", "ci_high"}``; ``labels`` (e.g.
    ``memrl.scoring.metrics.LOCOMO_CATEGORIES``) replaces category ids by names in the ``category`` column.
    Rows without ``value_key`` or with a missing value are skipped.
    """
    groups: dict[Any, list[float]] = {}
    all_values: list[float] = []
    for row in rows:
        value = row.get(value_key)
        if value is None or (isinstance(value, float) and math.isnan(value)):
            continue
        groups.setdefault(row.get(category_key), []).append(float(value))
        all_values.append(float(value))

    def label(cat: Any) -> Any:
        if labels is None:
            return cat
        if isinstance(labels, Mapping):
            return labels.get(cat, cat)
        return labels(cat)

    def summary(name: Any, values: Sequence[float]) -> dict[str, Any]:
        mean, low, high = bootstrap_ci(values, n_resamples=n_resamples, alpha=alpha, seed=seed)
        return {"category": name, "n": len(values), "mean": mean, "ci_low": low, "ci_high": high}

    table = [summary(label(cat), groups[cat]) for cat in sorted(groups, key=_sort_key)]
    if overall:
        table.append(summary("overall", all_values))
    return table


def _cell(value: Any, digits: int) -> str:
    if isinstance(value, float):
        return "-" if math.isnan(value) else f"{value:.{digits}f}"
    return str(value).replace("|", "\\|")


def to_markdown(
    table: Sequence[Mapping[str, Any]], columns: Sequence[str] | None = None, digits: int = 3
) -> str:
    """A GitHub-flavoured Markdown table; ``columns`` defaults to the keys of the first row.

    Floats are printed with ``digits`` decimals (NaN as ``-``); numeric columns are right-aligned.
    """
    if not table:
        return ""
    cols = list(columns) if columns is not None else list(table[0].keys())
    numeric = {
        c: all(isinstance(r.get(c), (int, float)) and not isinstance(r.get(c), bool) for r in table)
        for c in cols
    }
    header = "| " + " | ".join(cols) + " |"
    rule = "|" + "|".join("---:" if numeric[c] else "---" for c in cols) + "|"
    body = ["| " + " | ".join(_cell(r.get(c, ""), digits) for c in cols) + " |" for r in table]
    return "\n".join([header, rule, *body])
