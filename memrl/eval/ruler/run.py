"""RULER's synthetic tasks at growing lengths, read by MemAgent and by a full-context reader.

    memrl eval ruler --task niah_single_1,vt,cwe --lengths 1k,2k,4k,8k --questions 8
    memrl eval ruler --lengths 16k,32k,64k,128k --provider openai --base-url http://localhost:8000/v1 --model M

For each task and length the items are generated (:mod:`memrl.data.ruler.synthetic`, sized in the model's
tokens) into ``OUTPUT_DIR/data/{task}_{length}.jsonl`` with its sha256 beside it, then each reader answers:

- ``memagent``: reads the context chunk by chunk into a bounded memory, answers from the memory
  (:class:`memrl.agents.memagent.MemAgent`); the question is the task's instruction and query;
- ``full``: the whole prompt in one call, where the prompt plus the answer budget fits the model's window
  (``--context-window``, default the local model's); an item that does not fit is *skipped* and counted,
  never scored.

The whole reply is scored with RULER's metric (:func:`memrl.scoring.metrics.string_match_all` /
``string_match_part``, x100). ``--resume`` reads the data files back (their sha256 must match), skips the
answered items and retries failed ones; provider failures are counted, never scored. Outputs:
``predictions.jsonl``, ``summary.json``, ``report.md`` (one table per task: readers x lengths), ``scores.png``.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from memrl.data.ruler.synthetic import (
    SyntheticItem,
    TokenCounter,
    generate,
    load_essays,
    read_items,
    write_items,
)
from memrl.errors import ConfigError, DataError, MemrlError
from memrl.eval.qa.run import JsonlLog
from memrl.eval.qa.tokens import model_window as _window
from memrl.eval.qa.tokens import token_counter
from memrl.eval.ruler.config import RulerEvalConfig
from memrl.scoring.metrics import string_match_all, string_match_part

METRICS: dict[str, Callable[[Any, Any], float]] = {
    "string_match_all": string_match_all,
    "string_match_part": string_match_part,
}
#: Tokens a chat template adds around the prompt (the full reader's fit check leaves room for them).
TEMPLATE_MARGIN = 32


class RulerEvaluation:
    """One run of :class:`RulerEvalConfig`; ``llm`` may be passed in (tests pass a scripted one)."""

    def __init__(self, cfg: RulerEvalConfig, *, llm: Any = None, progress: bool = True) -> None:
        self.cfg, self.progress, self.out = cfg, progress, cfg.out
        self._prepare_dir()
        self.llm = llm or self._make_llm()
        self.predictions = JsonlLog(self.out / "predictions.jsonl")
        self.skipped_tasks: dict[str, str] = {}

    def _prepare_dir(self) -> None:
        out = self.out
        if out.exists() and not out.is_dir():
            raise ConfigError(f"--output-dir {out} is a file; give a folder")
        if (out / "predictions.jsonl").exists() and not (self.cfg.resume or self.cfg.overwrite):
            raise ConfigError(
                f"{out} holds an earlier run; pass --resume to continue it or --overwrite to restart"
            )
        if self.cfg.overwrite:
            for name in ("predictions.jsonl", "summary.json", "report.md", "scores.png", "llm_cache.sqlite"):
                (out / name).unlink(missing_ok=True)
            for p in (out / "data").glob("*.jsonl*") if (out / "data").is_dir() else ():
                p.unlink()
        out.mkdir(parents=True, exist_ok=True)
        import dataclasses

        (out / "config.json").write_text(json.dumps(dataclasses.asdict(self.cfg), indent=2))

    def _make_llm(self) -> Any:
        from memrl.llm import create_llm

        kw = {"base_url": self.cfg.base_url} if self.cfg.base_url else {}
        cache = str(self.out / "llm_cache.sqlite") if self.cfg.cache else None
        return create_llm(self.cfg.provider, self.cfg.model, cache=cache, **kw)

    # -------------------------------------------------------------------- data
    def items(self, count_tokens: TokenCounter) -> tuple[list[SyntheticItem], dict[str, str]]:
        """Every item of the run (generated, or read back and verified on resume) and each file's sha256."""
        from memrl.data.ruler import parse_lengths

        cfg, essays, hotpotqa = self.cfg, None, None
        items: list[SyntheticItem] = []
        digests: dict[str, str] = {}
        for task in cfg.tasks():
            for length in parse_lengths(cfg.lengths):
                path = self.out / "data" / f"{task}_{length.label}.jsonl"
                if path.is_file() and cfg.resume:
                    items += read_items(path)
                    digests[path.name] = path.with_name(path.name + ".sha256").read_text().split()[0]
                    continue
                if task == "qa_2" and hotpotqa is None:
                    try:
                        hotpotqa = self._hotpotqa()
                    except DataError as e:
                        if cfg.task:  # asked for by name: say why it cannot run
                            raise
                        self.skipped_tasks[task] = str(e)
                        break
                needs_essays = task in ("niah_single_2", "niah_single_3", "niah_multikey_1", "niah_multivalue",
                                        "niah_multiquery")  # fmt: skip
                if needs_essays and essays is None:
                    essays = load_essays(cfg.essays or _data_dir(cfg.data_path) / "paulgraham")
                got = generate(task, length.tokens or 0, count=cfg.questions, seed=cfg.seed, label=length.label,
                               count_tokens=count_tokens, essays=essays, hotpotqa=hotpotqa)  # fmt: skip
                digests[path.name] = write_items(got, path)
                items += got
        (self.out / "data").mkdir(parents=True, exist_ok=True)
        (self.out / "data" / "manifest.json").write_text(json.dumps(
            {"seed": cfg.seed, "tokenizer": cfg.tokenizer, "files": digests}, indent=2))  # fmt: skip
        return items, digests

    def _hotpotqa(self) -> list[Any]:
        from memrl.data.download import find_dataset
        from memrl.data.hotpotqa import load_hotpotqa

        path = self.cfg.hotpotqa or find_dataset("hotpotqa", self.cfg.data_path)
        return load_hotpotqa(path)[0]

    # -------------------------------------------------------------------- answer
    async def answer(self, items: list[SyntheticItem], window: int | None) -> None:
        from tqdm.auto import tqdm

        from memrl.eval.qa.report import latest_rows

        done = {r["question_id"] for r in latest_rows(self.predictions.read()) if not r.get("error")}
        todo = [(i, r) for i in items for r in self.cfg.reader if f"{i.id}/{r}" not in done]
        bar = tqdm(total=len(todo), desc="ruler", unit="item", disable=not self.progress)
        sem = asyncio.Semaphore(self.cfg.concurrency)

        async def one(item: SyntheticItem, reader: str) -> None:
            async with sem:
                row = await self.answer_one(item, reader, window)
                self.predictions.append(row)
                bar.update(1)

        await asyncio.gather(*(one(i, r) for i, r in todo))
        bar.close()

    async def answer_one(self, item: SyntheticItem, reader: str, window: int | None) -> dict[str, Any]:
        from memrl.llm.base import SamplingParams

        row: dict[str, Any] = {
            "question_id": f"{item.id}/{reader}", "item": item.id, "task": item.task, "length": item.length,
            "target_tokens": item.target_tokens, "reader": reader, "answers": list(item.answers),
            "metric": item.metric, "prompt_tokens_counted": item.prompt_tokens,
        }  # fmt: skip
        t0 = time.perf_counter()
        if reader == "full":
            need = item.prompt_tokens + item.tokens_to_generate + TEMPLATE_MARGIN
            if window is not None and need > window:
                return {**row, "skipped": f"prompt + answer need {need} tokens; the window is {window}"}
            messages = [{"role": "user", "content": item.prompt}]
            try:
                reply = await self.llm.chat(
                    messages, sampling=SamplingParams(max_tokens=item.tokens_to_generate)
                )
            except MemrlError as e:
                return {**row, "error": f"{type(e).__name__}: {e}", "latency_s": time.perf_counter() - t0}
            text, usage = reply.text, reply.usage
            row.update(prompt_tokens=usage.prompt_tokens if usage else 0,
                       completion_tokens=usage.completion_tokens if usage else 0)  # fmt: skip
        else:
            from memrl.agents.memagent import MemAgent

            res = await MemAgent(self.llm, self.cfg.memagent_config()).run(item.question, item.context,
                                                                           task_id=item.id)  # fmt: skip
            traj = res.trajectory
            if traj.failure is not None:
                return {**row, "error": traj.failure, "latency_s": time.perf_counter() - t0}
            text = res.final_text
            row.update(prompt_tokens=traj.prompt_tokens, completion_tokens=traj.completion_tokens,
                       chunks=res.chunks_read, boxed=res.answer, memory=res.memory)  # fmt: skip
        score = METRICS[item.metric](text, item.answers)
        return {**row, "prediction": text, "score": score, "latency_s": time.perf_counter() - t0}

    # -------------------------------------------------------------------- all
    async def run(self) -> dict[str, Any]:
        from memrl.eval.ruler.report import summarize, write_report

        t0 = time.perf_counter()
        load = getattr(getattr(self.llm, "inner", self.llm), "load", None)
        if callable(load):  # a wrong --model fails here, in one line, before anything is generated
            await asyncio.to_thread(load)
        count_tokens = token_counter(self.cfg.tokenizer, self.llm)
        items, digests = self.items(count_tokens)
        window = self.cfg.context_window or _window(self.llm)
        await self.answer(items, window)
        summary = summarize(self.cfg, items, self.predictions.read(), window=window, digests=digests,
                            skipped_tasks=self.skipped_tasks)  # fmt: skip
        summary["wall_time_s"] = round(time.perf_counter() - t0, 2)
        write_report(self.out, summary)
        return summary


def _data_dir(path: str | None) -> Path:
    from memrl.data.download import resolve_data_dir

    return resolve_data_dir(path)


def run_ruler_eval(cfg: RulerEvalConfig, **kw: Any) -> dict[str, Any]:
    """Run a RULER evaluation from sync code; returns the summary (also in OUTPUT_DIR/summary.json)."""
    return asyncio.run(RulerEvaluation(cfg, **kw).run())
