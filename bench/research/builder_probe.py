"""A model-free probe of a built memory for LoCoMo QA: what the answer prompt shows, and what a reader
that copies one line of it would score (issue 35's diagnosis, without spending an hour of answers).

    memrl eval --dataset locomo --split test --builder annotations --mode build --output-dir runs/ann
    .venv/bin/python -m bench.research.builder_probe annotations=runs/ann raw=runs/raw --out docs/builders/probe

For each store (``memory.db`` of a ``memrl eval`` run; one namespace per conversation) and every question
of categories 1-4, the retrieval the answerer gets (:func:`memrl.scoring.answer.answer_from_memory`'s:
the same search, top-k and prompt, :func:`memrl.scoring.answer.answer_messages`), then, per category:

- ``first line``: official F1 of the prompt's first context line (memory 1; before issue 35 the core
  memory's first line when there was a core memory), cut to the answer budget in the answerer's tokens and cleaned like an
  answer. SmolLM2-135M answers mostly by copying that line (``docs/results/builders.md``), so this is a stand-in for
  it; how close it is is checked against the real answers of the same store when the folder has them
  (``real F1``);
- ``best line``: the best F1 of any one context line (a reader that picks the right line and copies it);
- evidence recall of the retrieved memories, and the prompt's length in characters.

Writes ``OUT.md``, ``OUT.json``; the last line of stdout is the JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from bench.builders_table import CATEGORIES, scored_rows
from memrl.eval.qa.config import QAEvalConfig, load_conversations
from memrl.scoring.answer import answer_messages, clean_prediction
from memrl.scoring.metrics import score


def context_lines(user_prompt: str) -> list[str]:
    """The lines of the answer prompt's context (core memory and numbered memories), in order."""
    body = user_prompt.rsplit("\n\nQuestion", 1)[0]
    skip = ("Core memory:", "Memories (most relevant first):", "Passages (most relevant first):")
    return [x for x in body.splitlines() if x.strip() and x.strip() not in skip]


def cut(text: str, tokenizer: Any, max_tokens: int) -> str:
    if tokenizer is None:
        return " ".join(text.split()[:max_tokens])
    ids = tokenizer.encode(text, add_special_tokens=False)[:max_tokens]
    return tokenizer.decode(ids)


async def probe_store(
    run: Path, convs: list[Any], *, embedder: str, top_k: int, max_tokens: int, tokenizer: Any
) -> list[dict[str, Any]]:
    from memrl.memory.facade.memory import AsyncMemory

    memory = AsyncMemory(str(run / "memory.db"), embedder=embedder)
    rows = []
    try:
        names = {n["name"].split("@")[0]: n["name"] for n in await memory.namespaces()}
        for conv in convs:
            ns = names.get(conv.id)
            if ns is None:
                continue
            core = await memory.core(namespace=ns)
            for q in conv.questions:
                if q.category not in CATEGORIES:
                    continue
                hits = await memory.search(q.question, namespace=ns, top_k=top_k)
                prompt = answer_messages(conv, q, core, hits)[-1]["content"]
                lines = context_lines(prompt)
                first = clean_prediction(cut(lines[0], tokenizer, max_tokens)) if lines else ""
                best = max((score(conv, q, cut(x, tokenizer, max_tokens))["f1"] for x in lines), default=0.0)
                found = set(conv.covered([e for h in hits for e in h.item.evidence])) & set(q.evidence)
                rows.append({
                    "question_id": q.id, "conversation": conv.id, "category": q.category,
                    "first_line": score(conv, q, first)["f1"] if first else 0.0, "best_line": best,
                    "evidence_recall": len(found) / len(set(q.evidence)) if q.evidence else None,
                    "prompt_chars": len(prompt),
                })  # fmt: skip
    finally:
        await memory.close()
    return rows


def summarize(name: str, run: Path, rows: list[dict[str, Any]]) -> dict[str, Any]:
    real = {r["question_id"]: r["f1"] for r in scored_rows(run) if r.get("f1") is not None}
    out: dict[str, Any] = {"builder": name, "run": str(run)}

    def mean(xs: list[Any]) -> float | None:
        xs = [x for x in xs if x is not None]
        return sum(xs) / len(xs) if xs else None

    for cat in (*CATEGORIES, "all"):
        sel = [r for r in rows if cat == "all" or r["category"] == cat]
        out[cat] = {
            "n": len(sel), "first_line": mean([r["first_line"] for r in sel]),
            "best_line": mean([r["best_line"] for r in sel]),
            "evidence_recall": mean([r["evidence_recall"] for r in sel]),
            "prompt_chars": mean([r["prompt_chars"] for r in sel]),
            "real_f1": mean([real.get(r["question_id"]) for r in sel]) if real else None,
        }  # fmt: skip
    return out


def markdown(table: list[dict[str, Any]]) -> str:
    def pct(x: Any) -> str:
        return "-" if x is None else f"{100 * x:.1f}"

    lines = [
        "| store | category | n | first line F1 | real F1 | best line F1 | evidence recall | prompt chars |",
        "|---|---|" + "---:|" * 6,
    ]
    for t in table:
        for cat in (*CATEGORIES, "all"):
            d = t[cat]
            lines.append(
                f"| {t['builder']} | {cat} | {d['n']} | {pct(d['first_line'])} | {pct(d['real_f1'])} | "
                f"{pct(d['best_line'])} | {pct(d['evidence_recall'])} | {d['prompt_chars'] or 0:,.0f} |"
            )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", metavar="NAME=DIR", help="memrl eval output folders (memory.db)")
    ap.add_argument("--dataset", default="locomo")
    ap.add_argument("--data-path")
    ap.add_argument("--split", default="test")
    ap.add_argument("--conv-id", nargs="*", default=[])
    ap.add_argument("--embedder", default="minilm", help="the embedder the store was built with")
    ap.add_argument("--top-k", type=int, default=10)
    ap.add_argument("--max-answer-tokens", type=int, default=48)
    ap.add_argument(
        "--tokenizer", default="default", help="'default' (SmolLM2's), 'words', or a model folder"
    )
    ap.add_argument("--out", help="write OUT.md and OUT.json")
    args = ap.parse_args(argv)
    tokenizer = None
    if args.tokenizer != "words":
        from transformers import AutoTokenizer

        from memrl.llm.local.hf_models import ensure_local_model

        path = ensure_local_model(None) if args.tokenizer == "default" else args.tokenizer
        tokenizer = AutoTokenizer.from_pretrained(path)
    cfg = QAEvalConfig(dataset=args.dataset, data_path=args.data_path, split=args.split or None,
                       conv_id=tuple(args.conv_id))  # fmt: skip
    convs = load_conversations(cfg)
    table = []
    for name, d in (x.split("=", 1) for x in args.runs):
        rows = asyncio.run(
            probe_store(Path(d), convs, embedder=args.embedder, top_k=args.top_k,
                        max_tokens=args.max_answer_tokens, tokenizer=tokenizer)
        )  # fmt: skip
        table.append(summarize(name, Path(d), rows))
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
