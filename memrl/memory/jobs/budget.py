"""The destruction budget: how much of a namespace one agent job may take away, measured on its diff.

A delete count protected nothing a model could not reach another way: rewriting every memory to one
character, or merging half of them into one line, emptied a namespace as surely as deleting it. So a job's
events (:func:`memrl.memory.jobs.changes.diff`) are measured by what they take away from the namespace's
content, whatever the operation:

- the unit is the **word character**: the letters and digits of a text's words (``\\w+``, case-folded), so
  spacing, punctuation and reordering cost nothing and a rewrite to other words costs what it removed;
- the namespace's **content** is the word characters of its live memories and its core memory when the job
  started (the job's :class:`~memrl.memory.jobs.changes.Base`);
- a **deleted** memory takes away all of its word characters (a deletion counts whole);
- a memory **merged away** (deleted by a MERGE) or **split** takes away its words that no text the job wrote
  (an added or changed memory, core memory included) carries: merging duplicates costs nothing, merging into
  a one-line summary costs what the summary dropped;
- an **updated** memory, and core memory, take away the words of the old text that the new text no longer has
  (as a multiset: "tea tea" to "tea" removes one "tea");
- what a job adds never pays for what it removes.

The job's **share** is what it takes away over the namespace's content. It may take away at most
``budget`` of it, and always one memory's worth (the longest memory of the namespace: a job may always
delete or rewrite one memory, as the delete count allowed one deletion); past that the job fails before
its commit, with the figure in its events and nothing written, unless the request allows it
(``allow_mass_delete``). A dry run reports the same figure (``stats.destruction``).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import asdict, dataclass
from typing import Any

from memrl.errors import ValidationError
from memrl.memory.store.history import CORE_ID

_WORD = re.compile(r"\w+")
#: Operations whose removed memories live on in the texts the job wrote.
_CARRIED = frozenset({"MERGE", "SPLIT"})


def words(text: str | None) -> Counter[str]:
    """The case-folded words of ``text`` with their counts."""
    return Counter(w.casefold() for w in _WORD.findall(text or ""))


def weight(counts: Counter[str]) -> int:
    """Word characters of a multiset of words."""
    return sum(len(w) * n for w, n in counts.items())


def _chars(text: str | None) -> int:
    """Word characters of ``text`` (as ``weight(words(text))``, without counting)."""
    return sum(len(w) for w in _WORD.findall(text or ""))


@dataclass(frozen=True)
class Destruction:
    """What a job takes away from its namespace (see the module docstring); ``as_dict`` is ``stats.destruction``."""

    removed: int  # word characters taken away
    content: int  # word characters of the namespace when the job started
    allowance: int  # the most it may take away: max(budget * content, the longest memory)
    budget: float
    deleted: int  # memories deleted (merged away and split included)
    rewritten: int  # memories (core included) that lost words to an update

    @property
    def share(self) -> float:
        return self.removed / self.content if self.content else 0.0

    @property
    def over(self) -> bool:
        return self.removed > self.allowance

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "share": round(self.share, 4), "over_budget": self.over}

    def reason(self) -> str:
        return (
            f"the job would take away {self.share:.0%} of the namespace's content ({self.removed} of "
            f"{self.content} word characters: {self.deleted} memories deleted or merged away, {self.rewritten} "
            f"rewritten), more than the destruction budget of {self.budget:.0%} ({self.allowance}); nothing was "
            "applied. Resend with allow_mass_delete=true to allow it"
        )


def measure(events: list[dict[str, Any]], base: Any, budget: float) -> Destruction:
    """What ``events`` (a job's diff) take away from ``base`` (the namespace as the job found it)."""
    sizes = [_chars(it.content) for it in base.items.values()]
    content = sum(sizes) + _chars(base.core)
    written: Counter[str] | None = None  # the words of every text the job wrote, built when first needed
    removed = deleted = rewritten = 0
    for e in events:
        before, after = e.get("before"), e.get("after")
        if before is None:
            continue
        if after is None and e["id"] != CORE_ID:
            deleted += 1
            if e.get("op") not in _CARRIED:
                removed += _chars(before)
                continue
            if written is None:
                written = Counter()
                for w in (x["after"] for x in events if x.get("after") is not None):
                    for word, n in words(w).items():
                        if n > written[word]:
                            written[word] = n
            lost = words(before) - written
        else:
            lost = words(before) - words(after)
            rewritten += bool(lost)
        removed += weight(lost)
    allowance = max(int(budget * content), max(sizes, default=0))
    return Destruction(removed, content, allowance, budget, deleted, rewritten)


def check(destruction: Destruction, allowed: bool) -> None:
    """Refuse a job over its budget unless ``allowed`` (:class:`ValidationError` naming ``allow_mass_delete``)."""
    if destruction.over and not allowed:
        raise ValidationError(destruction.reason(), field="allow_mass_delete")
