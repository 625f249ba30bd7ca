"""RULER's synthetic tasks (NVIDIA/RULER, Apache-2.0): the out-of-distribution suite MemAgent reports.

Thirteen tasks as RULER's ``scripts/synthetic.yaml`` defines them, less ``qa_1`` (SQuAD is not on these
machines): eight needle-in-a-haystack subsets (:mod:`memrl.data.ruler_needles`), variable tracking, common
and frequent words extraction (:mod:`memrl.data.ruler_aggregate`), and ``qa_2`` (RULER-HotpotQA documents,
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
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

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
    "wonderwords_lists",
    "write_items",
]

TokenCounter = Callable[[str], int]

#: RULER's ``noise`` haystack unit, repeated.
NOISE = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again."


@dataclass(frozen=True)
class TaskSpec:
    """One task: its template (``intro`` + context + ``query``), answer prefix, budget and metric."""

    name: str
    family: str  # niah | vt | cwe | fwe | qa
    intro: str
    query: str
    answer_prefix: str
    tokens_to_generate: int
    metric: str  # string_match_all | string_match_part
    options: dict[str, Any] = field(default_factory=dict)


_NIAH_INTRO = (
    "Some special magic {type_v} are hidden within the following text. Make sure to memorize it. "
    "I will quiz you about the {type_v} afterwards."
)
_NIAH_QUERY = "What are all the special magic {type_v} for {query} mentioned in the provided text?"
_NIAH_PREFIX = " The special magic {type_v} for {query} mentioned in the provided text are"


def _niah(name: str, haystack: str, key: str = "words", value: str = "numbers", k: int = 1, v: int = 1,
          q: int = 1) -> TaskSpec:  # fmt: skip
    opts = {"haystack": haystack, "type_k": key, "type_v": value, "num_k": k, "num_v": v, "num_q": q}
    return TaskSpec(name, "niah", _NIAH_INTRO, _NIAH_QUERY, _NIAH_PREFIX, 128, "string_match_all", opts)


_TASK_LIST = [
    _niah("niah_single_1", "noise"),
    _niah("niah_single_2", "essay"),
    _niah("niah_single_3", "essay", value="uuids"),
    _niah("niah_multikey_1", "essay", k=4),
    _niah("niah_multikey_2", "needle"),
    _niah("niah_multikey_3", "needle", key="uuids", value="uuids"),
    _niah("niah_multivalue", "essay", v=4),
    _niah("niah_multiquery", "essay", k=4, q=4),
    TaskSpec(
        "vt", "vt",
        "Memorize and track the chain(s) of variable assignment hidden in the following text.",
        "Question: Find all variables that are assigned the value {query} in the text above.",
        " Answer: According to the chain(s) of variable assignment in the text above, {num_v} variables are "
        "assigned the value {query}, they are: ",
        30, "string_match_all", {"num_chains": 1, "num_hops": 4},
    ),
    TaskSpec(
        "cwe", "cwe",
        "Below is a numbered list of words. In these words, some appear more often than others. Memorize "
        "the ones that appear most often.",
        "Question: What are the 10 most common words in the above list?",
        " Answer: The top 10 words that appear most often in the list are:",
        120, "string_match_all", {"num_cw": 10, "freq_cw": 30, "freq_ucw": 3},
    ),
    TaskSpec(
        "fwe", "fwe",
        "Read the following coded text and track the frequency of each coded word. Find the three most "
        "frequently appeared coded words.",
        "Question: Do not provide any explanation. Please ignore the dots '....'. What are the three most "
        "frequently appeared words in the above coded text?",
        " Answer: According to the coded text above, the three most frequently appeared words are:",
        50, "string_match_all", {"alpha": 2.0, "coded_wordlen": 6},
    ),
    TaskSpec(
        "qa_2", "qa",
        "Answer the question based on the given documents. Only give me the answer and do not output any "
        "other words.\n\nThe following are given documents.",
        "Answer the question based on the given documents. Only give me the answer and do not output any "
        "other words.\n\nQuestion: {query}",
        " Answer:", 32, "string_match_part",
    ),
]  # fmt: skip
TASKS: dict[str, TaskSpec] = {t.name: t for t in _TASK_LIST}
#: Every task name, in RULER's order.
RULER_TASKS: tuple[str, ...] = tuple(TASKS)


@dataclass(frozen=True)
class SyntheticItem:
    """One generated example: the prompt's parts, its gold answers and how it is scored."""

    id: str
    task: str
    length: str  # the target's label ("4k")
    target_tokens: int
    index: int
    intro: str
    context: str
    query: str
    answer_prefix: str
    answers: tuple[str, ...]
    metric: str
    tokens_to_generate: int
    prompt_tokens: int
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def prompt(self) -> str:
        """The whole input a full-context reader gets (RULER's template: intro, context, query)."""
        return f"{self.intro}\n\n{self.context}\n\n{self.query}"

    @property
    def question(self) -> str:
        """The task without its context, for a reader that reads the context in chunks (MemAgent)."""
        return f"{self.intro} {self.query}"

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "answers": list(self.answers)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SyntheticItem:
        return cls(**{**d, "answers": tuple(d["answers"])})


# ---------------------------------------------------------------------------------------------- words
@dataclass(frozen=True)
class WordLists:
    """The adjectives, nouns and verbs keys and word lists are made of (sorted, without repeats)."""

    adjectives: tuple[str, ...]
    nouns: tuple[str, ...]
    verbs: tuple[str, ...] = ()

    def key(self, rng: Any) -> str:
        """One of RULER's needle keys, an ``adjective-noun`` pair, drawn uniformly (without listing all
        pairs, as RULER does: millions of strings)."""
        return f"{rng.choice(self.adjectives)}-{rng.choice(self.nouns)}"

    def words(self) -> list[str]:
        """cwe's vocabulary: nouns, adjectives and verbs, sorted, without repeats."""
        return sorted({*self.nouns, *self.adjectives, *self.verbs})


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
    return WordLists(clean(read("adjectivelist.txt")), clean(read("nounlist.txt")), clean(read("verblist.txt")))


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


# ---------------------------------------------------------------------------------------------- length
def fit(build: Callable[[int], str], spec: TaskSpec, target: int, count_tokens: TokenCounter,
        *, low: int = 1, high: int = 64) -> tuple[int, int]:  # fmt: skip
    """The largest haystack size ``n`` whose prompt ``build(n)`` plus the answer budget fits ``target``
    tokens, found by doubling then bisection (RULER's search); returns ``(n, prompt tokens)``.

    A :class:`ConfigError` says so when even ``low`` units do not fit."""
    budget = target - spec.tokens_to_generate
    first = count_tokens(build(low))
    if first > budget:
        raise ConfigError(
            f"{spec.name}: a {target}-token target is too short: the smallest prompt has {first} tokens and "
            f"the answer needs {spec.tokens_to_generate}; use a longer length"
        )
    best = (low, first)
    while True:  # grow until past the budget
        n = count_tokens(build(high))
        if n > budget:
            break
        best, low, high = (high, n), high, high * 2
    while high - low > 1:
        mid = (low + high) // 2
        n = count_tokens(build(mid))
        if n <= budget:
            best, low = (mid, n), mid
        else:
            high = mid
    return best


def make_item(spec: TaskSpec, label: str, target: int, index: int, context: str, query: str,
              answers: Sequence[str], tokens: int, **metadata: Any) -> SyntheticItem:  # fmt: skip
    """A :class:`SyntheticItem` with the task's templates filled."""
    fill = {"query": query, "num_v": len(answers), **{k: v for k, v in metadata.items() if k.startswith("type_v")}}
    return SyntheticItem(
        id=f"{spec.name}@{label}#{index}", task=spec.name, length=label, target_tokens=target, index=index,
        intro=spec.intro.format(**fill), context=context, query=spec.query.format(**fill),
        answer_prefix=spec.answer_prefix.format(**fill), answers=tuple(answers), metric=spec.metric,
        tokens_to_generate=spec.tokens_to_generate, prompt_tokens=tokens, metadata=metadata,
    )  # fmt: skip


def prompt_of(spec: TaskSpec, context: str, query: str, **fill: Any) -> str:
    """The prompt an item will have (what :func:`fit` measures)."""
    values = {"query": query, "num_v": 0, **fill}
    return f"{spec.intro.format(**values)}\n\n{context}\n\n{spec.query.format(**values)}"


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
    from memrl.data.ruler import length_label

    if task not in TASKS:
        raise ConfigError(f"unknown RULER task {task!r}; choose from {', '.join(RULER_TASKS)}")
    if count < 1:
        raise ConfigError("count must be at least 1")
    spec = TASKS[task]
    label = label or length_label(target_tokens)
    args = dict(spec=spec, label=label, target=target_tokens, count=count, seed=seed, count_tokens=count_tokens)
    if spec.family == "niah":
        from memrl.data.ruler_needles import generate_niah

        if spec.options["haystack"] == "essay" and not essays:
            raise DataError(f"{task} hides its needles in essays: give the essay text (load_essays())")
        return generate_niah(**args, words=words or wonderwords_lists(), essays=essays)
    if spec.family == "qa":
        return _qa(**args, examples=hotpotqa)
    from memrl.data import ruler_aggregate

    if spec.family == "cwe":
        return ruler_aggregate.generate_cwe(**args, words=words or wonderwords_lists())
    return getattr(ruler_aggregate, f"generate_{spec.family}")(**args)


def _qa(spec: TaskSpec, label: str, target: int, count: int, seed: int, count_tokens: TokenCounter,
        examples: Sequence[Any] | None) -> list[SyntheticItem]:  # fmt: skip
    """qa_2: RULER-HotpotQA documents (gold among distractors) sized so that the whole prompt fits."""
    from memrl.data.hotpotqa import build_ruler_hotpotqa

    if not examples:
        raise DataError("qa_2 is built from HotpotQA: give the dev file (--hotpotqa hotpot_dev_distractor_v1.json)")
    overhead = count_tokens(prompt_of(spec, "", "?" * 40)) + spec.tokens_to_generate
    built = build_ruler_hotpotqa(examples, target_tokens=max(1, target - overhead), num_questions=count,
                                 seed=seed, count_tokens=count_tokens)  # fmt: skip
    return [
        make_item(spec, label, target, i, q.context, q.question, q.answers,
                  count_tokens(prompt_of(spec, q.context, q.question)), question_id=q.id, num_docs=q.num_docs)
        for i, q in enumerate(built)
    ]  # fmt: skip


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
    return [SyntheticItem.from_dict(json.loads(line)) for line in blob.decode().splitlines() if line.strip()]
