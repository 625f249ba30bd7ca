"""Deterministic ways to cut a memory's text into parts, for ``split_memory`` when the model writes none.

- ``sentence``: sentence boundaries (., !, ? followed by space and a capital/digit, or new lines);
- ``speaker``: runs of lines that start with the same ``Name:`` prefix;
- ``date``: segments that start with a date (``2023-05-08``, ``8 May 2023``, ``May 8, 2023``).

Each returns the parts in order; fewer than two parts means the text cannot be split that way.
``limit_parts`` joins neighbours so that at most ``max_parts`` remain, keeping the text whole.
"""

from __future__ import annotations

import re

_MONTHS = (
    r"(?:Jan(?:uary)?|Feb(?:ruary)?|Mar(?:ch)?|Apr(?:il)?|May|Jun(?:e)?|Jul(?:y)?|Aug(?:ust)?|"
    r"Sep(?:t(?:ember)?)?|Oct(?:ober)?|Nov(?:ember)?|Dec(?:ember)?)"
)
DATE = re.compile(
    rf"\b(?:\d{{4}}-\d{{2}}-\d{{2}}|\d{{1,2}} {_MONTHS},? \d{{4}}|{_MONTHS} \d{{1,2}},? \d{{4}})\b",
    re.IGNORECASE,
)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'])|\n+")
_SPEAKER = re.compile(r"^\s*([A-Z][\w .'-]{0,40}):\s")


def by_sentence(text: str) -> list[str]:
    return [p.strip() for p in _SENTENCE_END.split(text) if p and p.strip()]


def by_speaker(text: str) -> list[str]:
    parts: list[tuple[str | None, list[str]]] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        m = _SPEAKER.match(line)
        who = m.group(1) if m else None
        if parts and (who is None or who == parts[-1][0]):
            parts[-1][1].append(line.strip())
        else:
            parts.append((who, [line.strip()]))
    return ["\n".join(lines) for _, lines in parts]


def by_date(text: str) -> list[str]:
    starts = [m.start() for m in DATE.finditer(text)]
    if not starts:
        return [text.strip()] if text.strip() else []
    # A segment begins at the start of the line/sentence holding each date.
    cuts = []
    for s in starts:
        back = max(text.rfind("\n", 0, s), text.rfind(". ", 0, s), text.rfind("; ", 0, s))
        cuts.append(0 if back < 0 else back + 1)
    cuts = sorted(set([0, *cuts]))
    bounds = [*cuts, len(text)]
    return [
        text[a:b].strip(" \n;") for a, b in zip(bounds, bounds[1:], strict=False) if text[a:b].strip(" \n;.")
    ]


SPLITTERS = {"sentence": by_sentence, "speaker": by_speaker, "date": by_date}


def limit_parts(parts: list[str], max_parts: int, sep: str = " ") -> list[str]:
    """Join consecutive parts into ``max_parts`` groups of near-equal count, in order."""
    if len(parts) <= max_parts:
        return parts
    size, extra = divmod(len(parts), max_parts)
    out, i = [], 0
    for g in range(max_parts):
        n = size + (1 if g < extra else 0)
        out.append(sep.join(parts[i : i + n]))
        i += n
    return out


_WORD = re.compile(r"\w+")


def lost_words(text: str, parts: list[str]) -> list[str]:
    """The words of ``text`` (case-folded, in order of appearance, each once) that no part contains: what a
    split written by a model would silently drop. Empty when the parts keep all of it."""
    kept = {w.casefold() for p in parts for w in _WORD.findall(p)}
    return list(dict.fromkeys(w for w in (m.casefold() for m in _WORD.findall(text)) if w not in kept))
