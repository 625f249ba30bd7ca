"""Every data set by name, from a file or a folder: :func:`load_dataset` (the loader's own records) and
:func:`load_conversations` (always :class:`~memrl.data.types.Conversation` records, what the evaluations use).

``path`` (``--data-path``) may be a data file or a folder, the same way for every data set: a folder is
searched like the data folder (``FOLDER/<set>/<file>`` or ``FOLDER/<file>``, see
:func:`memrl.data.download.find_dataset`); without it the data folder (``$MEMRL_DATA_DIR``, then
``~/.cache/memrl/data``) is searched. Expected files:

==================  ==================================================================================
``locomo``          ``locomo/locomo10.json``
``longmemeval``     ``longmemeval/longmemeval_oracle.json`` (or pass ``longmemeval_s.json`` as the file)
``perltqa``         ``perltqa/perltqa_en_v2.json`` + ``perltqa/perltmem_en_v2.json`` (side by side)
``hotpotqa``        ``hotpotqa/hotpot_dev_distractor_v1.json``
``ruler-hotpotqa``  the HotpotQA file above (contexts built at ``lengths``), or MemAgent's eval files
                    ``eval_*.json`` (``{context, input, answers}`` records; a folder of them, or one)
``ruler-locomo``    the LoCoMo file (contexts built at ``lengths``: not MemAgent's benchmark)
``ruler-synthetic`` RULER's generated items: a ``*.jsonl`` file ``memrl eval ruler`` or ``memrl data prepare
                    --dataset ruler-synthetic`` wrote (with its ``.sha256``), or a folder of them; no default
``sample``          bundled with memrl (a LoCoMo-format file, or a folder holding
                    ``sample_conversation.json``, may be given instead)
==================  ==================================================================================
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path
from typing import Any

from memrl.data._parse import read_json_records
from memrl.data.download import find_dataset
from memrl.data.types import Conversation, LoadResult
from memrl.errors import ConfigError, DataError

__all__ = [
    "DATASET_NAMES",
    "DOCUMENT_DATASETS",
    "load_conversations",
    "load_dataset",
    "sample_conversation_path",
]

#: Names :func:`load_dataset` and :func:`load_conversations` accept.
DATASET_NAMES: tuple[str, ...] = (
    "locomo", "longmemeval", "perltqa", "hotpotqa", "ruler-hotpotqa", "ruler-locomo", "ruler-synthetic", "sample",
)  # fmt: skip
#: Data sets whose conversations are documents (questions answered over passages).
DOCUMENT_DATASETS: tuple[str, ...] = ("hotpotqa", "ruler-hotpotqa", "ruler-locomo", "ruler-synthetic")
#: Data sets built at context lengths (``--lengths``).
LENGTH_DATASETS: tuple[str, ...] = ("ruler-hotpotqa", "ruler-locomo")
DEFAULT_LENGTHS = ("7k",)


def sample_conversation_path() -> Path:
    """Path of the bundled sample conversation (LoCoMo format, written for memrl: 3 sessions, 10 questions)."""
    return Path(str(files("memrl") / "resources" / "sample_conversation.json"))


def canonical(name: str) -> str:
    """A data set name as :data:`DATASET_NAMES` spells it; a :class:`DataError` lists them otherwise."""
    key = str(name).strip().lower().replace("_", "-")
    if key not in DATASET_NAMES:
        raise DataError(f"unknown data set {name!r}; choose from {', '.join(DATASET_NAMES)}")
    return key


def _where(path: str | Path | None, data_path: Any) -> tuple[Path | None, Any]:
    """``(file, folder)``: a folder given as ``path`` becomes the folder to search."""
    if path is None:
        return None, data_path
    p = Path(path).expanduser()
    if p.is_dir():
        return None, p
    if not p.exists():
        raise DataError(f"{p}: no such file or folder (check --data-path)")
    return p, data_path


def load_dataset(name: str, path: str | Path | None = None, **kwargs: Any) -> LoadResult:
    """Load a data set by name; ``path`` is its file or a folder holding it (see the module docstring).

    Keyword arguments go to the loader: ``include_adversarial=True`` (LoCoMo), ``file="longmemeval_s.json"``
    or ``question_ids=...`` (LongMemEval), ``memory_path=`` (PerLTQA), ``lengths=``/``num_questions=``/
    ``seed=`` (RULER sets; records are then conversations), ``data_path=`` (the data folder to search).
    """
    from memrl.data.hotpotqa import load_hotpotqa
    from memrl.data.locomo import load_locomo
    from memrl.data.longmemeval import load_longmemeval
    from memrl.data.perltqa import load_perltqa

    key = canonical(name)
    file, folder = _where(path, kwargs.pop("data_path", None))
    if key == "sample":  # bundled: a folder is searched for sample_conversation.json, else the bundled one
        if file is None and folder is not None and (Path(folder) / "sample_conversation.json").is_file():
            file = Path(folder) / "sample_conversation.json"
        return load_locomo(file or sample_conversation_path(), source="sample", **kwargs)
    if key == "locomo":
        return load_locomo(file or find_dataset("locomo", folder), **kwargs)
    if key == "longmemeval":
        name_ = kwargs.pop("file", None)
        return load_longmemeval(file or find_dataset("longmemeval", folder, file=name_), **kwargs)
    if key == "perltqa":
        qa_name, memory_name = "perltqa_en_v2.json", "perltmem_en_v2.json"
        memory = kwargs.pop("memory_path", None)
        qa = file or find_dataset("perltqa", folder, file=qa_name)
        if memory is None:
            beside = qa.with_name(memory_name)
            memory = (
                beside
                if beside.is_file() or file is not None
                else find_dataset("perltqa", folder, file=memory_name)
            )
        return load_perltqa(qa, memory)
    if key == "hotpotqa":
        return load_hotpotqa(file or find_dataset("hotpotqa", folder), **kwargs)
    if key == "ruler-hotpotqa":
        return _ruler_hotpotqa(file, folder, **kwargs)
    if key == "ruler-synthetic":
        from memrl.data.ruler.synthetic import synthetic_conversations

        if path is None:
            raise DataError(
                "ruler-synthetic reads generated items: pass --data-path, a *.jsonl file `memrl eval ruler` "
                "(OUTPUT/data/) or `memrl data prepare --dataset ruler-synthetic` (OUTPUT.d/) wrote, or its folder"
            )
        return synthetic_conversations(path)
    return _ruler_locomo(file, folder, **kwargs)  # ruler-locomo


def _lengths(lengths: Any) -> list:
    from memrl.data.ruler import parse_lengths

    return parse_lengths(lengths if lengths else DEFAULT_LENGTHS)


def _eval_files(folder: Any) -> list[Path]:
    from memrl.data.download import resolve_data_dir

    root = resolve_data_dir(folder)
    found: list[Path] = []
    for d in (root / "ruler-hotpotqa", root):
        if d.is_dir():
            found += sorted(p for p in d.glob("eval_*.json*") if p.suffix in (".json", ".jsonl"))
    return sorted(found, key=lambda p: (len(p.stem), p.stem))


def _is_eval_file(path: Path) -> bool:
    records = read_json_records(path)
    return (
        bool(records) and isinstance(records[0], dict) and "input" in records[0] and "context" in records[0]
    )


def _ruler_hotpotqa(
    file: Path | None, folder: Any, *, lengths: Any = None, num_questions: int | None = None, seed: int = 0
) -> LoadResult:
    """Built from the HotpotQA file at ``lengths``, or MemAgent's eval files read as they are."""
    from memrl.data.hotpotqa import load_hotpotqa, load_ruler_hotpotqa
    from memrl.data.ruler import eval_file_label, ruler_hotpotqa_conversations, ruler_question_conversations
    from memrl.data.types import LoadReport

    eval_files = [file] if file is not None and _is_eval_file(file) else []
    if file is None and not lengths:
        eval_files = _eval_files(folder)
    if eval_files:
        if lengths:
            raise ConfigError(
                f"{eval_files[0]} is a ready RULER-HotpotQA eval file (its contexts have their length): drop "
                "--lengths, or give the HotpotQA file to build contexts at those lengths"
            )
        convs: list[Conversation] = []
        report = LoadReport(source=", ".join(str(p) for p in eval_files))
        for p in eval_files:
            questions, _ = load_ruler_hotpotqa(p)
            questions = questions[:num_questions] if num_questions is not None else questions
            label = eval_file_label(p, questions)
            convs += ruler_question_conversations(questions, label, "ruler-hotpotqa")
            report.categories[label] += len(questions)
        report.stats.update(questions=len(convs), files=len(eval_files))
        return LoadResult(convs, report)
    examples, report = load_hotpotqa(file or find_dataset("hotpotqa", folder))
    convs = ruler_hotpotqa_conversations(examples, _lengths(lengths), num_questions=num_questions, seed=seed)
    return _built(convs, report)


def _built(convs: list[Conversation], report: Any) -> LoadResult:
    """Built RULER conversations, with the report counting them by length."""
    report.categories.clear()
    for c in convs:
        report.categories[c.questions[0].category] += 1
    report.stats["ruler_questions"] = len(convs)
    return LoadResult(convs, report)


def _ruler_locomo(
    file: Path | None,
    folder: Any,
    *,
    lengths: Any = None,
    num_questions: int | None = None,
    seed: int = 0,
    sources: tuple[str, ...] | None = None,
) -> LoadResult:
    from memrl.data.locomo import load_locomo
    from memrl.data.ruler import ruler_locomo_conversations

    convs, report = load_locomo(file or find_dataset("locomo", folder))
    if sources is not None:
        unknown = set(sources) - {c.id for c in convs}
        if unknown:
            raise ConfigError(f"ruler-locomo: no LoCoMo conversation {', '.join(sorted(unknown))}")
        convs = [c for c in convs if c.id in set(sources)]
    return _built(
        ruler_locomo_conversations(convs, _lengths(lengths), num_questions=num_questions, seed=seed), report
    )


def load_conversations(
    name: str,
    path: str | Path | None = None,
    *,
    data_path: Any = None,
    lengths: Any = None,
    questions: int | None = None,
    seed: int = 0,
    include_adversarial: bool = False,
    sources: Any = None,
) -> LoadResult:
    """Any data set as conversations (documents data sets included), with its load report.

    ``questions`` caps the number of questions of document data sets (per length for RULER sets); dialogue
    data sets keep all their questions (evaluations select from them). ``lengths`` is only for RULER sets.
    ``sources`` (``ruler-locomo`` only): the LoCoMo conversation ids its documents are built from, gold and
    distractor sessions alike (a split's conversations: no session of another split enters a document).
    """
    from memrl.data.hotpotqa import hotpotqa_conversations

    key = canonical(name)
    if lengths and key not in LENGTH_DATASETS:
        raise ConfigError(
            f"--lengths builds long contexts; only {', '.join(LENGTH_DATASETS)} take it, not {key}"
        )
    kwargs: dict[str, Any] = {"data_path": data_path}
    if key in ("locomo", "sample"):
        kwargs["include_adversarial"] = include_adversarial
    if key in LENGTH_DATASETS:
        kwargs.update(lengths=lengths, num_questions=questions, seed=seed)
    if sources is not None:
        if key != "ruler-locomo":
            raise ConfigError(f"sources= selects the LoCoMo conversations of ruler-locomo, not of {key}")
        kwargs["sources"] = tuple(sources)
    records, report = load_dataset(key, path, **kwargs)
    if key == "hotpotqa":
        records = hotpotqa_conversations(records[:questions] if questions is not None else records)
    if key == "ruler-synthetic" and questions is not None:  # the first N of each task and length
        seen: dict[tuple[str, str], int] = {}
        kept = []
        for c in records:
            cell = (c.metadata["ruler_task"], c.metadata["ruler_length"])
            seen[cell] = seen.get(cell, 0) + 1
            if seen[cell] <= questions:
                kept.append(c)
        records = kept
    return LoadResult(records, report)
