"""``memrl eval ...``: evaluation commands. ``memrl eval retrieval`` measures evidence recall with no LLM.

    memrl eval retrieval --dataset locomo --output-dir runs/retrieval
    memrl eval retrieval --conv-id conv-26 --modes bm25,hybrid --k 1,5,10 --json
    memrl eval retrieval --ablation            # the table of what each retrieval idea buys
    memrl eval --dataset locomo --conv-id conv-26 --builder raw --questions 20   # = memrl eval qa ...
    memrl eval judge-check --judge mem0 --judge-model gpt-4o-mini   # the judge's false accepts / rejects
    memrl eval compare runs/locomo-raw runs/locomo-full             # paired differences, by conversation

Every flag maps onto a field of :class:`memrl.eval.retrieval.config.RetrievalConfig` or of the ``raw`` builder's
:class:`memrl.agents.raw.RawConfig`; list flags take commas or spaces (``--k 1,5,10`` = ``--k 1 5 10``).
Progress goes to stderr; the last line on stdout is always one JSON object (``recall_at_10``: hybrid,
categories 1-4 pooled; per-mode ``recall_at_k`` and per-category figures; ``n_questions``;
``wall_time_s``; ``embed_time_s``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from typing import Any

from memrl.agents.raw import RawConfig
from memrl.cli.common import PlainHelpFormatter
from memrl.config import add_arguments
from memrl.eval.qa.config import QAEvalConfig
from memrl.eval.retrieval.config import RetrievalConfig

#: ``memrl eval --dataset ...`` (no sub-command) means ``memrl eval qa --dataset ...``.
SUBCOMMANDS = ("qa", "retrieval", "ruler", "judge-check", "compare")


def qa_doc() -> str:
    import memrl.eval.qa.run

    return memrl.eval.qa.run.__doc__ or ""


def ruler_doc() -> str:
    import memrl.eval.ruler.run

    return memrl.eval.ruler.run.__doc__ or ""


def _ruler(args: argparse.Namespace) -> int:
    from memrl.config import from_args
    from memrl.eval.ruler.config import RulerEvalConfig
    from memrl.eval.ruler.report import markdown
    from memrl.eval.ruler.run import run_ruler_eval

    cfg = from_args(RulerEvalConfig, args)
    summary = run_ruler_eval(cfg)
    if not args.json:
        print(markdown(summary))
        print(f"wrote {cfg.out}/{{predictions.jsonl,summary.json,report.md,data/}}")
    sys.stdout.flush()
    print(json.dumps(summary, default=str))
    return 0


def _qa(args: argparse.Namespace) -> int:
    from memrl.config import from_args
    from memrl.eval.qa import run_qa_eval
    from memrl.eval.qa.report import markdown

    summary = run_qa_eval(from_args(QAEvalConfig, args))
    if not args.json:
        print(markdown(summary))
        out = QAEvalConfig(**{k: getattr(args, k) for k in ("dataset", "builder", "output_dir")}).out
        print(f"wrote {out}/{{predictions.jsonl,summary.json,report.md,scores.png}}")
    sys.stdout.flush()
    print(json.dumps(summary, default=str))
    return 0


def judge_check_doc() -> str:
    import memrl.eval.qa.judge_check

    return memrl.eval.qa.judge_check.__doc__ or ""


def compare_doc() -> str:
    import memrl.eval.qa.compare

    return memrl.eval.qa.compare.__doc__ or ""


def _judge_check(args: argparse.Namespace) -> int:
    import asyncio

    from memrl.config import from_args
    from memrl.eval.qa.judge_check import JudgeCheckConfig, markdown, run_judge_check

    cfg = from_args(JudgeCheckConfig, args)
    result = asyncio.run(run_judge_check(cfg))
    if not args.json:
        print(markdown(result))
        print(f"wrote {cfg.out}/{{judge_rates.json,verdicts.jsonl,report.md}}")
    sys.stdout.flush()
    print(json.dumps(result, default=str))
    return 0


def _compare(args: argparse.Namespace) -> int:
    from memrl.eval.qa.compare import compare_markdown, compare_runs

    metrics = tuple(m.strip() for m in args.metric.split(",") if m.strip())
    result = compare_runs(
        args.runs, metrics, official=args.mode == "official", corrected=args.gold == "corrected"
    )
    if not args.json:
        print(compare_markdown(result))
    sys.stdout.flush()
    print(json.dumps(result, default=str))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    ev = sub.add_parser("eval", help="evaluate memory: QA (default) or retrieval (no LLM)")
    actions = ev.add_subparsers(dest="eval_command", metavar="EVAL")
    actions.required = True
    q = actions.add_parser(
        "qa",
        help="build memory, answer the questions from it, score (the default: `memrl eval --dataset ...`)",
        description=qa_doc(),
        formatter_class=PlainHelpFormatter,
    )
    add_arguments(q, QAEvalConfig)
    q.add_argument("--json", action="store_true", help="print only the summary JSON (no report)")
    q.set_defaults(func=_qa)
    r = actions.add_parser(
        "ruler",
        help="RULER's synthetic tasks (needles, variable tracking, common/frequent words, qa_2) by length, "
        "read by MemAgent and full-context",
        description=ruler_doc(),
        formatter_class=PlainHelpFormatter,
    )
    from memrl.eval.ruler.config import RulerEvalConfig

    add_arguments(r, RulerEvalConfig)
    r.add_argument("--json", action="store_true", help="print only the summary JSON (no report)")
    r.set_defaults(func=_ruler)
    from memrl.eval.qa.judge_check import JudgeCheckConfig

    jc = actions.add_parser(
        "judge-check",
        help="a judge's false-accept and false-reject rates on locomo-audit's stress sets and the gold answers",
        description=judge_check_doc(),
        formatter_class=PlainHelpFormatter,
    )
    add_arguments(jc, JudgeCheckConfig)
    jc.add_argument("--json", action="store_true", help="print only the rates JSON (no table)")
    jc.set_defaults(func=_judge_check)
    cp = actions.add_parser(
        "compare",
        help="paired differences between runs on the same questions, intervals over conversations",
        description=compare_doc(),
        formatter_class=PlainHelpFormatter,
    )
    cp.add_argument(
        "runs", nargs="+", metavar="RUN", help="run folders of `memrl eval` (the first is the base)"
    )
    cp.add_argument(
        "--metric", default="f1,judge", help="figures to compare: f1, judge, em (default f1,judge)"
    )
    cp.add_argument("--mode", choices=("memrl", "official"), default="memrl",
                    help="memrl: pair questions scored in both runs; official: failures count 0")  # fmt: skip
    cp.add_argument("--gold", choices=("original", "corrected"), default="original",
                    help="corrected: the figures against locomo-audit's key (runs made with --gold corrected)")  # fmt: skip
    cp.add_argument("--json", action="store_true", help="print only the JSON")
    cp.set_defaults(func=_compare)
    p = actions.add_parser(
        "retrieval",
        help="evidence recall@k of search over the raw memory (dense, bm25, hybrid), no LLM",
        description=__doc__,
        formatter_class=PlainHelpFormatter,
    )
    add_arguments(p, RetrievalConfig, skip=("raw", "k"))
    k_field = next(f for f in dataclasses.fields(RetrievalConfig) if f.name == "k")
    p.add_argument(  # by hand: add_arguments would parse "1,5,10" as one int
        "--k", nargs="+", default=k_field.default, help=f"{k_field.metadata['help']} (default: 1,5,10,20)"
    )
    add_arguments(p.add_argument_group("raw builder (what is indexed per turn)"), RawConfig)
    p.add_argument("--json", action="store_true", help="print only the JSON line (no tables)")
    p.add_argument("--ablation", action="store_true", help="run the ablation study instead (slow)")
    p.set_defaults(func=_retrieval)


def _split(values: Any, cast: type, flag: str = "") -> tuple[Any, ...]:
    """``["1,5", "10"]`` -> ``(1, 5, 10)``: list flags accept commas and spaces."""
    from memrl.errors import ConfigError

    if values is None or isinstance(values, (str, int, float)):
        values = [] if values is None else [values]
    out = []
    for v in (v.strip() for item in values for v in str(item).split(",") if v.strip()):
        try:
            out.append(cast(v))
        except ValueError:
            raise ConfigError(
                f"--{flag.replace('_', '-')}: {v!r} is not {'a whole number' if cast is int else 'valid'}"
            ) from None
    return tuple(out)


def config_from_args(args: argparse.Namespace) -> RetrievalConfig:
    """The :class:`RetrievalConfig` (with its ``raw`` config) that the parsed flags describe."""

    def build(cls: type) -> Any:
        values = {}
        for f in dataclasses.fields(cls):
            if f.name == "raw" or not hasattr(args, f.name):
                continue
            v = getattr(args, f.name)
            if isinstance(f.default, tuple):
                v = _split(v, int if f.name == "k" else str, f.name)
            values[f.name] = v
        return values

    return RetrievalConfig(**build(RetrievalConfig), raw=RawConfig(**build(RawConfig)))


def _retrieval(args: argparse.Namespace) -> int:
    from memrl.eval.retrieval import evaluate_retrieval, load_conversations
    from memrl.eval.retrieval.report import headline, report_markdown

    config = config_from_args(args)
    convs = load_conversations(config)
    if args.ablation:
        from memrl.eval.retrieval.ablation import ablation_markdown, run_ablation

        rows = run_ablation(convs, config, progress=True)
        if not args.json:
            print(ablation_markdown(rows))
        print(json.dumps({"ablation": rows}))
        return 0
    report = evaluate_retrieval(convs, config, progress=True)
    if not args.json:
        print(report_markdown(report))
        if config.output_dir:
            print(f"wrote {config.output_dir}/{{questions.jsonl,summary.json,report.md,recall.png}}")
    sys.stdout.flush()
    print(json.dumps(headline(report)))
    return 0
