"""What a reader reads of a memory: one rule for the answering prompt and for every reward that stands in
for a reader.

A retrieved memory reaches the answering model as one line: its date, when its metadata holds a real one
(:func:`memrl.datetimes.shown_date`, in one canonical form), then the memory's text. Builders may index
more than the reader needs (the raw builder folds neighbouring turns into what is embedded); they keep
the memory itself apart in ``metadata["text"]``, and the reader gets that. The rewards that measure what
a reader could answer (MemUpdate's coverage, ADRPO's character budget) read these same lines, so nothing
a policy stores can reach the reader without being counted, or be counted without reaching it.

    shown_text(item)   # "[1:56 pm on 8 May, 2023] Caroline went to a LGBTQ support group."
"""

from __future__ import annotations

import re

from memrl.datetimes import DATE_KEYS, parse_date, shown_date
from memrl.memory.records.types import MemoryItem

__all__ = ["READER_KEYS", "shown_text"]

#: Metadata keys a reader is shown (``text`` in place of the content, the date keys as the date): a
#: policy that writes metadata through a tool may not set them freely (:mod:`memrl.tools.memupdate`).
READER_KEYS = ("text", *DATE_KEYS)

_DATED = re.compile(r"^\[[^\]]*\d{4}[^\]]*\]")
_DATE_PREFIX = re.compile(
    r"^([^:\[\]]{6,40}?):\s"
)  # "8 May, 2023: Caroline went ..." (MemBuilder's episodes)


def _dated(content: str) -> bool:
    """Whether ``content`` starts with its own date: bracketed (``[8 May 2023] ...``) or as the prefix
    ``8 May, 2023: ...`` that MemBuilder's episodic memories carry."""
    if _DATED.match(content):
        return True
    m = _DATE_PREFIX.match(content)
    return bool(m) and parse_date(m.group(1)) is not None


def shown_text(item: MemoryItem) -> str:
    """The line a reader reads for ``item``: ``[date] text``, the date left out when the text already
    starts with its date (bracketed, or ``8 May, 2023: ...``: builders that write it into the content) or
    the metadata holds none."""
    content = " ".join(str(item.metadata.get("text") or item.content).split())
    date = None if _dated(content) else shown_date(item.metadata)
    return f"[{date}] {content}" if date else content
