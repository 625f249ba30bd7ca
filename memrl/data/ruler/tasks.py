"""The definitions RULER's synthetic tasks share: each task's template and metric (:data:`TASKS`), one
generated item (:class:`SyntheticItem`), the word lists keys are drawn from (:class:`WordLists`), and the
search that sizes a haystack to a target length (:func:`fit`). Generation: :mod:`memrl.data.ruler.synthetic`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from memrl.errors import ConfigError

__all__ = [
    "NOISE",
    "RULER_TASKS",
    "TASKS",
    "SyntheticItem",
    "TaskSpec",
    "TokenCounter",
    "WordLists",
    "fit",
    "make_item",
    "prompt_of",
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
    fill = {
        "query": query,
        "num_v": len(answers),
        **{k: v for k, v in metadata.items() if k.startswith("type_v")},
    }
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
