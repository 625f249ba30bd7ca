"""RULER in memrl: length sweeps over real documents and RULER's synthetic tasks.

- :mod:`~memrl.data.ruler.lengths`: MemAgent's length sweeps (RULER-HotpotQA, RULER-LoCoMo): the same
  questions at several context lengths; its API is importable from here (``from memrl.data.ruler import
  parse_lengths``).
- :mod:`~memrl.data.ruler.synthetic`: RULER's synthetic tasks generated offline (``memrl eval ruler``), from
  the task table of :mod:`~memrl.data.ruler.tasks`, the needle tasks of :mod:`~memrl.data.ruler.needles` and
  the aggregation tasks of :mod:`~memrl.data.ruler.aggregate`.
"""

from memrl.data.ruler.lengths import (
    Length,
    eval_file_label,
    length_label,
    locomo_documents,
    parse_lengths,
    ruler_hotpotqa_conversations,
    ruler_locomo_conversations,
    ruler_question_conversations,
)

__all__ = [
    "Length",
    "eval_file_label",
    "length_label",
    "locomo_documents",
    "parse_lengths",
    "ruler_hotpotqa_conversations",
    "ruler_locomo_conversations",
    "ruler_question_conversations",
]
