"""SFT warm start for ``read``: expert MemAgent trajectories on TRAIN documents, trained with memrl's SFT code.

The expert reads each RULER-LoCoMo document of LoCoMo's TRAIN conversations exactly as the student will
(:class:`memrl.agents.memagent.MemAgent` itself runs it: same chunks, cut by the student's tokenizer, same
prompts and budgets as ``python -m bench.learning --task read``), but its replies are written from the annotation:
after a chunk holding one of the question's evidence turns (LoCoMo's evidence ids), the memory is every
evidence turn read so far, each with its session's date, cut to the memory budget; after a chunk holding
none, the previous memory unchanged; the answer is ``\\boxed{gold}`` (the first gold; a gold longer than
the answer grammar allows leaves that document's answer step out, counted). Each expert call is one SFT
example (:func:`memrl.train.sft.sft_samples`: the student's chat template, loss on the reply), trained by
:class:`memrl.train.sft.SFTTrainer` (full weights, one example per forward pass; ``bench/learning.py``'s
:func:`bench.learning_read.sft_stage`, the same warm start ``--task read --sft-minutes N`` runs) for ``--minutes``::

    .venv/bin/python -m bench.read_sft --out runs/read-sft --minutes 8
    .venv/bin/python -m bench.learning --task read --model runs/read-sft/sft/checkpoint ...

**Choosing the SFT on train conversations only** (``--val-conv``): the documents whose question belongs to
that TRAIN conversation are left out of the SFT, ``--val-items`` of them (a sample stratified to their
category mix) are read greedily with the weights as they were at each of ``--marks`` (minutes of SFT), and
scored beside the no-model rules fitted on the other train documents; each reading also says how much of
the question's evidence its final memory holds (:func:`evidence_in`: the share of the evidence turns'
content words in the memory), which separates "found the evidence" from "answered from it"::

    .venv/bin/python -m bench.read_sft --val-conv conv-50 --marks 8,16,24,32 --autocast bf16 --out runs/read-sft-val

Writes OUT/sft/checkpoint (a model folder), OUT/sft/sft_metrics.jsonl, OUT/read_sft.json (and with
``--val-conv`` OUT/val-MINUTES.jsonl: every validation prediction and memory); the last line of stdout is
the JSON object. Test documents are never read: the documents come from ``ruler-locomo --split train``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any


def _snapshot(model: Any) -> dict[str, Any]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=Path("runs/read-sft"))
    ap.add_argument("--minutes", type=float, default=8.0, help="SFT time budget")
    ap.add_argument("--steps", type=int, help="at most this many optimizer steps")
    ap.add_argument("--documents", type=int, help="at most this many train documents (default: all)")
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--batch", type=int, default=8, help="examples per optimizer step")
    ap.add_argument("--answer-repeat", type=int, default=3, help="each answer example this many times")
    ap.add_argument("--autocast", default="none", choices=["none", "bf16"], help="SFT in bfloat16 autocast")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--model", help="HF folder (default: the offline SmolLM2-135M-Instruct)")
    ap.add_argument("--length", default="1k")
    ap.add_argument("--chunk-tokens", type=int, default=512)
    ap.add_argument("--memory-tokens", type=int, default=48)
    ap.add_argument("--answer-tokens", type=int, default=40)
    ap.add_argument("--memory-first", action="store_true")
    ap.add_argument(
        "--val-conv", help="a TRAIN conversation whose documents are held out and read at --marks"
    )
    ap.add_argument("--val-items", type=int, default=48, help="validation documents (stratified sample)")
    ap.add_argument(
        "--marks", default="", help="minutes of SFT at which the validation reads (default: the end)"
    )
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    if (
        args.minutes <= 0
        or args.batch < 1
        or (args.steps is not None and args.steps < 1)
        or args.answer_repeat < 1
    ):
        ap.error("--minutes must be > 0, --batch, --answer-repeat and --steps >= 1")
    if args.answer_tokens <= 8:
        ap.error("--answer-tokens must be > 8 (the box itself takes up to 8)")
    marks = sorted(float(m) for m in args.marks.split(",") if m.strip()) or [args.minutes]
    if marks[-1] > args.minutes or marks[0] <= 0:
        ap.error("--marks must lie in (0, --minutes]")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("MEMRL_DATA_DIR", str(Path(__file__).resolve().parents[2] / "shared" / "data"))
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from bench.learning_baselines import document_item
    from bench.learning_read import (
        bm25_finds_evidence,
        documents,
        evaluate,
        evidence_summary,
        reader_config,
        rules_on,
        sft_stage,
        stratified,
    )
    from bench.learning_report import by_category, mean, write_predictions
    from memrl.llm.local import LocalLLM

    t0 = time.perf_counter()
    docs = documents("train", args.length)[: args.documents]
    val_docs: list[Any] = []
    if args.val_conv:
        val_docs = [d for d in docs if d.metadata["question_id"].startswith(args.val_conv + ":")]
        if not val_docs:
            ap.error(f"--val-conv {args.val_conv}: no train document's question is from it")
        docs = [d for d in docs if d not in val_docs]
        val_docs = stratified(val_docs, args.val_items)
    config = reader_config(args)
    student = LocalLLM(args.model, device=getattr(args, "device", "cpu")).load()
    sft_args = argparse.Namespace(sft_lr=args.lr, sft_epochs=1, sft_batch=args.batch, seed=args.seed,
                                  sft_autocast=args.autocast, out=args.out, quiet=args.quiet,
                                  sft_steps=args.steps or 0, sft_minutes=args.minutes,
                                  sft_answer_repeat=args.answer_repeat)  # fmt: skip
    snaps: list[tuple[float, int, dict[str, Any]]] = []
    t_sft: list[float] = []

    def on_step(row: dict) -> None:  # weights kept at each mark, read after the SFT (its clock runs on)
        elapsed = time.perf_counter() - t_sft[0]
        if val_docs and len(snaps) < len(marks) and elapsed >= 60 * marks[len(snaps)]:
            snaps.append((elapsed, row["step"], _snapshot(student.hf_model)))

    t_sft.append(time.perf_counter())
    sft = sft_stage(student, docs, config, sft_args, on_step=on_step if val_docs else None)
    result: dict[str, Any] = {
        "command": "python -m bench.read_sft " + " ".join(sys.argv[1:] if argv is None else argv),
        "documents": len(docs), **{k: v for k, v in sft.items() if k != "documents"},
        "batch": args.batch, "checkpoint": str(args.out / "sft" / "checkpoint"),
    }  # fmt: skip
    if val_docs:
        if not snaps or snaps[-1][1] != sft["steps"]:  # the end, when the last mark was not reached
            snaps.append((time.perf_counter() - t_sft[0], sft["steps"], _snapshot(student.hf_model)))
        items = [document_item(d) for d in val_docs]
        _, trivial = rules_on(docs, items)

        def cat(rows: list[dict]) -> dict:
            return by_category([{**r, "category": it.category} for r, it in zip(rows, items, strict=True)])

        result["validation"] = {
            "conversation": args.val_conv, "n": len(items),
            "bm25_evidence": {f"top{k}": bm25_finds_evidence(val_docs, items, k) for k in (1, 3)},
            "rules": {n: {"f1": round(mean(r, "f1"), 2), "by_category": cat(r)} for n, r in trivial.items()},
            "marks": [],
        }  # fmt: skip
        for elapsed, step, weights in snaps:
            student.hf_model.load_state_dict(weights)
            t = time.perf_counter()
            rows = evaluate(student, val_docs, items, config)
            minutes = round(elapsed / 60, 1)
            write_predictions(args.out / f"val-{minutes:g}.jsonl", items, {"sft": rows})
            result["validation"]["marks"].append({
                "sft_minutes": minutes, "steps": step, "examples_seen": step * args.batch,
                "f1": round(mean(rows, "f1"), 2), "em": round(mean(rows, "em"), 2), "by_category": cat(rows),
                "evidence_in_memory": evidence_summary(rows),
                "eval_s": round(time.perf_counter() - t, 1),
            })  # fmt: skip
    result["wall_time_s"] = round(time.perf_counter() - t0, 1)
    (args.out / "read_sft.json").write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
