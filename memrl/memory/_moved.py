"""The flat module paths memrl.memory had before its sub-packages, kept importable for one release.

``from memrl.memory.types import MemoryItem`` still works and warns (``DeprecationWarning``) with the new
path; the module it gives holds the names of the module(s) the old one was split into, and the old names of
renamed classes (``ServerIndex``, ``Facts``, ``fts_query``). New code imports ``memrl.memory`` or a
sub-package's ``__init__`` (docs/design.md). Installed by ``memrl.memory``'s ``__init__``; the finder is
:mod:`memrl._moved`'s.
"""

from __future__ import annotations

from memrl import _moved

#: old module (under memrl.memory) -> the modules its names now live in, the main one first.
MOVED: dict[str, tuple[str, ...]] = {
    "types": ("records.types",), "values": ("records.values",), "schemas": ("records.models",),
    "reading": ("records.reading",), "fusion": ("search.fusion", "analysis.words"),
    "lexical": ("index.lexical", "analysis.tokenizer", "analysis.bm25"),
    "terms": ("analysis.terms", "search.terms", "analysis.tokenizer"), "query": ("analysis.query", "search.priors"),
    "dates": ("analysis.dates",), "embedder": ("embedders.base",), "minilm": ("embedders.minilm",),
    "mpnet": ("embedders.mpnet",), "history": ("store.history",), "namespaces": ("store.namespaces",),
    "keys": ("store.keys",), "expiry": ("store.expiry",), "indexing": ("store.indexing",),
    "validation": ("store.validation",), "transfer": ("store.transfer",), "past": ("store.past",),
    "dense": ("index.dense", "records.types"), "ann": ("index.ann",), "ann_files": ("index.ann_files",),
    "sqlite_store": ("backends.sqlite.store",), "schema": ("backends.sqlite.migrations",),
    "postgres": ("backends.postgres.store",), "pg_schema": ("backends.postgres.migrations",),
    "pg_lexical": ("backends.postgres.lexical",), "pg_ann": ("backends.postgres.ann",),
    "pg_stats": ("backends.postgres.stats",), "server_index": ("backends.postgres.vectors", "records.types"),
    "pglocal": ("backends.postgres.local",), "search_options": ("search.options",),
    "expand": ("search.expand",), "rerank": ("search.rerank",), "rerank_model": ("search.rerank_model",),
    "job_commit": ("jobs.changes",), "read_methods": ("facade.reads",), "job_methods": ("facade.writes",),
    "sync": ("facade.blocking",),
}  # fmt: skip
#: old module -> {old name: new name} of what was renamed in it.
RENAMED = {"server_index": {"ServerIndex": "PgVectorIndex"}, "query": {"Facts": "ItemSignals"},
           "fusion": {"fts_query": "fts5_match"}}  # fmt: skip
PACKAGE = "memrl.memory"


def install() -> None:
    """Add the finder once (idempotent; :mod:`memrl._moved`)."""
    _moved.install(PACKAGE, MOVED, RENAMED, also=PACKAGE)
