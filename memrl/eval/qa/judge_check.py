"""``memrl eval judge-check``: how often a judge accepts answers known to be wrong, and rejects answers
known to be right, on LoCoMo's 1,540 category 1-4 questions.

    memrl eval judge-check --judge mem0 --judge-provider openai --judge-model gpt-4o-mini
    memrl eval judge-check --judge strict --judge-base-url http://localhost:8000/v1 --judge-model M --questions 50

Three sets, judged with the judge's own prompt and protocol (:mod:`memrl.scoring.judges`):

- ``specific``: locomo-audit's v1 stress set, an answer per question written to be wrong but specific;
- ``vague``: its v2 set, answers written to be vague but on topic (and wrong);
- ``gold``: the gold answer itself as the answer (known right against the key it is judged by).

Rates per category and overall: ``false_accept_specific`` and ``false_accept_vague`` (share of judged
wrong answers accepted), ``false_reject_gold`` (share of judged gold answers rejected). A judge failure
(a provider error, a reply that is no verdict) is left out of the rates and counted. locomo-audit measured
mem0's prompt with gpt-4o-mini accepting 10.61% of the specific and 62.81% of the vague wrong answers.
The offline 135M model (``--judge-provider local``) runs, but is no judge: its rates say so.

Writes ``OUTPUT_DIR/judge_rates.json``, ``verdicts.jsonl`` and ``report.md``, and records the rates under
``$MEMRL_CACHE_DIR/judge-rates/`` so every later report judged by this judge, model and template carries
them (:mod:`memrl.eval.qa.judge_rates`). Replies are cached (``OUTPUT_DIR/llm_cache.sqlite``): a re-run is free.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
import time
from pathlib import Path
from typing import Any

from memrl.config import option
from memrl.data.locomo import LOCOMO_CATEGORIES
from memrl.data.locomo_audit import STRESS_FILES, StressItem, load_stress_set
from memrl.errors import ConfigError
from memrl.eval.stats import to_markdown
from memrl.scoring.judges import JUDGE_NAMES, get_judge

SETS = ("specific", "vague", "gold")
#: locomo-audit's measurement of mem0's judge prompt with gpt-4o-mini (false accepts, percent).
PUBLISHED = {"mem0": {"specific": 10.61, "vague": 62.81}}


@dataclasses.dataclass(frozen=True)
class JudgeCheckConfig:
    """``memrl eval judge-check`` flags map 1:1 onto these fields."""

    judge: str = option(
        "mem0", f"judge prompt and protocol: {', '.join(n for n in JUDGE_NAMES if n != 'longmemeval')}"
    )
    judge_provider: str = option("openai", "LLM back-end of the judge: openai (any compatible server), local")
    judge_model: str | None = option(None, "judge model (e.g. gpt-4o-mini)")
    judge_base_url: str | None = option(None, "OpenAI-compatible server URL of the judge")
    data_path: str | None = option(
        None, "data folder holding locomo/locomo10.json and locomo-audit/ (default: $MEMRL_DATA_DIR)"
    )
    sets: tuple[str, ...] = option(SETS, "which sets: specific, vague, gold")
    questions: int | None = option(None, "at most this many questions per category and set (default: all)")
    concurrency: int = option(8, "judgements at once")
    output_dir: str | None = option(None, "where results go (default: runs/judge-check/JUDGE-MODEL)")
    cache: bool = option(True, "cache the judge's replies on disk (OUTPUT_DIR/llm_cache.sqlite)")
    record: bool = option(True, "record the rates for later reports ($MEMRL_CACHE_DIR/judge-rates/)")

    def __post_init__(self) -> None:
        if self.judge == "longmemeval":
            raise ConfigError("the longmemeval judge has templates for LongMemEval's question types only; "
                              "the stress sets are LoCoMo's: check mem0, membuilder or strict")  # fmt: skip
        get_judge(self.judge)  # an unknown name fails here
        bad = set(self.sets) - set(SETS)
        if bad or not self.sets:
            raise ConfigError(
                f"--sets: choose among {', '.join(SETS)} (got {', '.join(self.sets) or 'none'})"
            )
        if (self.questions is not None and self.questions < 1) or self.concurrency < 1:
            raise ConfigError("--questions and --concurrency must be at least 1")

    @property
    def out(self) -> Path:
        if self.output_dir:
            return Path(self.output_dir)
        return Path("runs/judge-check") / re.sub(r"[^A-Za-z0-9._-]+", "_", f"{self.judge}-{self.judge_model}")


def load_sets(cfg: JudgeCheckConfig) -> dict[str, list[StressItem]]:
    """The selected items of each set (file order; at most ``questions`` per category)."""
    from memrl.data import load_conversations
    from memrl.eval.qa.gold import audit_file

    convs, _ = load_conversations("locomo", cfg.data_path)
    sample_ids = [c.id for c in convs]
    questions = {q.id: q.question for c in convs for q in c.questions}
    base = load_stress_set(audit_file(STRESS_FILES["specific"], None, cfg.data_path), sample_ids, questions)
    out: dict[str, list[StressItem]] = {}
    for name in cfg.sets:
        if name == "gold":
            items = [dataclasses.replace(i, answer=i.gold) for i in base]
        elif name == "specific":
            items = base
        else:
            items = load_stress_set(
                audit_file(STRESS_FILES[name], None, cfg.data_path), sample_ids, questions
            )
        out[name] = _first_per_category(items, cfg.questions)
    return out


def _first_per_category(items: list[StressItem], n: int | None) -> list[StressItem]:
    if n is None:
        return items
    seen: dict[int, int] = {}
    kept = []
    for i in items:
        seen[i.category_id] = seen.get(i.category_id, 0) + 1
        if seen[i.category_id] <= n:
            kept.append(i)
    return kept


def rates(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per category and overall: the three rates, the judged counts and the failures of each set."""

    def figures(group: list[dict[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name in SETS:
            in_set = [r for r in group if r["set"] == name]
            if not in_set:
                continue
            judged = [r for r in in_set if r["accepted"] is not None]
            hits = sum(1 for r in judged if (not r["accepted"] if name == "gold" else r["accepted"]))
            key = "false_reject_gold" if name == "gold" else f"false_accept_{name}"
            out[key] = hits / len(judged) if judged else None
            out[f"n_{name}"] = len(judged)
            out[f"failures_{name}"] = len(in_set) - len(judged)
        return out

    cats = [c for c in LOCOMO_CATEGORIES.values() if any(r["category"] == c for r in rows)]
    return {"by_category": {c: figures([r for r in rows if r["category"] == c]) for c in cats},
            "overall": figures(rows)}  # fmt: skip


async def run_judge_check(cfg: JudgeCheckConfig, *, llm: Any = None, progress: bool = True) -> dict[str, Any]:
    """Judge every selected item; returns (and writes) the rates."""
    from tqdm.auto import tqdm

    from memrl.eval.qa.judge_rates import RATES_FILE, record_rates
    from memrl.scoring.judge import judge_answer

    t0 = time.perf_counter()
    spec = get_judge(cfg.judge)
    sets = load_sets(cfg)
    out = cfg.out
    out.mkdir(parents=True, exist_ok=True)
    if llm is None:
        from memrl.llm import create_llm

        kw = {"base_url": cfg.judge_base_url} if cfg.judge_base_url else {}
        cache = str(out / "llm_cache.sqlite") if cfg.cache else None
        llm = create_llm(cfg.judge_provider, cfg.judge_model, cache=cache, **kw)
    sem = asyncio.Semaphore(cfg.concurrency)
    todo = [(name, item) for name, items in sets.items() for item in items]
    bar = tqdm(total=len(todo), desc=f"judge-check ({cfg.judge})", unit="q", disable=not progress)

    async def one(name: str, item: StressItem) -> dict[str, Any]:
        async with sem:
            j = await judge_answer(llm, item.question, item.gold, item.answer, question_type=item.category,
                                   judge=spec, abstention=False)  # fmt: skip
            bar.update(1)
            return {"set": name, "question_id": item.question_id, "audit_id": item.audit_id,
                    "category": item.category, "gold": item.gold, "answer": item.answer, "accepted": j.label,
                    "judge_error": j.error, "reply": j.reply}  # fmt: skip

    rows = await asyncio.gather(*(one(n, i) for n, i in todo))
    bar.close()
    result = {
        "judge": {**spec.describe(), "model": cfg.judge_model, "provider": cfg.judge_provider},
        "sets": {name: len(items) for name, items in sets.items()},
        **rates(list(rows)),
        "published": PUBLISHED.get(cfg.judge),
        "wall_time_s": round(time.perf_counter() - t0, 2),
    }
    (out / RATES_FILE).write_text(json.dumps(result, indent=2))
    with (out / "verdicts.jsonl").open("w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    (out / "report.md").write_text(markdown(result))
    if cfg.record:
        result["recorded"] = str(record_rates(result, spec, cfg.judge_model))
    return result


def markdown(result: dict[str, Any]) -> str:
    def pct(x: Any) -> str:
        return "-" if x is None else f"{100 * x:.1f}"

    j = result["judge"]
    table = []
    for name, f in [*result["by_category"].items(), ("overall", result["overall"])]:
        table.append({"category": name, "accepts specific wrong %": pct(f.get("false_accept_specific")),
                      "accepts vague wrong %": pct(f.get("false_accept_vague")),
                      "rejects gold %": pct(f.get("false_reject_gold")),
                      "n (specific/vague/gold)": "/".join(str(f.get(f"n_{s}", 0)) for s in SETS),
                      "failures": sum(f.get(f"failures_{s}", 0) for s in SETS)})  # fmt: skip
    lines = [f"# Judge check: `{j['name']}` with `{j['model']}`", "",
             f"Template sha256 `{j['template_sha256']}` ({j['source']}; {j['license']}).", "",
             to_markdown(table)]  # fmt: skip
    if result.get("published"):
        p = result["published"]
        lines += ["", f"locomo-audit measured this prompt with gpt-4o-mini accepting {p['specific']}% of the "
                  f"specific and {p['vague']}% of the vague wrong answers."]  # fmt: skip
    return "\n".join(lines) + "\n"
