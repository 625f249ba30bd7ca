"""The flat module paths memrl.eval had before its sub-packages, kept importable for one release.

``from memrl.eval.qa_config import QAEvalConfig`` still works and warns (``DeprecationWarning``) with the
new path (``memrl.eval.qa.config``); the module it gives holds the new module's names (``gold``: both
halves it was cut into). Installed by ``memrl.eval``'s ``__init__``; the finder is :mod:`memrl._moved`'s.
``memrl.eval.qa`` and ``memrl.eval.retrieval`` were modules and are packages now: their ``__init__``
exports the names code imported from them.
"""

from __future__ import annotations

from memrl import _moved

#: old module (under memrl.eval) -> the modules its names now live in, the main one first.
MOVED: dict[str, tuple[str, ...]] = {
    "qa_config": ("qa.config",), "full_context": ("qa.full_context",), "gold": ("qa.gold", "retrieval.gold"),
    "tokens": ("qa.tokens",), "verdicts": ("qa.verdicts",), "judge_check": ("qa.judge_check",),
    "judge_rates": ("qa.judge_rates",), "report": ("qa.report",), "report_markdown": ("qa.report_markdown",),
    "compare": ("qa.compare",), "aggregate": ("qa.aggregate",),
    "retrieval_config": ("retrieval.config",), "retrieval_report": ("retrieval.report",),
    "retrieval_search": ("retrieval.search",), "ablation": ("retrieval.ablation",),
    "ruler_config": ("ruler.config",), "ruler_eval": ("ruler.run",), "ruler_report": ("ruler.report",),
}  # fmt: skip
PACKAGE = "memrl.eval"


def install() -> None:
    """Add the finder once (idempotent)."""
    _moved.install(PACKAGE, MOVED)
