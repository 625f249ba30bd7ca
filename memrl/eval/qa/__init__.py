"""The QA evaluation (``memrl eval qa``; ``from memrl.eval.qa import QAEvaluation, run_qa_eval``).

- ``run``: :class:`QAEvaluation`, the run (build, answer, judge, report) and its JSONL logs;
- ``config``: :class:`QAEvalConfig`, every flag of a run, and the conversations it selects;
- ``verdicts`` (a question's scores and judge labels, ``verdicts.jsonl``), ``aggregate`` (per-category
  tables and the official mode), ``report`` and ``report_markdown`` (``summary.json``, ``report.md``);
- ``full_context`` (``--builder full``) and ``tokens`` (token counts and model windows, RULER's ``full``
  reader's too);
- ``gold`` (locomo-audit's corrections), ``judge_check`` and ``judge_rates`` (a judge checked on LoCoMo's
  stress set, its measured rates), ``compare`` (runs paired question by question).

Before this package these were flat modules (``memrl.eval.qa`` itself, ``memrl.eval.qa_config``,
``memrl.eval.verdicts``, ...); those paths still import, with a ``DeprecationWarning``
(:mod:`memrl.eval._moved`). Names are imported on first use, so ``memrl.eval.qa.config`` loads without the run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from memrl import _moved

if TYPE_CHECKING:  # the same names as _EXPORTS
    from memrl.eval.qa.config import READERS, QAEvalConfig, load_conversations
    from memrl.eval.qa.run import JsonlLog, QAEvaluation, run_qa_eval

#: name -> the module of the package that defines it (what ``memrl.eval.qa`` gave as a module).
_EXPORTS = {"JsonlLog": "run", "QAEvaluation": "run", "run_qa_eval": "run", "READERS": "config",
            "QAEvalConfig": "config", "load_conversations": "config"}  # fmt: skip

__all__ = ["READERS", "JsonlLog", "QAEvalConfig", "QAEvaluation", "load_conversations", "run_qa_eval"]


__getattr__ = _moved.exports(__name__, _EXPORTS)
