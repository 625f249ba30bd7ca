"""RULER's synthetic tasks (NVIDIA/RULER, Apache-2.0): the out-of-distribution suite MemAgent reports.

Thirteen tasks as RULER's ``scripts/synthetic.yaml`` defines them, less ``qa_1`` (SQuAD is not on these
machines): eight needle-in-a-haystack subsets (:mod:`memrl.data.ruler.needles`), variable tracking, common
and frequent words extraction (:mod:`memrl.data.ruler.aggregate`), and ``qa_2`` (RULER-HotpotQA documents,
:func:`memrl.data.hotpotqa.build_ruler_hotpotqa`, when the HotpotQA dev file is given).

Each item's prompt is the task's template filled with its context and query; the haystack is grown (a
binary search on its size) until the prompt plus the task's answer budget fills the target length, measured
in the evaluated model's tokens (``count_tokens``). Generation is seeded: the same task, length, count, seed,
tokenizer and haystack give byte-identical JSONL, and :func:`write_items` records its sha256 beside it::

    items = generate("niah_single_2", 4_000, count=8, seed=0, count_tokens=n_tokens, essays=load_essays())
    digest = write_items(items, "runs/ruler/data/niah_single_2_4k.jsonl")   # + .jsonl.sha256

Keys are adjective-noun words from the lists of the ``wonderwords`` package, as RULER's
(``pip install memrl[ruler]``); tests pass their own :class:`WordLists`.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from memrl.data.ruler.tasks import (
    NOISE,
    RULER_TASKS,
    TASKS,
    SyntheticItem,
    TaskSpec,
    TokenCounter,
    WordLists,
    fit,
    make_item,
    prompt_of,
)
from memrl.errors import ConfigError, DataError

__all__ = [
    "NOISE",
    "RULER_TASKS",
    "TASKS",
    "SyntheticItem",
    "TaskSpec",
    "WordLists",
    "fit",
    "generate",
    "load_essays",
    "read_items",
    "synthetic_conversations",
    "wonderwords_lists",
    "write_items",
]


def wonderwords_lists() -> WordLists:
    """The word lists of the ``wonderwords`` package, RULER's source (imported only when asked for)."""
    try:
        from wonderwords import random_word
    except ImportError:
        raise DataError(
            "RULER's keys are words from the wonderwords package: pip install 'memrl[ruler]' "
            "(or pip install wonderwords)"
        ) from None
    read = random_word._get_words_from_text_file  # the package's own reader, as RULER calls it
    clean = lambda ws: tuple(sorted({w for w in ws if re.fullmatch(r"[a-z]+", w)}))  # noqa: E731
    return WordLists(
        clean(read("adjectivelist.txt")), clean(read("nounlist.txt")), clean(read("verblist.txt"))
    )


# ---------------------------------------------------------------------------------------------- essays
def load_essays(folder: str | Path | None = None) -> str:
    """The essay haystack: every ``*.txt`` of ``folder`` (default: the data folder's ``paulgraham``,
    ``$MEMRL_DATA_DIR/paulgraham``), in file-name order, whitespace collapsed to single spaces."""
    from memrl.data.download import resolve_data_dir

    root = Path(folder).expanduser() if folder is not None else resolve_data_dir(None) / "paulgraham"
    if root.is_dir() and not any(root.glob("*.txt")) and (root / "paulgraham").is_dir():
        root = root / "paulgraham"  # the data folder itself was given
    files = sorted(root.glob("*.txt")) if root.is_dir() else []
    if not files:
        raise DataError(
            f"no essays (*.txt) in {root}: the essay haystack needs Paul Graham's essays; give the folder "
            "(--essays) or set MEMRL_DATA_DIR to a data folder holding paulgraham/"
        )
    return " ".join(" ".join(p.read_text(encoding="utf-8", errors="replace").split()) for p in files)


# ---------------------------------------------------------------------------------------------- generate
def generate(
    task: str,
    target_tokens: int,
    *,
    count: int,
    seed: int = 0,
    count_tokens: TokenCounter,
    label: str | None = None,
    words: WordLists | None = None,
    essays: str | None = None,
    hotpotqa: Sequence[Any] | None = None,
) -> list[SyntheticItem]:
    """``count`` items of ``task`` at ``target_tokens`` (see the module docstring).

    ``words`` defaults to :func:`wonderwords_lists` (niah, cwe); ``essays`` is the essay haystack text
    (niah subsets on essays; :func:`load_essays`); ``hotpotqa``: HotpotQA examples (``qa_2``)."""
    from memrl.data.ruler.lengths import length_label

    if task not in TASKS:
        raise ConfigError(f"unknown RULER task {task!r}; choose from {', '.join(RULER_TASKS)}")
    if count < 1:
        raise ConfigError("count must be at least 1")
    spec = TASKS[task]
    label = label or length_label(target_tokens)
    args = dict(
        spec=spec, label=label, target=target_tokens, count=count, seed=seed, count_tokens=count_tokens
    )
    if spec.family == "niah":
        from memrl.data.ruler.needles import generate_niah

        if spec.options["haystack"] == "essay" and not essays:
            raise DataError(f"{task} hides its needles in essays: give the essay text (load_essays())")
        return generate_niah(**args, words=words or wonderwords_lists(), essays=essays)
    if spec.family == "qa":
        return _qa(**args, examples=hotpotqa)
    from memrl.data.ruler import aggregate as ruler_aggregate

    if spec.family == "cwe":
        return ruler_aggregate.generate_cwe(**args, words=words or wonderwords_lists())
    return getattr(ruler_aggregate, f"generate_{spec.family}")(**args)


def _qa(spec: TaskSpec, label: str, target: int, count: int, seed: int, count_tokens: TokenCounter,
        examples: Sequence[Any] | None) -> list[SyntheticItem]:  # fmt: skip
    """qa_2: RULER-HotpotQA's recipe (gold paragraphs among distractors drawn from the whole split, the
    padder of :mod:`memrl.data.hotpotqa`) sized per question so that the whole prompt fits."""
    from memrl.data.documents import Document, DocumentPadder, render_context

    if not examples:
        raise DataError(
            "qa_2 is built from HotpotQA: give the dev file (--hotpotqa hotpot_dev_distractor_v1.json)"
        )
    pool: dict[str, str] = {}
    for ex in examples:
        for title, text in ex.paragraphs():
            pool.setdefault(title, text)
    padder = DocumentPadder(pool, count_tokens=count_tokens)
    items = []
    for index, ex in enumerate(examples[:count]):
        own = dict(ex.paragraphs())
        gold = [Document(t, own[t]) for t in ex.gold_titles if t in own]
        # the template around the context, the answer budget, and a few tokens where the pieces join
        room = target - count_tokens(prompt_of(spec, "", ex.question)) - spec.tokens_to_generate - 8
        docs = padder.pad(gold, target_tokens=max(1, room), seed=f"{seed}:{ex.id}")
        context = render_context(docs)
        tokens = count_tokens(prompt_of(spec, context, ex.question))
        items.append(make_item(spec, label, target, index, context, ex.question, (ex.answer,), tokens,
                               question_id=ex.id, num_docs=len(docs)))  # fmt: skip
    return items


# ---------------------------------------------------------------------------------------------- files
def write_items(items: Sequence[SyntheticItem], path: str | Path) -> str:
    """Write ``items`` as JSON lines and their sha256 to ``PATH.sha256`` (``"<hex>  <name>"``); the hex."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    blob = "".join(json.dumps(i.to_dict(), ensure_ascii=False, sort_keys=True) + "\n" for i in items).encode()
    digest = hashlib.sha256(blob).hexdigest()
    path.write_bytes(blob)
    path.with_name(path.name + ".sha256").write_text(f"{digest}  {path.name}\n")
    return digest


def read_items(path: str | Path, *, verify: bool = True) -> list[SyntheticItem]:
    """Read a file :func:`write_items` wrote; with ``verify`` its sha256 must match the recorded one."""
    path = Path(path)
    blob = path.read_bytes()
    if verify:
        recorded = path.with_name(path.name + ".sha256")
        if not recorded.is_file():
            raise DataError(f"{path}: no {recorded.name} beside it (write the file with write_items)")
        want = recorded.read_text().split()[0]
        got = hashlib.sha256(blob).hexdigest()
        if got != want:
            raise DataError(f"{path}: sha256 {got} does not match the recorded {want}; regenerate it")
    items = []
    for n, line in enumerate(blob.decode().splitlines(), 1):
        if not line.strip():
            continue
        try:
            items.append(SyntheticItem.from_dict(json.loads(line)))
        except (ValueError, TypeError, KeyError) as e:  # a missing or unknown field, or not JSON
            raise DataError(
                f"{path}: line {n} is not a generated RULER item ({type(e).__name__}: {e})"
            ) from e
    return items


def synthetic_conversations(path: str | Path) -> Any:
    """Generated items as documents conversations (one question each; ``load_dataset("ruler-synthetic",
    PATH)``): ``PATH`` is a file :func:`write_items` wrote (``memrl eval ruler``'s ``OUTPUT/data/*.jsonl``,
    ``memrl data prepare --dataset ruler-synthetic``'s ``OUTPUT.d/*.jsonl``) or a folder of them, each read
    with its sha256 checked. The question is the task's instruction and query (what MemAgent is asked), the
    context is the document; the item's task is the question's category, its metric and length are in the
    conversation's metadata (``ruler_task``, ``ruler_metric``, ``ruler_length``)."""
    from memrl.data.documents import Document, document_conversation
    from memrl.data.types import LoadReport, LoadResult

    path = Path(path)
    files = sorted(path.glob("*.jsonl")) if path.is_dir() else [path]
    if not files:
        raise DataError(f"{path}: no generated RULER items (*.jsonl) in this folder")
    report = LoadReport(source=str(path))
    convs = []
    for f in files:
        for item in read_items(f):
            meta = {"ruler_task": item.task, "ruler_metric": item.metric, "ruler_length": item.length,
                    "target_tokens": item.target_tokens, "file": f.name}  # fmt: skip
            convs.append(document_conversation(item.id, item.question, item.answers, [Document(item.task, item.context)],
                                               source="ruler-synthetic", category=item.task, context=item.context,
                                               metadata=meta))  # fmt: skip
            report.categories[item.task] += 1
    report.stats["files"] = len(files)
    report.stats["ruler_questions"] = len(convs)
    return LoadResult(convs, report)
