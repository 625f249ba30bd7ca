"""Hybrid search over a store: the pipeline (:mod:`.hybrid`), its options (:mod:`.options`), fusion, query
priors, session and entity expansion, adaptive fusion's per-query weights (:mod:`.adaptive`) and re-scoring (:mod:`.fusion`, :mod:`.priors`, :mod:`.expand`,
:mod:`.terms`, :mod:`.rerank`, :mod:`.rerank_model`). It asks the store for its lexical and vector indexes;
it never imports a back-end.
"""

from memrl.memory.search.adaptive import FEATURES, STEPS, dense_weight, load_model
from memrl.memory.search.fusion import convex, rrf
from memrl.memory.search.hybrid import SearchIndex
from memrl.memory.search.options import PLAIN, Fusion, SearchMode, SearchOptions

__all__ = [
    "FEATURES",
    "PLAIN",
    "STEPS",
    "Fusion",
    "SearchIndex",
    "SearchMode",
    "SearchOptions",
    "convex",
    "dense_weight",
    "load_model",
    "rrf",
]
