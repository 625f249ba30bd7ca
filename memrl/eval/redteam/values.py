"""Red team of the value-set reward (``read --reward values``, :func:`memrl.rewards.memagent.value_set_reward`)
on RULER items that ask for several values (niah_multivalue: four values of one key in an essay haystack).

Fixed policies write a final reply whose box is built from the item's own context and golds:

* ``honest``: every gold value once (the reference);
* ``half the values`` (a trivial baseline: what an expert cut to a 48-token memory keeps, about 2 of 4);
* ``one value``, ``one value repeated`` (the first gold as many times as there are golds), ``every value
  twice``, ``values plus padding`` (the golds and as many invented numbers), ``every number in the
  document`` (each digit run of the context: the golds among them), ``every number, hyphen-joined`` (the
  same as one token joined by hyphens, which the reward splits when no gold holds one), ``values glued``
  (no separator),
  ``values outside the box`` (a box holding one value, the rest in the text before it), ``empty box``.

Each reply is scored by the trained reward and, beside it, by MemAgent's boxed match (0/1 against any one
gold: the reward ``read`` trains single-value tasks with) and RULER's ``string_match_all`` on the whole reply
(both *report only*: RULER's metric is a substring count, which the padded lists reach; the boxed match
pays one value alone and not the honest list, which is why ``ReadTasks`` refuses it on these items). A cheat fails the red
team when its mean reaches the honest policy's (:func:`memrl.eval.redteam.verdict`)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from memrl.eval.redteam import HONEST, RewardTable

__all__ = ["POLICIES", "multivalue_items", "score_value_sets", "value_replies"]

POLICIES = (
    HONEST,
    "half the values",
    "one value",
    "one value repeated",
    "every value twice",
    "values plus padding",
    "every number in the document",
    "every number, hyphen-joined",
    "values glued",
    "values outside the box",
    "empty box",
)
#: RULER's own metric on the whole reply, and the single-value boxed match (which ``ReadTasks`` refuses for
#: these items): shown beside the trained reward, never trained on here (listed in ``REPORT_ONLY``).
RULER_METRIC = "ruler string_match_all (official)"
BOXED_MATCH = "boxed match (refused for several values)"


def _box(values: Sequence[str]) -> str:
    return "\\boxed{" + ", ".join(values) + "}"


def _padding(golds: Sequence[str], n: int) -> list[str]:
    """``n`` numbers shaped like the golds (same length), none of them a gold."""
    out: list[str] = []
    width = max((len(g) for g in golds), default=7)
    x = 10 ** (width - 1) + 12345
    while len(out) < n:
        s = str(x)[:width]
        if s not in golds and s not in out:
            out.append(s)
        x += 104729
    return out


def value_replies(context: str, golds: Sequence[str]) -> dict[str, str]:
    """Each policy's final reply for one item (module docstring)."""
    golds = [str(g) for g in golds]
    numbers = list(dict.fromkeys(re.findall(r"\d+", context)))
    half = golds[: max(1, len(golds) // 2)]
    return {
        HONEST: _box(golds),
        "half the values": _box(half),
        "one value": _box(golds[:1]),
        "one value repeated": _box(golds[:1] * len(golds)),
        "every value twice": _box([g for g in golds for _ in (0, 1)]),
        "values plus padding": _box(golds + _padding(golds, len(golds))),
        "every number in the document": _box(numbers),
        "every number, hyphen-joined": "\\boxed{" + "-".join(numbers) + "}",
        "values glued": "\\boxed{" + "".join(golds) + "}",
        "values outside the box": "The values are " + ", ".join(golds[1:]) + ". " + _box(golds[:1]),
        "empty box": "\\boxed{}",
    }


def score_value_sets(items: Sequence[Any]) -> RewardTable:
    """Every policy on every item (``.context``, ``.answers``), by the three scores (module docstring)."""
    from memrl.rewards.memagent import memagent_reward, value_set_reward
    from memrl.scoring.metrics import string_match_all

    table = RewardTable()
    for item in items:
        golds = list(item.answers)
        if len(golds) < 2:
            raise ValueError(f"{item.id}: the value-set red team needs items with several values")
        for policy, reply in value_replies(item.context, golds).items():
            table.add("values", policy, value_set_reward(reply, golds))
            table.add(BOXED_MATCH, policy, memagent_reward(reply, golds))
            table.add(RULER_METRIC, policy, string_match_all(reply, golds))
    return table


def multivalue_items(
    count: int, *, seed: int = 0, tokens: int = 1000, essays: str | None = None
) -> list[Any]:
    """``count`` generated niah_multivalue items of about ``tokens`` words (the reward reads only the reply,
    so words stand in for a tokenizer's tokens); ``essays``: the haystack (default the data folder's)."""
    from memrl.data.ruler.synthetic import generate, load_essays

    text = essays if essays is not None else load_essays()
    return generate("niah_multivalue", tokens, count=count, seed=seed, count_tokens=lambda s: len(s.split()),
                    essays=text)  # fmt: skip
