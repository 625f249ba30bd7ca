"""QA evaluation: build memory for each conversation, answer its questions from memory, score, report.

    memrl eval --dataset locomo --conv-id conv-26 --builder raw --provider local --questions 20
    memrl eval --dataset ruler-hotpotqa --lengths 7k,14k,28k --builder memagent --questions 128
    memrl eval --dataset hotpotqa --builder raw --questions 100     # each question over its ten paragraphs

Documents data sets (``hotpotqa``, ``ruler-hotpotqa``, ``ruler-locomo``: :mod:`memrl.data.documents`) are
scored with MemAgent's metric (accuracy: the answer, the ``\\boxed{}`` one for ``memagent``, equals a
gold answer once lower-cased and stripped of whitespace) plus sub-EM, EM and F1; a RULER set's report is
MemAgent's table: accuracy by context length with 95% intervals, seconds and tokens per question.
With ``--builder raw``/``membuilder`` each question's documents are stored in its own namespace (one
session per document, one item per sentence) and the answer comes from the top-k retrieved sentences.

Phases (``--mode``): ``build`` (memory only), ``answer`` (questions against an existing store), ``full``.
Everything lands in ``--output-dir``:

- ``memory.db``: the store (one namespace per conversation and builder), unless ``--db-path`` is given;
- ``builds.jsonl``: one line per finished session (what it cost, where its history ends);
- ``predictions.jsonl``: one line per answered question (prediction, scores, judge label, failures);
- ``summary.json``, ``report.md``, ``scores.png``: per-category tables with bootstrap 95% intervals.

``--resume`` continues an interrupted run: finished sessions and answered questions are skipped, a half-
built session is rolled back (from the store's history) and rebuilt, and LLM calls are answered from the
disk cache. Failures (malformed model output, API errors after retries) are counted and shown, never
scored as right or wrong.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from memrl.data.types import Conversation, Question
from memrl.errors import ConfigError
from memrl.eval.qa_config import QAEvalConfig, load_conversations
from memrl.scoring.metrics import score


class JsonlLog:
    """Append-only JSON lines, written one complete line at a time (a crash loses at most the line)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def read(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        rows = []
        for line in self.path.read_text().splitlines():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                continue  # a torn last line from a crash: that record is redone
        return rows

    def append(self, row: dict[str, Any]) -> None:
        with self.path.open("a") as f:
            f.write(json.dumps(row, default=str) + "\n")
            f.flush()


# ---------------------------------------------------------------------------------------------- run
class QAEvaluation:
    """One run of :class:`QAEvalConfig`. ``llm``/``judge`` (and ``builder_llm``, used with
    ``builder_model``) may be passed in (tests pass scripted ones)."""

    def __init__(
        self,
        cfg: QAEvalConfig,
        *,
        llm: Any = None,
        judge: Any = None,
        builder_llm: Any = None,
        progress: bool = True,
    ) -> None:
        self.cfg = cfg
        self.progress = progress
        self.out = cfg.out
        self._prepare_dir()
        self.llm = llm or self._make_llm(cfg.provider, cfg.model, cfg.base_url)
        # membuilder's agents may run another model than the answerer (an SFT checkpoint)
        self.builder_llm = self.llm
        if cfg.builder_model and cfg.builder_model != cfg.model:
            self.builder_llm = builder_llm or self._make_llm(cfg.provider, cfg.builder_model, cfg.base_url)
        self.judge = judge
        if self.judge is None and cfg.judge_model:
            self.judge = self._make_llm(cfg.judge_provider or cfg.provider, cfg.judge_model,
                                        cfg.judge_base_url or cfg.base_url)  # fmt: skip
        self.builds = JsonlLog(self.out / "builds.jsonl")
        self.predictions = JsonlLog(self.out / "predictions.jsonl")
        self.memory: Any = None

    def _prepare_dir(self) -> None:
        out = self.out
        done = [out / n for n in ("predictions.jsonl", "builds.jsonl") if (out / n).exists()]
        if done and not (self.cfg.resume or self.cfg.overwrite or self.cfg.mode == "answer"):
            raise ConfigError(
                f"{out} holds an earlier run; pass --resume to continue it or --overwrite to restart"
            )
        if self.cfg.overwrite:
            for name in ("predictions.jsonl", "builds.jsonl", "summary.json", "report.md", "scores.png"):
                (out / name).unlink(missing_ok=True)
            if self.cfg.db_path is None and self.cfg.mode != "answer":  # answer-only runs reuse the store
                for suffix in ("", "-wal", "-shm"):
                    (out / f"memory.db{suffix}").unlink(missing_ok=True)
        if out.exists() and not out.is_dir():
            raise ConfigError(f"--output-dir {out} is a file; give a folder")
        out.mkdir(parents=True, exist_ok=True)
        (out / "config.json").write_text(json.dumps(dataclasses.asdict(self.cfg), indent=2))

    def _make_llm(self, provider: str, model: str | None, base_url: str | None) -> Any:
        from memrl.llm import create_llm

        kw: dict[str, Any] = {}
        if base_url:
            kw["base_url"] = base_url
        cache = str(self.out / "llm_cache.sqlite") if self.cfg.cache else None
        return create_llm(provider, model, cache=cache, **kw)

    # -------------------------------------------------------------------- build
    async def build(self, convs: Sequence[Conversation]) -> None:
        from tqdm.auto import tqdm

        from memrl.agents.base import create_builder

        builder = create_builder(
            self.cfg.builder,
            options=self.cfg.builder_option,
            **({"llm": self.builder_llm} if self.cfg.builder == "membuilder" else {}),
        )
        finished: dict[str, dict[int, int]] = {}
        for row in self.builds.read():
            if row.get("session") == "update":  # update episodes have their own rows (see update())
                continue
            finished.setdefault(row["namespace"], {})[row["session"]] = row["seq_after"]
        total = sum(len(c.sessions) for c in convs)
        bar = tqdm(total=total, desc=f"build ({self.cfg.builder})", unit="session", disable=not self.progress)
        for conv in convs:
            ns = self.cfg.namespace(conv)
            done = finished.get(ns, {})
            # Roll back whatever an interrupted session left behind, to where the last finished one ended.
            mark = max(done.values(), default=0)
            if self.memory.store.last_seq(ns) > mark:
                self.memory.store.rollback(ns, mark, actor="resume")
            if conv.memories and 0 not in done:  # the data set's own memories (PerLTQA), before session 1
                result = await builder.build_memories(self.memory, ns, conv)
                if result is not None:
                    self.builds.append({"namespace": ns, "conversation": conv.id,
                                        "seq_after": self.memory.store.last_seq(ns), **result.to_dict()})  # fmt: skip
            for session in conv.sessions:
                if session.index in done:
                    bar.update(1)
                    continue
                t0 = time.perf_counter()
                result = await builder.build_session(self.memory, ns, conv, session)
                result.seconds = time.perf_counter() - t0
                self.builds.append(
                    {"namespace": ns, "conversation": conv.id, "seq_after": self.memory.store.last_seq(ns),
                     **result.to_dict()}
                )  # fmt: skip
                bar.update(1)
        bar.close()

    async def update(self, convs: Sequence[Conversation]) -> None:
        from memrl.agents.memupdate import update_memory

        for conv in convs:
            src = self.cfg.namespace(conv)
            dst = f"{src}+memupdate"
            rows = [r for r in self.builds.read() if r.get("namespace") == dst]
            if rows and rows[-1].get("stop_reason") != "failure":
                continue  # done; an episode that stopped on a provider failure is redone from the clone
            await self.memory.clone(src, dst, overwrite=True)
            result = await update_memory(self.llm, self.memory, dst, conv)
            self.builds.append(
                {"namespace": dst, "conversation": conv.id, "session": "update", **result.to_dict()}
            )

    # -------------------------------------------------------------------- answer
    async def answer(self, convs: Sequence[Conversation]) -> None:
        from tqdm.auto import tqdm

        from memrl.eval.report import latest_rows
        from memrl.scoring.answer import answer_from_memory
        from memrl.scoring.judge import judge_answer

        done = {r["question_id"]: r for r in latest_rows(self.predictions.read()) if not r.get("error")}
        todo = [(c, q) for c in convs for q in c.questions if q.id not in done]
        # answered, but the judge failed (e.g. unparsable reply): judge again, keep the answer
        rejudge = [r for r in done.values() if r.get("judge_error")] if self.judge is not None else []
        bar = tqdm(total=len(todo) + len(rejudge), desc="answer", unit="q", disable=not self.progress)
        sem = asyncio.Semaphore(self.cfg.concurrency)
        suffix = "+memupdate" if self.cfg.updater == "memupdate" else ""

        async def one(conv: Conversation, q: Question) -> None:
            async with sem:
                if self.cfg.builder == "memagent":
                    from memrl.agents.memagent import answer_by_reading

                    res = await answer_by_reading(self.llm, conv, q, config=self.cfg.memagent_config())
                else:
                    res = await answer_from_memory(
                        self.llm, self.memory, self.cfg.namespace(conv) + suffix, conv, q,
                        top_k=self.cfg.top_k, max_tokens=self.cfg.max_answer_tokens,
                    )  # fmt: skip
                row: dict[str, Any] = {
                    "question_id": q.id, "conversation": conv.id, "category": q.category,
                    "category_id": q.category_id, "question": q.question, "answers": list(q.answers),
                    "evidence": list(q.evidence), "answerable": q.answerable, **res.to_dict(),
                }  # fmt: skip
                if res.prediction is not None:
                    row.update(score(conv, q, res.prediction))
                    if (
                        q.evidence and self.cfg.builder != "memagent"
                    ):  # a retrieved turn also covers its session
                        hit = set(conv.covered(res.retrieved_evidence)) & set(q.evidence)
                        row["evidence_recall"] = len(hit) / len(set(q.evidence))
                    if self.judge is not None:
                        await judge(row)
                self.predictions.append(row)
                bar.update(1)

        async def judge(row: dict[str, Any]) -> None:
            assert self.judge is not None
            j = await judge_answer(self.judge, row["question"], (row["answers"] or [""])[0], row["prediction"],
                                   question_type=judge_rule(row))  # fmt: skip
            row.update(judge=j.label, judge_reasoning=j.reasoning, judge_error=j.error)

        async def again(row: dict[str, Any]) -> None:
            async with sem:
                row = dict(row)
                await judge(row)
                self.predictions.append(row)
                bar.update(1)

        await asyncio.gather(*(one(c, q) for c, q in todo), *(again(r) for r in rejudge))
        bar.close()

    # -------------------------------------------------------------------- all
    async def run(self) -> dict[str, Any]:
        from memrl.eval.report import summarize, write_report
        from memrl.memory import AsyncMemory

        t0 = time.perf_counter()
        convs = load_conversations(self.cfg)
        db = self.cfg.db_path or str(self.out / "memory.db")
        if self.cfg.builder != "memagent":
            if self.cfg.mode == "answer" and not Path(db).exists():
                raise ConfigError(
                    f"--mode answer needs a built store, and {db} does not exist (run --mode build)"
                )
            self.memory = AsyncMemory(db, embedder=self.cfg.embedder)
        try:
            if self.cfg.mode != "build" or self.cfg.builder == "membuilder" or self.cfg.updater != "none":
                # Load the model now, before any worker needs it: a wrong --model fails here, in one line.
                for llm in {id(x): x for x in (self.llm, self.builder_llm)}.values():
                    load = getattr(getattr(llm, "inner", llm), "load", None)
                    if callable(load):
                        await asyncio.to_thread(load)
            if self.cfg.mode in ("build", "full") and self.memory is not None:
                await self.build(convs)
                if self.cfg.updater == "memupdate":
                    await self.update(convs)
            if self.cfg.mode in ("answer", "full"):
                await self.answer(convs)
        finally:
            if self.memory is not None:
                await self.memory.close()
        summary = summarize(self.cfg, self.builds.read(), self.predictions.read(), convs)
        summary["wall_time_s"] = round(time.perf_counter() - t0, 2)
        write_report(self.out, summary)
        return summary


def judge_rule(row: dict[str, Any]) -> str:
    """The judge's rule for a prediction row: its category's (LongMemEval's question types, LoCoMo's
    adversarial), except that a question with no answer in the conversation (LongMemEval's ``_abs`` ids,
    whatever their type) is judged as an abstention, as LongMemEval's judge does."""
    if row.get("answerable") is False and row["category"] != "adversarial":
        return "abstention"
    return row["category"]


def run_qa_eval(cfg: QAEvalConfig, **kw: Any) -> dict[str, Any]:
    """Run an evaluation from sync code; returns the summary (also written to OUTPUT_DIR/summary.json)."""
    return asyncio.run(QAEvaluation(cfg, **kw).run())
