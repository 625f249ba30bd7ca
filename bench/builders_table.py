"""The builders' LoCoMo table (issue 35): QA F1 per category with cluster intervals, and what building costs.

    .venv/bin/python -m bench.builders_table raw=runs/b35/raw annotations=runs/b35/annotations \\
        membuilder=runs/b35/membuilder --baseline raw --out docs/builders/table

Each ``NAME=DIR`` is one ``memrl eval`` output folder (``predictions.jsonl``, ``builds.jsonl``,
``memory.db``) over the same conversations and questions with the same answerer and top-k. Reported per
builder:

- F1 (official LoCoMo metric, x 100) per category 1-4 and overall, with a two-stage cluster bootstrap 95%
  interval by conversation (:func:`memrl.eval.stats.cluster_bootstrap_ci`: questions about one
  conversation share one memory, so conversations are resampled, then questions within them);
- overall minus the baseline's, per question on the questions both answered, with the same paired cluster
  interval;
- evidence recall of the top-k (share of the question's evidence turns the retrieved memories cite);
- the memory: items in the store at the end, and the mean length of a memory as the reader reads it
  (characters of :func:`memrl.memory.records.reading.shown_text`);
- per session built: seconds, LLM calls, prompt and completion tokens (``builds.jsonl``); per question
  answered: prompt tokens of the answer call.

Questions whose answer failed are left out of the scores and counted (``failed``). Writes ``OUT.md`` and
``OUT.json``; the last line of stdout is the JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from memrl.eval.qa.report import latest_rows
from memrl.eval.stats import cluster_bootstrap_ci

CATEGORIES = ("multi-hop", "temporal", "open-domain", "single-hop")


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def scored_rows(run: Path) -> list[dict[str, Any]]:
    """The last row per question, categories 1-4 (LoCoMo's headline)."""
    return [r for r in latest_rows(read_jsonl(run / "predictions.jsonl")) if r.get("category") in CATEGORIES]


async def memory_stats(run: Path) -> dict[str, Any]:
    """Items per conversation's namespace at the end of the build and their mean length as read."""
    from memrl.memory.facade.memory import AsyncMemory
    from memrl.memory.records.reading import shown_text

    db = run / "memory.db"
    if not db.exists():
        return {}
    memory = AsyncMemory(str(db), embedder="hashing")  # inspection only: nothing is embedded
    try:
        items: list[Any] = []
        core = 0
        names = [n["name"] for n in await memory.namespaces()]
        for ns in names:
            items += await memory.list(namespace=ns)
            core += len(await memory.core(namespace=ns))
    finally:
        await memory.close()
    lengths = [len(shown_text(i)) for i in items]
    return {
        "namespaces": len(names),
        "items": len(items),
        "item_chars": sum(lengths) / len(lengths) if lengths else None,
        "core_chars": core / len(names) if names else None,
    }


def interval(values: list[float | None], clusters: list[str]) -> dict[str, Any]:
    mean, lo, hi = cluster_bootstrap_ci(values, clusters)
    return {"n": sum(v is not None for v in values), "mean": mean, "ci_low": lo, "ci_high": hi}


def summarize(name: str, run: Path, baseline: dict[str, dict[str, Any]] | None) -> dict[str, Any]:
    rows = scored_rows(run)
    ok = [r for r in rows if r.get("prediction") is not None and r.get("f1") is not None]
    out: dict[str, Any] = {
        "builder": name,
        "run": str(run),
        "questions": len(rows),
        "failed": len(rows) - len(ok),
    }
    out["conversations"] = sorted({r["conversation"] for r in rows})
    for cat in CATEGORIES:
        sel = [r for r in ok if r["category"] == cat]
        out[cat] = interval([r["f1"] for r in sel], [r["conversation"] for r in sel])
    out["overall"] = interval([r["f1"] for r in ok], [r["conversation"] for r in ok])
    if baseline is not None:
        pairs = [(r, baseline[r["question_id"]]) for r in ok if r["question_id"] in baseline]
        out["minus_baseline"] = interval(
            [a["f1"] - b["f1"] for a, b in pairs], [a["conversation"] for a, _ in pairs]
        )
    recall = [r.get("evidence_recall") for r in ok]
    out["evidence_recall"] = interval(recall, [r["conversation"] for r in ok])["mean"]
    out["answer_prompt_tokens"] = sum(r.get("prompt_tokens", 0) for r in ok) / len(ok) if ok else None
    sessions = [
        b for b in read_jsonl(run / "builds.jsonl") if isinstance(b.get("session"), int) and b["session"] > 0
    ]
    n = len(sessions) or 1
    out["build"] = {
        "sessions": len(sessions),
        "seconds_per_session": sum(b.get("seconds", 0.0) for b in sessions) / n,
        "llm_calls_per_session": sum(b.get("llm_calls", 0) for b in sessions) / n,
        "prompt_tokens_per_session": sum(b.get("prompt_tokens", 0) for b in sessions) / n,
        "completion_tokens_per_session": sum(b.get("completion_tokens", 0) for b in sessions) / n,
        "failures": sum(len(b.get("failures", [])) for b in sessions),
        "actions_applied": sum(b.get("stats", {}).get("actions_applied", 0) for b in sessions),
        "actions_proposed": sum(b.get("stats", {}).get("actions_proposed", 0) for b in sessions),
    }
    out["memory"] = asyncio.run(memory_stats(run))
    return out


def cell(d: dict[str, Any]) -> str:
    if d["mean"] is None or d["mean"] != d["mean"]:
        return "-"
    return f"{100 * d['mean']:.1f} ({100 * d['ci_low']:.1f}..{100 * d['ci_high']:.1f})"


def markdown(table: list[dict[str, Any]], baseline: str | None) -> str:
    head = ["builder", "n", *CATEGORIES, "all"]
    if baseline:
        head.append(f"all minus {baseline}")
    lines = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
    for t in table:
        cells = [t["builder"], str(t["overall"]["n"]), *(cell(t[c]) for c in CATEGORIES), cell(t["overall"])]
        if baseline:
            cells.append(cell(t["minus_baseline"]) if "minus_baseline" in t else "-")
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "| builder | evidence recall | items | chars/item | core chars | s/session | LLM calls/session | "
              "prompt tokens/session | completion tokens/session | actions applied | answer prompt tokens |",
              "|---|" + "---:|" * 10]  # fmt: skip
    for t in table:
        b, m = t["build"], t["memory"]
        applied = f"{b['actions_applied']}/{b['actions_proposed']}" if b["actions_proposed"] else "-"
        lines.append(
            f"| {t['builder']} | {100 * (t['evidence_recall'] or 0):.1f} | {m.get('items', '-')} | "
            f"{m.get('item_chars') or 0:.0f} | {m.get('core_chars') or 0:.0f} | {b['seconds_per_session']:.1f} | "
            f"{b['llm_calls_per_session']:.1f} | {b['prompt_tokens_per_session']:,.0f} | "
            f"{b['completion_tokens_per_session']:,.0f} | {applied} | {t['answer_prompt_tokens'] or 0:,.0f} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", metavar="NAME=DIR", help="a memrl eval output folder per builder")
    ap.add_argument("--baseline", help="NAME of the run every other is compared with, per question")
    ap.add_argument("--out", help="write OUT.md and OUT.json")
    args = ap.parse_args(argv)
    runs = dict(x.split("=", 1) for x in args.runs)
    base = None
    if args.baseline:
        if args.baseline not in runs:
            raise SystemExit(f"--baseline {args.baseline} is not one of {sorted(runs)}")
        base = {
            r["question_id"]: r for r in scored_rows(Path(runs[args.baseline])) if r.get("f1") is not None
        }
    table = [summarize(n, Path(d), None if n == args.baseline else base) for n, d in runs.items()]
    md = markdown(table, args.baseline)
    print(md)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(f"{args.out}.md").write_text(md)
        Path(f"{args.out}.json").write_text(json.dumps(table, indent=2))
    sys.stdout.flush()
    print(json.dumps(table))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
