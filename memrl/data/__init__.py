"""Benchmark data for memrl: one data model (:mod:`memrl.data.types`) and a loader per data set.

    from memrl.data import load_dataset
    convs, report = load_dataset("locomo")          # finds locomo/locomo10.json in the data folder
    print(report)                                   # sizes, categories, data problems found
    convs, _ = load_dataset("sample")               # the small conversation bundled with memrl

Names: ``locomo``, ``longmemeval``, ``perltqa``, ``hotpotqa``, ``ruler-hotpotqa``, ``ruler-locomo``,
``sample`` (files each expects: :mod:`memrl.data.catalog`). ``--data-path`` is a data file or a folder;
the data folder is ``$MEMRL_DATA_DIR`` > ``~/.cache/memrl/data``; ``memrl data download NAME`` fills it
(see :mod:`memrl.data.download`). ``load_conversations(name)`` gives every data set as conversations
(HotpotQA and the RULER sets as documents conversations, :mod:`memrl.data.documents`).
"""

from __future__ import annotations

from memrl.data.catalog import (
    DATASET_NAMES,
    DOCUMENT_DATASETS,
    load_conversations,
    load_dataset,
    sample_conversation_path,
)
from memrl.data.documents import context_of, document_conversation, is_documents, parse_context
from memrl.data.download import DATASETS, data_dir, download, find_dataset, resolve_data_dir
from memrl.data.hotpotqa import (
    HotpotQAExample,
    approx_tokens,
    build_ruler_hotpotqa,
    hotpotqa_conversations,
    load_hotpotqa,
    load_ruler_hotpotqa,
    save_ruler_hotpotqa,
)
from memrl.data.locomo import (
    LOCOMO_CATEGORIES,
    NOT_ANSWERABLE,
    Observation,
    load_locomo,
    locomo_observations,
)
from memrl.data.longmemeval import LONGMEMEVAL_QUESTION_TYPES, load_longmemeval
from memrl.data.perltqa import PERLTQA_CATEGORIES, load_perltqa
from memrl.data.splits import LOCOMO_UPDATE_SPLIT, MEMBUILDER_LONGMEMEVAL_SPLIT, seeded_split, select
from memrl.data.types import (
    Conversation,
    LoadReport,
    LoadResult,
    LongDocQuestion,
    MemoryRecord,
    Question,
    Session,
    Turn,
)

__all__ = [
    "DATASETS",
    "DATASET_NAMES",
    "DOCUMENT_DATASETS",
    "LOCOMO_CATEGORIES",
    "LOCOMO_UPDATE_SPLIT",
    "LONGMEMEVAL_QUESTION_TYPES",
    "MEMBUILDER_LONGMEMEVAL_SPLIT",
    "NOT_ANSWERABLE",
    "PERLTQA_CATEGORIES",
    "Conversation",
    "HotpotQAExample",
    "LoadReport",
    "LoadResult",
    "LongDocQuestion",
    "MemoryRecord",
    "Observation",
    "Question",
    "Session",
    "Turn",
    "approx_tokens",
    "build_ruler_hotpotqa",
    "context_of",
    "document_conversation",
    "data_dir",
    "download",
    "find_dataset",
    "hotpotqa_conversations",
    "is_documents",
    "load_conversations",
    "load_dataset",
    "load_hotpotqa",
    "load_locomo",
    "load_longmemeval",
    "load_perltqa",
    "load_ruler_hotpotqa",
    "locomo_observations",
    "parse_context",
    "resolve_data_dir",
    "sample_conversation_path",
    "save_ruler_hotpotqa",
    "seeded_split",
    "select",
]
