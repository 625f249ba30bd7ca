"""The retrieval evaluation, no LLM (``memrl eval retrieval``; ``from memrl.eval.retrieval import aevaluate``).

- ``run``: :func:`aevaluate` / :func:`evaluate_retrieval`, the run over a memory, and what it loads;
- ``config``: :class:`RetrievalConfig`, every knob, the bottom the others import;
- ``search``: the work on the store (build a conversation's namespace, search its questions, score them);
- ``report``: recall@k, NDCG@k and all@k with intervals, ``report.md``, the plot;
- ``gold``: the same retrieved turns scored against locomo-audit's corrected evidence;
- ``ablation``: what each idea of the default settings bought.

Before this package these were flat modules (``memrl.eval.retrieval`` itself,
``memrl.eval.retrieval_config``, ``memrl.eval.ablation``, ...); those paths still import, with a
``DeprecationWarning`` (:mod:`memrl.eval._moved`). Names are imported on first use, so
``memrl.eval.retrieval.config`` loads without the run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from memrl import _moved

if TYPE_CHECKING:  # the same names as _EXPORTS
    from memrl.eval.retrieval.config import RetrievalConfig
    from memrl.eval.retrieval.report import summarize, write_outputs
    from memrl.eval.retrieval.run import (
        aevaluate,
        enrich_conversations,
        enrich_llm,
        evaluate_retrieval,
        load_conversations,
        open_memory,
    )
    from memrl.eval.retrieval.search import (
        build_conversation,
        evaluate_conversation,
        namespace_of,
        prefetch_embeddings,
    )

#: name -> the module of the package that defines it (what ``memrl.eval.retrieval`` gave as a module).
_EXPORTS = {"aevaluate": "run", "enrich_conversations": "run", "enrich_llm": "run", "evaluate_retrieval": "run",
            "load_conversations": "run", "open_memory": "run", "RetrievalConfig": "config",
            "summarize": "report", "write_outputs": "report", "build_conversation": "search",
            "evaluate_conversation": "search", "namespace_of": "search",
            "prefetch_embeddings": "search"}  # fmt: skip

__all__ = [
    "RetrievalConfig",
    "aevaluate",
    "build_conversation",
    "enrich_conversations",
    "enrich_llm",
    "evaluate_conversation",
    "evaluate_retrieval",
    "load_conversations",
    "namespace_of",
    "open_memory",
    "prefetch_embeddings",
    "summarize",
    "write_outputs",
]


__getattr__ = _moved.exports(__name__, _EXPORTS)
