"""Printing, summarising and profiling one store's run of bench/store.py (not a benchmark itself).

- :func:`print_size`: the table of one size (latencies per method, recall and hit@k);
- :func:`summary`: the JSON figures of one store's run (the last size, and every size in ``per_size``);
- :func:`profile_search`: with ``--profile``, where the time goes at the largest size (cProfile of the cold
  load and of hybrid and bm25 search, SQLite's size by table);
- :func:`plot_latency`: with ``--plot FILE``, search p50 against the number of items, per back-end and mode.

Run as a script, it draws that plot from the JSON lines of several runs (their sizes merged per back-end)::

    python -m bench.store_report --plot docs/store-latency.png runs/store/2026-11-27-10k-100k.json \
        runs/store/2026-11-27-1m.json
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import sys
from pathlib import Path
from typing import Any

import bench.store_data as store_data
from bench.store_data import NAMESPACE, Queries
from memrl.errors import StoreError
from memrl.memory.facade.memory import AsyncMemory


def print_profile(prof: cProfile.Profile, title: str, lines: int = 12) -> None:
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(lines)
    print(f"\n{title} (cProfile, by own time):", file=sys.stderr)
    print("\n".join(buf.getvalue().splitlines()[4:]).rstrip(), file=sys.stderr)


async def profile_search(mem: AsyncMemory, qs: Queries, top_k: int) -> None:
    """Where the time goes at the current size: the cold load, hybrid and bm25 search (cProfile), and the
    database's size by table."""
    store = mem.store
    try:
        rows = store.read("SELECT name, sum(pgsize) FROM dbstat GROUP BY name ORDER BY 2 DESC LIMIT 6")
        print(
            "\ndatabase size by table: " + ", ".join(f"{r[0]} {r[1] / 2**20:.0f} MB" for r in rows),
            file=sys.stderr,
        )
    except StoreError:
        pass  # SQLite built without the dbstat table
    mem.index.forget(NAMESPACE)
    prof = cProfile.Profile()
    prof.enable()  # nothing else runs on this event loop meanwhile
    await mem.search(qs.texts[0], namespace=NAMESPACE, top_k=top_k, mode="dense", query_vector=qs.vectors[0])
    prof.disable()
    print_profile(prof, "cold load: first dense search after index.forget")
    for mode in ("hybrid", "bm25"):
        prof = cProfile.Profile()
        prof.enable()
        for i in range(len(qs.texts)):
            await mem.search(
                qs.texts[i], namespace=NAMESPACE, top_k=top_k, mode=mode, query_vector=qs.vectors[i]
            )
        prof.disable()
        print_profile(prof, f"{len(qs.texts)} {mode} searches")


# ---------------------------------------------------------------------- report
def print_size(row: dict[str, Any], batch: int) -> None:
    lg = row.get("langgraph")
    print(
        f"\nn={row['n']:,}: insert {row['insert_per_s']:,} items/s through add_many (batches of {batch}; "
        f"history + embedding cache included, embedder cost excluded), dense cold load "
        f"{row['dense_cold_ms']:,.0f} ms, BM25 cold load {row['bm25_cold_ms']:,.0f} ms, db "
        + (f"{row['db_mb']} MB" if row["db_mb"] else "in memory")
        + (
            f", this process resident {row['rss_mb']['now']:,.0f} MB (peak {row['rss_mb']['peak']:,.0f})"
            if row.get("rss_mb")
            else ""
        ),
        flush=True,
    )
    if row["ann_build_s"] is not None:
        print(
            f"  ANN: built in {row['ann_build_s']} s; recall@k against the exact path {row['ann_recall_vs_exact']}"
        )
    print(f"  {'method':<10}{'p50 ms':>9}{'p95 ms':>9}{'mean ms':>9}{'x numpy':>9}{'recall':>8}{'hit@k':>7}")
    base = row["numpy"]["p50_ms"]
    recall = {"numpy": 1.0, "einsum": row["einsum_recall_vs_numpy"], "dense": row["dense_recall_vs_numpy"]}
    methods = {
        m: row[m]
        for m in ("numpy", "einsum", "dense", "dense_exact", "hybrid", "hybrid_no_date_window", "bm25")
    }
    if lg:
        methods["langgraph"] = lg
        recall["langgraph"] = lg["recall_vs_numpy"]
    for name, s in methods.items():
        rec = f"{recall[name]:.3f}" if name in recall else "-"
        print(
            f"  {name:<10}{s['p50_ms']:>9.3f}{s['p95_ms']:>9.3f}{s['mean_ms']:>9.3f}"
            f"{s['p50_ms'] / base:>9.2f}{rec:>8}{s['hit_at_k']:>7.2f}",
            flush=True,
        )


def summary(
    rows: list[dict[str, Any]], insert_per_s: float, args: argparse.Namespace, host: dict[str, Any]
) -> dict[str, Any]:
    last = rows[-1]
    lg_rows = [r for r in rows if r.get("langgraph")]
    lg = lg_rows[-1] if lg_rows else None
    out = {
        "n": last["n"],
        "dense_p50_ms": last["dense"]["p50_ms"],
        "hybrid_p50_ms": last["hybrid"]["p50_ms"],
        "hybrid_no_date_window_p50_ms": last["hybrid_no_date_window"]["p50_ms"],
        "bm25_p50_ms": last["bm25"]["p50_ms"],
        "numpy_p50_ms": last["numpy"]["p50_ms"],
        "einsum_p50_ms": last["einsum"]["p50_ms"],
        "dense_cold_ms": last["dense_cold_ms"],
        "bm25_cold_ms": last["bm25_cold_ms"],
        "dense_vs_numpy": last["dense_vs_numpy"],
        "dense_recall_vs_numpy": min(r["dense_recall_vs_numpy"] for r in rows),
        # ANN (issue 38): per size, the graph's (or pgvector index's) build, recall@k against the exact path,
        # dense p50/p99 with and without it
        "ann": [
            {
                "n": r["n"],
                "build_s": r["ann_build_s"],
                "recall_vs_exact": r["ann_recall_vs_exact"],
                "dense_p50_ms": r["dense"]["p50_ms"],
                "dense_p99_ms": r["dense"]["p99_ms"],
                "exact_p50_ms": r["dense_exact"]["p50_ms"],
                "exact_p99_ms": r["dense_exact"]["p99_ms"],
                "cold_ms": r["dense_cold_ms"],
            }
            for r in rows
        ],
        "langgraph_n": lg["n"] if lg else None,
        "langgraph_p50_ms": lg["langgraph"]["p50_ms"] if lg else None,
        "langgraph_recall_vs_numpy": lg["langgraph"]["recall_vs_numpy"] if lg else None,
        "dense_p50_ms_at_langgraph_n": lg["dense"]["p50_ms"] if lg else None,
        "insert_per_s": round(insert_per_s),
        "targets": {
            "dense_within_2x_numpy_at_n": last["dense_vs_numpy"] <= 2.0,
            "dense_faster_than_langgraph": (lg["dense"]["p50_ms"] < lg["langgraph"]["p50_ms"])
            if lg
            else None,
            "hybrid_faster_than_langgraph": (lg["hybrid"]["p50_ms"] < lg["langgraph"]["p50_ms"])
            if lg
            else None,
            "hybrid_p50_under_50ms_at_n": last["hybrid"]["p50_ms"] < 50.0,
        },
        "per_size": rows,
        "config": {
            "sizes": [r["n"] for r in rows],
            "queries": args.queries,
            "top_k": args.top_k,
            "batch": args.batch,
            "db": "temp file" if args.db is None else args.db,
            "seed": args.seed,
            "dim": store_data.DIM,
            "vocab": args.vocab,
        },
        "notes": "latencies in ms of one search call (query embedding excluded: query_vector given); "
        "insert_per_s excludes embedding compute (vectors precomputed) but includes history and "
        "embedding-cache writes",
        "machine": host,
    }
    return out


#: the methods drawn by :func:`plot_latency`: the store's three modes, and numpy's brute force as the peer
PLOTTED = {"dense": "-", "hybrid": "--", "bm25": ":", "numpy": "-."}


def plot_latency(results: dict[str, dict[str, Any]], path: Path) -> dict[str, list[tuple[int, float]]]:
    """Search p50 (ms) against the number of items, log-log, drawn to ``path``: a line per back-end and
    method, from each back-end's ``per_size`` rows (numpy's brute force once: the same vectors on every
    back-end). Returns the lines drawn, ``{label: [(n, p50 ms), ...]}``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    lines: dict[str, list[tuple[int, float]]] = {}
    for b, (backend, out) in enumerate(results.items()):
        rows = sorted(out["per_size"], key=lambda r: r["n"])
        for method, style in PLOTTED.items():
            if method == "numpy" and b:
                continue
            label = "numpy brute force" if method == "numpy" else f"{backend} {method}"
            color = "grey" if method == "numpy" else colors[b % len(colors)]
            lines[label] = [(r["n"], r[method]["p50_ms"]) for r in rows]
            ax.plot(*zip(*lines[label], strict=True), style, marker="o", color=color, label=label)
    ax.set(xscale="log", yscale="log", xlabel="items in the namespace", ylabel="search p50 (ms)",
           title="bench/store.py: one search's p50 latency by store size")  # fmt: skip
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return lines


def merge_runs(paths: list[Path]) -> dict[str, dict[str, Any]]:
    """The ``per_size`` rows of several runs' JSON (each file's last line), merged per back-end; a size met
    twice is an error (two measurements of one point, neither chosen silently)."""
    merged: dict[str, dict[str, Any]] = {}
    for path in paths:
        lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        try:
            backends = json.loads(lines[-1])["backends"]
        except (IndexError, KeyError, ValueError) as e:
            raise SystemExit(f"{path}: its last line is not bench/store.py's JSON ({e})") from e
        for backend, out in backends.items():
            rows = merged.setdefault(backend, {"per_size": []})["per_size"]
            for row in out["per_size"]:
                if any(r["n"] == row["n"] for r in rows):
                    raise SystemExit(f"{path}: {backend} at n={row['n']} is also in an earlier file")
                rows.append(row)
    return merged


if __name__ == "__main__":
    p = argparse.ArgumentParser(description="search p50 against size, from the JSON of bench/store.py runs")
    p.add_argument("--plot", type=Path, required=True, help="the PNG to draw")
    p.add_argument("runs", type=Path, nargs="+", help="files whose last line is a run's JSON")
    a = p.parse_args()
    drawn = plot_latency(merge_runs(a.runs), a.plot)
    print(json.dumps({"plot": str(a.plot), "lines": drawn}))
