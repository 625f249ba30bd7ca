"""Benchmark data for memrl: one data model (:mod:`memrl.data.types`) and a loader per data set.

    from memrl.data import load_dataset
    convs, report = load_dataset("locomo")          # finds locomo/locomo10.json in the data folder
    print(report)                                   # sizes, categories, data problems found
    convs, _ = load_dataset("sample")               # the small conversation bundled with memrl

Names: ``locomo``, ``longmemeval``, ``perltqa``, ``hotpotqa``, ``ruler-hotpotqa``, ``sample``. The data
folder is ``--data-path`` > ``$MEMRL_DATA_DIR`` > ``~/.cache/memrl/data``; ``memrl data download NAME``
fills it (see :mod:`memrl.data.download`).
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path
from typing import Any

from memrl.data.download import DATASETS, data_dir, download, find_dataset, resolve_data_dir
from memrl.data.hotpotqa import (
    HotpotQAExample,
    approx_tokens,
    build_ruler_hotpotqa,
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
    Question,
    Session,
    Turn,
)
from memrl.errors import DataError

__all__ = [
    "DATASETS",
    "DATASET_NAMES",
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
    "Observation",
    "Question",
    "Session",
    "Turn",
    "approx_tokens",
    "build_ruler_hotpotqa",
    "data_dir",
    "download",
    "find_dataset",
    "load_dataset",
    "load_hotpotqa",
    "load_locomo",
    "load_longmemeval",
    "load_perltqa",
    "load_ruler_hotpotqa",
    "locomo_observations",
    "resolve_data_dir",
    "sample_conversation_path",
    "save_ruler_hotpotqa",
    "seeded_split",
    "select",
]

#: Names :func:`load_dataset` accepts.
DATASET_NAMES: tuple[str, ...] = ("locomo", "longmemeval", "perltqa", "hotpotqa", "ruler-hotpotqa", "sample")


def sample_conversation_path() -> Path:
    """Path of the bundled sample conversation (LoCoMo format, written for memrl: 3 sessions, 10 questions)."""
    return Path(str(files("memrl") / "resources" / "sample_conversation.json"))


def load_dataset(name: str, path: str | Path | None = None, **kwargs: Any) -> LoadResult:
    """Load a data set by name; ``path`` overrides where it is looked for (a file, or for PerLTQA a folder).

    Without ``path`` the file is found in the data folder (``data_path=`` overrides that folder).
    Remaining keyword arguments go to the loader, for example ``include_adversarial=True`` (LoCoMo),
    ``file="longmemeval_s.json"`` or ``question_ids=...`` (LongMemEval), ``memory_path=`` (PerLTQA),
    ``target_tokens=``/``num_docs=``/``num_questions=``/``seed=`` (building RULER-HotpotQA when no
    eval file ``path`` is given).
    """
    key = name.strip().lower().replace("_", "-")
    data_path = kwargs.pop("data_path", None)
    if key == "sample":
        return load_locomo(path or sample_conversation_path(), source="sample", **kwargs)
    if key == "locomo":
        return load_locomo(path or find_dataset("locomo", data_path), **kwargs)
    if key == "longmemeval":
        file = kwargs.pop("file", None)
        return load_longmemeval(path or find_dataset("longmemeval", data_path, file=file), **kwargs)
    if key == "perltqa":
        return load_perltqa(*_perltqa_paths(path, kwargs.pop("memory_path", None), data_path))
    if key == "hotpotqa":
        return load_hotpotqa(path or find_dataset("hotpotqa", data_path), **kwargs)
    if key == "ruler-hotpotqa":
        if path is not None:
            return load_ruler_hotpotqa(path)
        examples, report = load_hotpotqa(find_dataset("hotpotqa", data_path))
        questions = build_ruler_hotpotqa(examples, **kwargs)
        report.stats["ruler_questions"] = len(questions)
        return LoadResult(questions, report)
    raise DataError(f"unknown data set {name!r}; choose from {', '.join(DATASET_NAMES)}")


def _perltqa_paths(
    path: str | Path | None, memory_path: str | Path | None, data_path: Any
) -> tuple[Path, Path]:
    """PerLTQA's two files: from a folder, from the QA file (memory file beside it), or the data folder."""
    qa_name, memory_name = "perltqa_en_v2.json", "perltmem_en_v2.json"
    if path is None:
        qa = find_dataset("perltqa", data_path, file=qa_name)
        return qa, Path(memory_path) if memory_path else find_dataset("perltqa", data_path, file=memory_name)
    path = Path(path)
    qa = path / qa_name if path.is_dir() else path
    return qa, Path(memory_path) if memory_path else qa.with_name(memory_name)
