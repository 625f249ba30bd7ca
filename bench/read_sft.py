"""SFT warm start for ``read``: expert MemAgent trajectories on TRAIN documents, trained with memrl's SFT code.

The expert reads each RULER-LoCoMo document of LoCoMo's TRAIN conversations exactly as the student will
(:class:`memrl.agents.memagent.MemAgent` itself runs it: same chunks, cut by the student's tokenizer, same
prompts and budgets as ``bench/learning.py --task read``), but its replies are written from the annotation:
after a chunk holding one of the question's evidence turns (LoCoMo's evidence ids), the memory is every
evidence turn read so far, each with its session's date, cut to the memory budget; after a chunk holding
none, the previous memory unchanged; the answer is ``\\boxed{gold}`` (the first gold; a gold longer than
the answer grammar allows leaves that document's answer step out, counted). Each expert call is one SFT
example (:func:`memrl.train.sft.sft_samples`: the student's chat template, loss on the reply), trained by
:class:`memrl.train.sft.SFTTrainer` (full weights) for ``--minutes`` at most::

    .venv/bin/python bench/read_sft.py --out runs/read-sft --minutes 8
    .venv/bin/python bench/learning.py --task read --model runs/read-sft/checkpoint ...

``bench/learning.py --task read --sft-minutes N`` runs the same warm start inside the learning benchmark's
budget, then GRPO (what docs/results.md reports).

Writes OUT/checkpoint (a model folder), OUT/sft_metrics.jsonl, OUT/read_sft.json; the last line of stdout
is that JSON object. Test documents are never read: the documents come from ``ruler-locomo --split train``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # learning_read beside this file

_SECTION = re.compile(r"Next section:\n(.*?)\n\n(?:Your memory so far:|Write your updated memory)", re.S)


def evidence_lines(doc: Any, conversations: dict[str, Any]) -> list[str]:
    """The question's evidence turns, in conversation order, as ``(date) Speaker: text`` lines."""
    qid = doc.metadata["question_id"]
    conv = conversations.get(qid.split(":")[0])
    if conv is None:
        raise ValueError(f"{doc.id}: its question {qid} is not in the given conversations")
    (q,) = [q for q in conv.questions if q.id == qid]
    wanted = set(q.evidence)
    lines = [f"({s.date_text}) {t.render()}" if s.date_text else t.render()
             for s in conv.sessions for t in s.turns if t.id in wanted]  # fmt: skip
    return lines


def in_chunk(turn: str, chunk: str) -> bool:
    """Whether ``chunk`` holds ``turn``: a chunk boundary may cut it once, so one of its halves' outer ends
    (the first or the last min(30, half) characters) is whole on one side of the cut."""
    w = max(1, min(30, len(turn) // 2))
    return turn[:w] in chunk or turn[-w:] in chunk


class ExpertReader:
    """A rule-based reader for one document: see the module docstring. ``turns``: the evidence turns as
    the document renders them (``Speaker: text``), ``lines``: what the memory writes for each."""

    def __init__(self, student: Any, turns: list[str], lines: list[str], gold: str, memory_tokens: int,
                 initial_memory: str) -> None:  # fmt: skip
        from memrl.llm.scripted import ScriptedLLM

        self.turns, self.lines, self.gold = turns, lines, gold
        self.tokenizer = student.tokenizer
        self.budget = memory_tokens - 1  # the end-of-turn token SFT appends counts too
        self.memory = initial_memory
        self.seen: set[int] = set()
        self.llm = ScriptedLLM(self._reply, model="expert-reader")
        self.llm.inner = student  # MemAgent cuts chunks with the tokenizer of ``inner`` (its CachedLLM hook)

    def _reply(self, messages: list[dict], tools: Any, json_schema: Any) -> str:
        prompt = messages[-1]["content"]
        section = _SECTION.search(prompt)
        if section is None:  # the answer prompt
            return "\\boxed{" + self.gold + "}"
        chunk = section.group(1)
        new = {i for i, t in enumerate(self.turns) if i not in self.seen and in_chunk(t, chunk)}
        if new:
            self.seen |= new
            text = "\n".join(self.lines[i] for i in sorted(self.seen))
            ids = self.tokenizer.encode(text, add_special_tokens=False)[: self.budget]
            self.memory = self.tokenizer.decode(ids).strip()
        return self.memory


async def expert_trajectories(student: Any, docs: list[Any], conversations: dict[str, Any],
                              config: Any) -> tuple[list[Any], dict[str, int]]:  # fmt: skip
    """One expert trajectory per document (MemAgent with :class:`ExpertReader`), and counts: documents,
    chunk steps, chunk steps that wrote evidence, answers left out (gold too long for the answer grammar)."""
    from memrl.agents.memagent import MemAgent, render_conversation

    counts = {"documents": len(docs), "chunk_steps": 0, "evidence_steps": 0, "answers_too_long": 0}
    max_chars = config.answer_tokens - 8  # MemAgent's boxed grammar: "\\boxed{" and "}" take <= 8 tokens
    out = []
    for doc in docs:
        q = doc.questions[0]
        lines = evidence_lines(doc, conversations)
        turns = [line.split(") ", 1)[1] if line.startswith("(") else line for line in lines]
        gold = str(q.answers[0])
        expert = ExpertReader(student, turns, lines, gold, config.memory_tokens, config.initial_memory)
        res = await MemAgent(expert.llm, config).run(q.question, render_conversation(doc), task_id=q.id)
        traj = res.trajectory
        if traj.failure is not None:
            raise RuntimeError(f"expert reading of {doc.id} failed: {traj.failure}")
        chunks = [s for s in traj.steps if s.role.startswith("chunk")]
        counts["chunk_steps"] += len(chunks)
        counts["evidence_steps"] += sum(s.response != config.initial_memory for s in chunks)
        if len(gold) > max_chars:
            traj.steps = chunks
            counts["answers_too_long"] += 1
        out.append(traj)
    return out, counts


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=Path("runs/read-sft"))
    ap.add_argument("--minutes", type=float, default=8.0, help="SFT time budget")
    ap.add_argument("--steps", type=int, help="at most this many optimizer steps")
    ap.add_argument("--documents", type=int, help="at most this many train documents (default: all)")
    ap.add_argument("--lr", type=float, default=5e-5)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--model", help="HF folder (default: the offline SmolLM2-135M-Instruct)")
    ap.add_argument("--length", default="1k")
    ap.add_argument("--chunk-tokens", type=int, default=512)
    ap.add_argument("--memory-tokens", type=int, default=48)
    ap.add_argument("--answer-tokens", type=int, default=40)
    ap.add_argument("--memory-first", action="store_true")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    if args.minutes <= 0 or args.batch < 1 or (args.steps is not None and args.steps < 1):
        ap.error("--minutes must be > 0, --batch and --steps >= 1")
    if args.answer_tokens <= 8:
        ap.error("--answer-tokens must be > 8 (the box itself takes up to 8)")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("MEMRL_DATA_DIR", str(Path(__file__).resolve().parents[2] / "shared" / "data"))
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from learning_read import documents, reader_config

    from memrl.eval.qa_config import QAEvalConfig, load_conversations
    from memrl.llm.local import LocalLLM
    from memrl.train.sft import SFTConfig, SFTTrainer, sft_samples

    t0 = time.perf_counter()
    docs = documents("train", args.length)[: args.documents]
    convs = {c.id: c for c in load_conversations(QAEvalConfig(dataset="locomo", split="train"))}
    config = reader_config(args)
    student = LocalLLM(args.model).load()
    trajs, counts = asyncio.run(expert_trajectories(student, docs, convs, config))
    samples, skipped = sft_samples(
        student, trajs, max_reply_tokens=max(config.memory_tokens, config.answer_tokens)
    )
    trainer = SFTTrainer(student, SFTConfig(lr=args.lr, epochs=1, batch_size=args.batch, micro_batch=args.batch,
                                            seed=args.seed, save_every=10**6))  # fmt: skip
    rows = trainer.fit(samples, args.out, progress=not args.quiet, max_steps=args.steps,
                       time_limit_s=60 * args.minutes)  # fmt: skip
    result = {"command": "python bench/read_sft.py " + " ".join(sys.argv[1:] if argv is None else argv),
              **counts, "examples": len(samples), "skipped": skipped, "steps": len(rows),
              "examples_seen": min(len(samples), len(rows) * args.batch),
              "loss_first": rows[0]["loss"], "loss_last": rows[-1]["loss"], "lr": args.lr, "batch": args.batch,
              "checkpoint": str(args.out / "checkpoint"), "wall_time_s": round(time.perf_counter() - t0, 1)}  # fmt: skip
    (args.out / "read_sft.json").write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
