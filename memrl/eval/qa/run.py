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
- ``verdicts.jsonl``: one line per selected question, its final verdicts (what ``memrl eval compare``
  pairs across runs);
- ``summary.json``, ``report.md``, ``scores.png``: per-category tables with 95% intervals over questions
  and over conversations, memrl's mode (failures left out, counted) beside the official one (failures
  wrong), the judge's name, model, template sha256 and measured rates (:mod:`memrl.eval.qa.aggregate`).

``--judge`` picks the judge's prompt and protocol (:mod:`memrl.scoring.judges`: ``longmemeval``, ``mem0``,
``membuilder`` verbatim as published, ``strict``); ``--gold corrected`` scores LoCoMo against
locomo-audit's corrected answer key too; ``--builder full`` puts the whole conversation in the prompt
(:mod:`memrl.eval.qa.full_context`).

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
from memrl.eval.qa.config import READERS, QAEvalConfig, load_conversations


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
        from memrl.scoring.judges import get_judge

        self.judge_spec = get_judge(cfg.judge_name)
        self.corrections: dict[str, Any] = {}
        if cfg.gold == "corrected":
            from memrl.eval.qa.gold import run_corrections

            self.corrections = run_corrections(cfg.data_path, cfg.audit_path)
        self.builds = JsonlLog(self.out / "builds.jsonl")
        self.predictions = JsonlLog(self.out / "predictions.jsonl")
        self.memory: Any = None
        self.system: Any = None  # another memory system (--system)

    def _make_system(self) -> Any:
        import os

        from memrl.eval.systems import SystemSettings, create_system

        c = self.cfg
        key = os.environ.get("MEMRL_SYSTEM_API_KEY") or os.environ.get("OPENAI_API_KEY") or "memrl-harness"
        settings = SystemSettings(base_url=c.system_base_url or c.base_url, model=c.system_model or c.model,
                                  embed_model=c.system_embed_model, embed_dims=c.system_embed_dims, api_key=key,
                                  data_dir=str(self.out), builder=c.builder, embedder=c.embedder,
                                  llm=self.builder_llm)  # fmt: skip
        return create_system(c.system, settings)

    @property
    def db_path(self) -> str:
        """The memory store: ``--db`` when given, else the run's own ``OUTPUT_DIR/memory.db``."""
        return self.cfg.db_path or str(self.out / "memory.db")

    def _prepare_dir(self) -> None:
        out = self.out
        done = [out / n for n in ("predictions.jsonl", "builds.jsonl") if (out / n).exists()]
        if done and not (self.cfg.resume or self.cfg.overwrite or self.cfg.mode == "answer"):
            raise ConfigError(
                f"{out} holds an earlier run; pass --resume to continue it or --overwrite to restart"
            )
        if self.cfg.overwrite:
            for name in (
                "predictions.jsonl",
                "builds.jsonl",
                "summary.json",
                "report.md",
                "scores.png",
                "verdicts.jsonl",
            ):
                (out / name).unlink(missing_ok=True)
            import shutil

            for store in (*out.glob("*-store"), out / "memrl-system.db"):  # other systems' own stores
                shutil.rmtree(store) if store.is_dir() else store.unlink(missing_ok=True)
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
            **({"llm": self.builder_llm} if self.cfg.builder in ("membuilder", "union") else {}),
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
            have = self.memory.store.last_seq(ns)
            if have < mark:  # the sessions builds.jsonl lists are not in this store
                raise ConfigError(
                    f"--resume: {self.out / 'builds.jsonl'} records {ns}'s sessions {sorted(done)} as built "
                    f"(history up to {mark}), but the store {self.db_path} holds {ns} only up to {have}: the "
                    "store was lost or replaced since. Restore it, or pass --overwrite to build again"
                )
            if have > mark:
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
                     "items_after": await self.memory.count(namespace=ns), **result.to_dict()}
                )  # fmt: skip
                bar.update(1)
        bar.close()

    async def ingest(self, convs: Sequence[Conversation]) -> None:
        """Another memory system (``--system``) ingests every session, one at a time; each session's cost
        is a line of ``builds.jsonl``."""
        assert self.system is not None
        for conv in convs:
            for session in conv.sessions:
                row: dict[str, Any] = {"namespace": conv.id, "conversation": conv.id, "session": session.index,
                                       "system": self.cfg.system}  # fmt: skip
                try:
                    cost = await self.system.ingest_session(conv, session)
                    row.update(cost.to_dict(), failures=[])
                except Exception as e:  # recorded and counted, never scored: its questions still run
                    row.update(failures=[{"error": f"{type(e).__name__}: {e}"}])
                self.builds.append(row)

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
    async def respond(self, conv: Conversation, q: Question) -> tuple[Any, list[str] | None, dict[str, Any]]:
        """One answer: ``(AnswerResult, retrieved evidence ids or None when nothing is retrieved, extras)``."""
        if self.cfg.builder == "memagent":
            from memrl.agents.memagent import answer_by_reading

            return await answer_by_reading(self.llm, conv, q, config=self.cfg.memagent_config()), None, {}
        if self.cfg.builder == "full":
            res, info = await self.reader.answer(conv, q)
            return res, None, info
        if self.system is not None:
            from memrl.scoring.answer import AnswerResult, answer_from_lines

            try:
                lines, cost = await self.system.search(conv, q, self.cfg.top_k)
            except Exception as e:  # another system's failure (any kind) is a failed answer, counted
                return AnswerResult(None, error=f"system: {type(e).__name__}: {e}"), None, {}
            res = await answer_from_lines(self.llm, conv, q, lines, max_tokens=self.cfg.max_answer_tokens)
            return res, None, {"memories": lines, **cost.to_dict("search_")}
        from memrl.scoring.answer import answer_from_memory

        suffix = "+memupdate" if self.cfg.updater == "memupdate" else ""
        res = await answer_from_memory(
            self.llm, self.memory, self.cfg.namespace(conv) + suffix, conv, q,
            top_k=self.cfg.top_k, max_tokens=self.cfg.max_answer_tokens,
        )  # fmt: skip
        return res, res.retrieved_evidence, {}

    async def answer(self, convs: Sequence[Conversation]) -> None:
        from tqdm.auto import tqdm

        from memrl.eval.qa.report import latest_rows
        from memrl.eval.qa.verdicts import add_corrected, add_scores, base_row, judge_row, needs_judging

        if self.cfg.builder == "full":
            from memrl.eval.qa.full_context import make_reader

            self.reader = make_reader(self.llm, self.cfg.builder_option, self.cfg.max_answer_tokens)
        done = {r["question_id"]: r for r in latest_rows(self.predictions.read()) if not r.get("error")}
        todo = [(c, q) for c in convs for q in c.questions if q.id not in done]
        # answered, but the judge failed (e.g. unparsable reply) or another judge judged: judge again
        spec = self.judge_spec
        where = {q.id: (c, q) for c in convs for q in c.questions}
        # rows of an earlier run without the corrected gold this one asks for: score and judge them again
        recorrect = {r["question_id"] for r in done.values() if r["question_id"] in self.corrections
                     and "corrected" not in r and r["question_id"] in where}  # fmt: skip
        rejudge = [r for r in done.values() if r["question_id"] in recorrect
                   or (self.judge is not None and needs_judging(r, spec))]  # fmt: skip
        bar = tqdm(total=len(todo) + len(rejudge), desc="answer", unit="q", disable=not self.progress)
        sem = asyncio.Semaphore(self.cfg.concurrency)

        async def one(conv: Conversation, q: Question) -> None:
            async with sem:
                res, retrieved, extras = await self.respond(conv, q)
                row: dict[str, Any] = {**base_row(conv, q), **res.to_dict(), **extras}
                if res.prediction is not None:
                    add_scores(row, conv, q, retrieved=retrieved)
                if q.id in self.corrections:
                    add_corrected(row, conv, q, self.corrections[q.id], retrieved=retrieved)
                if res.prediction is not None and self.judge is not None:
                    await judge_row(self.judge, spec, row)
                self.predictions.append(row)
                bar.update(1)

        async def again(row: dict[str, Any]) -> None:
            async with sem:
                row = dict(row)
                if row["question_id"] in recorrect:
                    conv, q = where[row["question_id"]]
                    retrieved = None if self.cfg.builder in READERS else row.get("retrieved_evidence", [])
                    add_corrected(row, conv, q, self.corrections[q.id], retrieved=retrieved)
                if self.judge is not None and row.get("prediction") is not None:
                    await judge_row(self.judge, spec, row)
                self.predictions.append(row)
                bar.update(1)

        await asyncio.gather(*(one(c, q) for c, q in todo), *(again(r) for r in rejudge))
        bar.close()

    # -------------------------------------------------------------------- all
    async def run(self) -> dict[str, Any]:
        from memrl.eval.qa.report import summarize, verdict_rows, write_report
        from memrl.memory import AsyncMemory

        t0 = time.perf_counter()
        convs = load_conversations(self.cfg)
        db = self.db_path
        if self.cfg.system != "memrl":
            self.system = self._make_system()
        elif self.cfg.builder not in READERS:
            if self.cfg.mode == "answer" and not Path(db).exists():
                raise ConfigError(
                    f"--mode answer needs a built store, and {db} does not exist (run --mode build)"
                )
            self.memory = AsyncMemory(db, embedder=self.cfg.embedder)
        try:
            if (
                self.cfg.mode != "build"
                or self.cfg.builder in ("membuilder", "union")
                or self.cfg.updater != "none"
            ):
                # Load the model now, before any worker needs it: a wrong --model fails here, in one line.
                for llm in {id(x): x for x in (self.llm, self.builder_llm)}.values():
                    load = getattr(getattr(llm, "inner", llm), "load", None)
                    if callable(load):
                        await asyncio.to_thread(load)
            if self.system is not None:
                await self.ingest(convs)
            if self.cfg.mode in ("build", "full") and self.memory is not None:
                await self.build(convs)
                if self.cfg.updater == "memupdate":
                    await self.update(convs)
            if self.cfg.mode in ("answer", "full"):
                await self.answer(convs)
        finally:
            if self.memory is not None:
                await self.memory.close()
            if self.system is not None:
                await self.system.close()
        predictions = self.predictions.read()
        summary = summarize(self.cfg, self.builds.read(), predictions, convs)
        summary["wall_time_s"] = round(time.perf_counter() - t0, 2)
        write_report(self.out, summary, verdict_rows(predictions, convs))
        return summary


def run_qa_eval(cfg: QAEvalConfig, **kw: Any) -> dict[str, Any]:
    """Run an evaluation from sync code; returns the summary (also written to OUTPUT_DIR/summary.json)."""
    return asyncio.run(QAEvaluation(cfg, **kw).run())
