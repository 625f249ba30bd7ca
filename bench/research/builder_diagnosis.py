"""Why one builder's memory answers better than another's (issue 35): memory, retrieval or reader.

    .venv/bin/python -m bench.research.builder_diagnosis raw=runs/b35/raw annotations=runs/b35/annotations \\
        --out docs/builders/diagnosis

For each ``memrl eval`` run (``predictions.jsonl`` and ``memory.db``) and each category 1-4, with no
model: the answer's words (LoCoMo's normalisation and Porter stems, as the official F1 counts them) found

- **in the memory**: anywhere in the conversation's memory (every item as the reader reads it, and the
  core memory): can this memory answer at all;
- **in the context**: in what the answerer was shown (the top-k retrieved lines and the core memory):
  did retrieval bring it;
- **in the answer**: the official F1 of the prediction: did the reader use it;

as the mean share of the gold answer's words (and the share of questions with all of them), beside the
context's length in characters, the share of "not mentioned" answers, and for temporal questions whether
the gold answer's year appears in the context. A memory that holds the answer but whose context does not
loses at retrieval; a context that holds it but an answer that does not loses at the reader.

Writes ``OUT.md`` and ``OUT.json``; the last line of stdout is the JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
from pathlib import Path
from typing import Any

from bench.builders_table import CATEGORIES, scored_rows
from memrl.data.locomo import NOT_ANSWERABLE
from memrl.scoring.metrics import _stem, normalize_answer


def words(text: Any) -> set[str]:
    """The stemmed words the official F1 compares."""
    return {_stem(w) for w in normalize_answer(text).split()}


def gold_of(row: dict[str, Any]) -> str:
    gold = str((row.get("answers") or [""])[0])
    return gold.split(";")[0] if row["category"] == "open-domain" else gold


def share(gold: set[str], context: set[str]) -> float | None:
    return len(gold & context) / len(gold) if gold else None


async def load_memory(run: Path) -> tuple[dict[str, str], dict[str, set[str]], dict[str, str]]:
    """Item id -> line as read; conversation -> words of its whole memory; conversation -> core memory."""
    from memrl.memory.facade.memory import AsyncMemory
    from memrl.memory.records.reading import shown_text

    memory = AsyncMemory(str(run / "memory.db"), embedder="hashing")  # inspection only
    lines: dict[str, str] = {}
    everything: dict[str, set[str]] = {}
    cores: dict[str, str] = {}
    try:
        for ns in [n["name"] for n in await memory.namespaces()]:
            conv = ns.split("@")[0]
            core = await memory.core(namespace=ns)
            items = await memory.list(namespace=ns)
            cores[conv] = core
            bag = words(core)
            for it in items:
                lines[it.id] = shown_text(it)
                bag |= words(lines[it.id])
            everything[conv] = bag
    finally:
        await memory.close()
    return lines, everything, cores


def diagnose(name: str, run: Path) -> dict[str, Any]:
    lines, everything, cores = asyncio.run(load_memory(run))
    rows = [r for r in scored_rows(run) if r.get("prediction") is not None]
    out: dict[str, Any] = {"builder": name, "run": str(run)}
    for cat in (*CATEGORIES, "all"):
        sel = [r for r in rows if cat == "all" or r["category"] == cat]
        stats: dict[str, list[float]] = {k: [] for k in ("memory", "context", "memory_all", "context_all")}
        chars, not_mentioned, years, f1 = [], [], [], []
        for r in sel:
            gold = words(gold_of(r))
            shown = [lines.get(i, "") for i in r.get("retrieved_ids", [])]
            context_text = "\n".join([cores.get(r["conversation"], ""), *shown])
            context = words(context_text)
            for key, bag in (("memory", everything.get(r["conversation"], set())), ("context", context)):
                s = share(gold, bag)
                if s is not None:
                    stats[key].append(s)
                    stats[f"{key}_all"].append(1.0 if s == 1 else 0.0)
            chars.append(len(context_text))
            not_mentioned.append(1.0 if NOT_ANSWERABLE.lower() in str(r["prediction"]).lower() else 0.0)
            f1.append(r["f1"])
            if cat == "temporal":
                year = re.search(r"\b(19|20)\d\d\b", gold_of(r))
                if year:
                    years.append(1.0 if year.group(0) in context_text else 0.0)

        def mean(xs: list[float]) -> float | None:
            return sum(xs) / len(xs) if xs else None

        out[cat] = {
            "n": len(sel), **{k: mean(v) for k, v in stats.items()}, "f1": mean(f1),
            "context_chars": mean(chars), "not_mentioned": mean(not_mentioned),
            "year_in_context": mean(years),
        }  # fmt: skip
    return out


def markdown(table: list[dict[str, Any]]) -> str:
    def pct(x: Any) -> str:
        return "-" if x is None else f"{100 * x:.0f}"

    head = ("| builder | category | n | answer words in memory (all of them) | in the context (all) | answer F1 | "
            "context chars | 'not mentioned' answers |")  # fmt: skip
    lines = [head, "|---|---|" + "---:|" * 6]
    for t in table:
        for cat in (*CATEGORIES, "all"):
            d = t[cat]
            lines.append(
                f"| {t['builder']} | {cat} | {d['n']} | {pct(d['memory'])} ({pct(d['memory_all'])}) | "
                f"{pct(d['context'])} ({pct(d['context_all'])}) | {pct(d['f1'])} | {d['context_chars'] or 0:,.0f} | "
                f"{pct(d['not_mentioned'])} |"
            )
    years = [f"{t['builder']} {pct(t['temporal']['year_in_context'])}%" for t in table]
    lines += ["", "Temporal questions whose gold year appears in the context: " + ", ".join(years) + "."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", metavar="NAME=DIR")
    ap.add_argument("--out", help="write OUT.md and OUT.json")
    args = ap.parse_args(argv)
    table = [diagnose(n, Path(d)) for n, d in (x.split("=", 1) for x in args.runs)]
    md = markdown(table)
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
