"""The write check: a memory agent's write is refused before it is committed when it is junk.

A small model asked to remember "I moved to Lisbon last month" wrote ``MADE_MATHEMATICAL_MEMORY``,
``MADE_MADE_MADE_...``, "I'm a Portuguese person." six times, "123" and "2023-05-22" (issue 56). Each is
caught by one of four rules, applied to the text an agent writes (an item's content, the core block):

- ``no words``: the text has no word at all (only numbers, dates, punctuation);
- ``run``: one token repeated :attr:`WriteCheck.max_run` times in a row (``MADE_MADE_MADE``);
- ``loop``: a text of at least :attr:`WriteCheck.loop_min_tokens` tokens whose word 3-grams are mostly
  repeats (share of distinct 3-grams below :attr:`WriteCheck.min_distinct`): a sentence said over and over;
- ``not grounded``: under :attr:`WriteCheck.min_grounded` of its content words (stemmed, no stopwords,
  no month or weekday names) occur in what the job was given (the conversation, its speakers and date, the
  namespace as the job found it, a document); "no word from the session" when none does.

The thresholds were chosen on LoCoMo's training conversations (``LOCOMO_UPDATE_SPLIT["train"]``): every
write of the annotation expert (:mod:`memrl.agents.membuilder.experts`: the observations and events LoCoMo's
annotators wrote, as MemBuilder actions) passes with a margin, and every junk write above is refused
(tests/test_write_check.py holds the figures). Measure again with::

    python -m memrl.agents.jobs.write_check /path/to/locomo10.json

:func:`check_events` applies it to a job's changes (:mod:`memrl.agents.jobs`): a refused change is not
committed; it becomes a ``refused`` event with the rule's reason and is counted in ``stats["refused"]``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from memrl.config import option
from memrl.memory.analysis import STOPWORDS, tokens

__all__ = ["JUNK", "JUNK_SOURCE", "WriteCheck", "check_events", "check_write", "grounded_share", "job_source"]

_CALENDAR = frozenset(
    "january february march april may june july august september october november december jan feb mar apr "
    "jun jul aug sep sept oct nov dec monday tuesday wednesday thursday friday saturday sunday am pm".split()
)
_RAW = re.compile(r"[^\W_]+")
#: The writes the offline 135M model made of one sentence (issue 56), and that sentence.
JUNK_SOURCE = "user: I moved to Lisbon last month"
JUNK = (
    "MADE_MATHEMATICAL_MEMORY",
    "MADE_MADE_MADE_MADE_MADE_MADE_MADE_MADE",
    " ".join(["I'm a Portuguese person."] * 6),
    "123",
    "2023-05-22",
)


@dataclass(frozen=True)
class WriteCheck:
    """The thresholds of :func:`check_write` (chosen on LoCoMo's training conversations)."""

    max_run: int = option(3, "refuse a text repeating one token this many times in a row")
    loop_min_tokens: int = option(12, "texts of at least this many tokens are checked for repetition loops")
    min_distinct: float = option(0.5, "refuse a long text whose share of distinct word 3-grams is below this")
    min_grounded: float = option(
        0.15, "refuse a text with under this share of its content words in the source"
    )


def _content(text: str) -> list[str]:
    words = [w for w in _RAW.findall(text.lower()) if any(c.isalpha() for c in w)]
    keep = [w for w in words if w not in STOPWORDS and w not in _CALENDAR and len(w) > 1]
    return list(dict.fromkeys(tokens(" ".join(keep))))


def grounded_share(text: str, source: str | set[str]) -> float | None:
    """The share of ``text``'s content words that occur in ``source`` (a text or its :func:`tokens`);
    None when the text has no content word."""
    words = _content(text)
    if not words:
        return None
    known = source if isinstance(source, set) else set(tokens(source))
    return sum(w in known for w in words) / len(words)


def _longest_run(toks: list[str]) -> int:
    best = run = 0
    prev = None
    for t in toks:
        run = run + 1 if t == prev else 1
        prev, best = t, max(best, run)
    return best


def _distinct_trigrams(toks: list[str]) -> float:
    grams = list(zip(toks, toks[1:], toks[2:], strict=False))
    return len(set(grams)) / len(grams) if grams else 1.0


def check_write(text: str, source: str | set[str], config: WriteCheck | None = None) -> str | None:
    """Why ``text`` must not be stored (see the module docstring), or None when it may be; ``source`` is
    what the job was given (a text, or its :func:`tokens` as a set, to check many writes against one)."""
    cfg = config or WriteCheck()
    raw = _RAW.findall(text.lower())
    if not any(c.isalpha() for w in raw for c in w):
        return "no words: only numbers or punctuation"
    run = _longest_run(raw)
    if run >= cfg.max_run:
        return f"degenerate: one token repeated {run} times in a row"
    if len(raw) >= cfg.loop_min_tokens:
        share = _distinct_trigrams(raw)
        if share < cfg.min_distinct:
            return f"degenerate: a repetition loop ({share:.0%} of its word 3-grams distinct)"
    grounded = grounded_share(text, source)
    if grounded is not None and grounded < cfg.min_grounded:
        if grounded == 0:
            return "not grounded: no word from the session"
        return (
            f"not grounded: {grounded:.0%} of its words occur in the session (under {cfg.min_grounded:.0%})"
        )
    return None


def job_source(request: dict[str, Any], known: Iterable[str] = ()) -> str:
    """The text a job's writes must be grounded in: its messages (speakers, content, times), its session
    time, document and question, and ``known`` (the namespace's memories as the job found them)."""
    parts = [str(request.get(k) or "") for k in ("session_time", "document", "question", "title")]
    for m in request.get("messages") or []:
        parts += [str(m.get(k) or "") for k in ("speaker", "name", "role", "timestamp")]
        parts.append(str(m.get("content") or ""))
    parts += list(request.get("speakers") or ())
    return "\n".join([*parts, *known])


def check_events(
    events: list[dict[str, Any]], source: str, config: WriteCheck | None = None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Split a job's change events (:func:`memrl.memory.jobs.diff`) into those to commit and those refused
    (as ``refused`` events carrying the reason). A deletion is refused only with the merge it is part of."""
    known = set(tokens(source))
    keep, refused = [], []
    for e in events:
        text = e.get("after")
        if text is None or not text.strip():  # a deletion, or an emptied core block
            keep.append(e)
            continue
        # an update is checked on what it adds: the text it replaced is grounded already
        reason = check_write(text, known | set(tokens(e.get("before") or "")), config)
        if reason is None:
            keep.append(e)
        else:
            refused.append({**e, "event": "refused", "reason": f"write check: {reason}"})
    if any(
        e.get("op") == "MERGE" for e in refused
    ):  # a merge is whole: its deletions go with its refused text
        parts = [e for e in keep if e.get("op") == "MERGE"]
        keep = [e for e in keep if e.get("op") != "MERGE"]
        refused += [
            {**e, "event": "refused", "reason": "write check: part of a refused merge"} for e in parts
        ]
    return keep, refused


def _measure(path: str) -> dict[str, Any]:
    """The expert's writes and the issue's junk, checked on LoCoMo's training conversations."""
    from memrl.agents.membuilder.experts import annotation_action
    from memrl.data.catalog import load_dataset
    from memrl.data.splits import LOCOMO_UPDATE_SPLIT, select

    convs = select(load_dataset("locomo", path).records, LOCOMO_UPDATE_SPLIT["train"])
    systems = {t: f"You manage the {t.upper()} memory." for t in ("core", "episodic", "semantic")}
    passed = refused = 0
    reasons: dict[str, int] = {}
    worst: list[tuple[float, str]] = []
    for conv in convs:
        for s in conv.sessions:
            source = "\n".join(
                [s.date_text or "", *conv.speakers]
                + [f"{t.speaker}: {t.text} {t.image_caption or ''}" for t in s.turns]
            )
            known = set(tokens(source))
            prompt = f"Session {s.index} ({s.date_text}):\nCore memory:\n(empty)\n"
            for system in systems.values():
                action = annotation_action(conv, [{"content": system}, {"content": prompt}], max_items=10)
                texts = [action["content"]] if "content" in action else []
                texts += [op["memory"] for op in action.get("operations", [])]
                for text in texts:
                    reason = check_write(text, known)
                    g = grounded_share(text, known)
                    if g is not None:
                        worst.append((g, text))
                    if reason is None:
                        passed += 1
                    else:
                        refused += 1
                        key = reason.split(":")[0]
                        reasons[key] = reasons.get(key, 0) + 1
    worst.sort()
    junk = [check_write(text, JUNK_SOURCE) for text in JUNK]
    return {"conversations": len(convs), "expert_writes": passed + refused, "expert_passed": passed,
            "expert_refused": refused, "refused_by": reasons, "junk": len(junk),
            "junk_refused": sum(r is not None for r in junk),
            "lowest_grounded": [round(g, 3) for g, _ in worst[:5]]}  # fmt: skip


if __name__ == "__main__":
    import json
    import sys

    print(json.dumps(_measure(sys.argv[1])))
