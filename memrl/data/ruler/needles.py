"""RULER's needle-in-a-haystack subsets (niah_single_1-3, multikey_1-3, multivalue, multiquery).

A needle is the sentence ``One of the special magic {numbers|words|uuids} for {key} is: {value}.``; keys are
adjective-noun words (uuids for multikey_3), values 7-digit numbers, words or uuid4s. The haystack is the
noise sentence repeated, Paul Graham's essays (needles go in between sentences), or other needles with other
keys (multikey_2/3). Each needle sits at a depth drawn from 40 evenly spaced points in 0-100% of the haystack
(recorded in ``metadata["depths"]``). Called through :func:`memrl.data.ruler.synthetic.generate`.
"""

from __future__ import annotations

import dataclasses
import random
import re
import uuid
from collections.abc import Callable

from memrl.data.ruler.tasks import NOISE, SyntheticItem, TaskSpec, WordLists, fit, make_item, prompt_of
from memrl.errors import DataError

__all__ = ["DEPTHS", "generate_niah", "insert_at_depths", "needle"]

#: The 40 evenly spaced depths (percent of the haystack) a needle may be placed at, as RULER's.
DEPTHS: tuple[int, ...] = tuple(round(100 * i / 39) for i in range(40))
_SENTENCE = re.compile(r"(?<=[.!?])\s+")


def needle(type_v: str, key: str, value: str) -> str:
    return f"One of the special magic {type_v} for {key} is: {value}."


def _value(kind: str, rng: random.Random, words: WordLists) -> str:
    if kind == "numbers":
        return str(rng.randint(1_000_000, 9_999_999))
    if kind == "uuids":
        return str(uuid.UUID(int=rng.getrandbits(128), version=4))
    return words.key(rng)


def _distinct(draw: Callable[[], str], n: int, avoid: set[str]) -> list[str]:
    """``n`` new draws, none in ``avoid`` (which grows); a :class:`DataError` when the lists run dry."""
    out: list[str] = []
    misses = 0
    while len(out) < n:
        x = draw()
        if x not in avoid:
            avoid.add(x)
            out.append(x)
            misses = 0
        else:
            misses += 1
            if misses > 10_000:
                raise DataError(f"only {len(avoid)} distinct keys could be drawn: the word lists are too small "
                                "for this length (RULER's come from wonderwords)")  # fmt: skip
    return out


def insert_at_depths(units: list[str], needles: list[str], depths: list[int]) -> list[str]:
    """``units`` with each needle inserted before unit ``round(len(units) * depth / 100)``."""
    out = list(units)
    placed = sorted(zip((round(len(units) * d / 100) for d in depths), range(len(needles)), strict=True),
                    reverse=True)  # fmt: skip
    for pos, i in placed:
        out.insert(pos, needles[i])
    return out


def _singular(spec: TaskSpec) -> TaskSpec:
    """RULER's wording when one value is asked for ("A special magic number is hidden ...")."""

    def one(s: str) -> str:
        s = s.replace("Some special magic", "A special magic").replace("are all", "is")
        return s.replace(" are", " is").replace("{type_v}", "{type_v1}")

    return dataclasses.replace(spec, intro=one(spec.intro), query=one(spec.query),
                               answer_prefix=one(spec.answer_prefix))  # fmt: skip


def generate_niah(spec: TaskSpec, label: str, target: int, count: int, seed: int,
                  count_tokens: Callable[[str], int], words: WordLists,
                  essays: str | None) -> list[SyntheticItem]:  # fmt: skip
    o = spec.options
    if o["num_q"] * o["num_v"] == 1:
        spec = _singular(spec)
    type_v, type_v1 = o["type_v"], o["type_v"][:-1]
    essay_words = essays.split() if essays else []
    items = []
    for index in range(count):
        rng = random.Random(f"niah:{spec.name}:{seed}:{label}:{index}")
        key_of = (lambda r=rng: str(uuid.UUID(int=r.getrandbits(128), version=4))) if o["type_k"] == "uuids" \
            else (lambda r=rng: words.key(r))  # fmt: skip
        used: set[str] = set()
        keys = _distinct(key_of, o["num_k"], used)
        values = [_distinct(lambda r=rng: _value(type_v, r, words), o["num_v"], set()) for _ in keys]
        needles = [needle(type_v, k, v) for k, vs in zip(keys, values, strict=True) for v in vs]
        depths = rng.sample(DEPTHS, len(needles))
        asked = sorted(rng.sample(range(o["num_k"]), o["num_q"]))
        query = (
            ", ".join(keys[i] for i in asked[:-1]) + (", and " if len(asked) > 1 else "") + keys[asked[-1]]
        )
        answers = [v for i in asked for v in values[i]]
        hay_rng = random.Random(f"niah-hay:{spec.name}:{seed}:{label}:{index}")
        distractors: list[str] = []  # grown on demand, prefix-stable: build(n) depends on n only

        def units(n: int, hay_rng: random.Random = hay_rng, distractors: list[str] = distractors,
                  used: set[str] = used) -> list[str]:  # fmt: skip
            if o["haystack"] == "noise":
                return [NOISE] * n
            if o["haystack"] == "essay":
                take = [essay_words[i % len(essay_words)] for i in range(n)]
                return _SENTENCE.split(" ".join(take))
            draw_k = (lambda: str(uuid.UUID(int=hay_rng.getrandbits(128), version=4))) \
                if o["type_k"] == "uuids" else (lambda: words.key(hay_rng))  # fmt: skip
            while len(distractors) < n:
                (k,) = _distinct(draw_k, 1, used)
                distractors.append(needle(type_v, k, _value(type_v, hay_rng, words)))
            return distractors[:n]

        def build(n: int, units: Callable[[int], list[str]] = units, needles: list[str] = needles,
                  depths: list[int] = depths, query: str = query) -> str:  # fmt: skip
            return prompt_of(spec, _context(units(n), needles, depths), query, type_v=type_v, type_v1=type_v1)

        start = 64 if o["haystack"] == "essay" else 8
        n, tokens = fit(build, spec, target, count_tokens, high=start)
        context = _context(units(n), needles, depths)
        items.append(make_item(spec, label, target, index, context, query, answers, tokens,
                               type_v=type_v, type_v1=type_v1, haystack=o["haystack"], haystack_units=n,
                               keys=keys, depths=depths, needles=needles))  # fmt: skip
    return items


def _context(units: list[str], needles: list[str], depths: list[int]) -> str:
    return " ".join(insert_at_depths(units, needles, depths))
