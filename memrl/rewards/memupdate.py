"""MemUpdate's reward: how much an edit of the memory database helps answer a question, times its efficiency.

    r = (P_new - P_old) * E                                              (REFERENCE.md section 2)

* ``P`` (:func:`answer_coverage`) = clamp(|answer tokens & memory tokens| / |answer tokens|, 0.1, 1),
  where the memory tokens are those of the memories retrieved for the question, read in rank order up to
  a fixed budget of ``context_chars`` characters (:func:`context_window`, default 600: about the top-5 of
  LoCoMo's observation memory with their dates, the original's unit), each memory as a reader sees it
  (its date first: :func:`memrl.tools.memupdate.reader_text`). Answer tokens that the question itself
  holds do not count (:func:`scorable_tokens`). No LLM involved.
* ``E`` (:func:`efficiency_factor`) = clamp(size * density * change, 0.1, 1.5) with
  size = 1 if N_new <= 100 else max(0.1, 1 - (N_new - 100) / 100),
  density = min(1.2, avg_len_new / max(avg_len_old, 1)) (1 when the old database was empty),
  change = max(0.8, 1 - 0.5 * |N_new - N_old| / max(N_old, 1)); lengths are in characters.

Tokenisation (ours, documented because the original split raw lower-cased text on whitespace, so
``"Paris."`` never matched ``"Paris"``): :func:`memrl.scoring.metrics.normalize_answer` (lower-case, no
punctuation, no a/an/the/and), then split on whitespace, as a set.

**Why a character budget, not the original's top-5 items**: with an item count, a policy raises P without
reading anything by merging the top hits into longer items (25 blind ``merge_memory`` calls earned twice
the reward of the correct fix on LoCoMo conv-26): the answerer simply sees more text. Under the same
character budget before and after, a merge, a split or a duplicate only reorders or displaces text; only
putting the answer where the question finds it raises P.

Failures: the original returned -0.1 whenever anything raised. Here :func:`score_memupdate` returns a
:class:`RewardOutcome` whose ``failure`` says why (e.g. an answer with no scorable token), and no value.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from memrl.rewards.outcome import RewardOutcome
from memrl.scoring.metrics import normalize_answer

__all__ = [
    "answer_coverage",
    "average_length",
    "context_window",
    "scorable_tokens",
    "efficiency_factor",
    "memupdate_reward",
    "score_memupdate",
    "tokens",
]

#: How many retrieved memories the coverage looks at, at most (the character budget decides).
TOP_K = 50
#: Characters of retrieved memory the coverage reads, the same before and after an episode.
CONTEXT_CHARS = 600
#: Database size above which the size factor starts to fall.
MAX_MEMORIES = 100


def _clamp(x: float, low: float, high: float) -> float:
    return max(low, min(high, x))


def tokens(text: object) -> set[str]:
    """The set of normalised word tokens of ``text`` (see the module docstring)."""
    return set(normalize_answer(text).split())


def scorable_tokens(answer: object, question: object = None) -> set[str]:
    """The answer's tokens that the question does not already give away: only these can show that memory
    holds the answer (a memory that copies the question would otherwise "cover" them)."""
    return tokens(answer) - (tokens(question) if question is not None else set())


def answer_coverage(answer: object, retrieved_texts: Iterable[str], *, question: object = None) -> float:
    """P: share of the answer's tokens found in the retrieved memories, clamped to [0.1, 1].

    Pass the texts of the memories retrieved for the question, cut to the reader's budget
    (:func:`context_window`). With ``question``, tokens of the answer that the question holds do not
    count (:func:`scorable_tokens`). Raises ``ValueError`` if no token is left to score (the original
    silently scored an empty answer 0.5).
    """
    wanted = scorable_tokens(answer, question)
    if not wanted:
        raise ValueError(f"answer {answer!r} has no scorable token (none that the question does not hold)")
    found: set[str] = set()
    for text in retrieved_texts:
        found |= tokens(text)
    return _clamp(len(wanted & found) / len(wanted), 0.1, 1.0)


def context_window(texts: Iterable[str], chars: int = CONTEXT_CHARS) -> list[str]:
    """The ranked ``texts`` as a reader with a budget of ``chars`` characters sees them: whole texts in
    order while they fit (a newline between two counts as one character), the next one cut at its last
    word boundary within the budget, nothing after."""
    if chars < 1:
        raise ValueError(f"chars must be >= 1, got {chars}")
    out: list[str] = []
    left = chars
    for text in texts:
        if out:
            left -= 1
        if left <= 0:
            break
        if len(text) <= left:
            out.append(text)
            left -= len(text)
            continue
        head = text[:left]
        if not text[left].isspace() and not head[-1:].isspace():  # a word is cut: drop its piece
            head = head.rsplit(None, 1)[0] if len(head.split()) > 1 else ""
        if head.strip():
            out.append(head.rstrip())
        break
    return out


def average_length(texts: Sequence[str]) -> float:
    """Mean length in characters (0.0 for no texts): the unit :func:`efficiency_factor` expects."""
    return sum(len(t) for t in texts) / len(texts) if texts else 0.0


def efficiency_factor(
    n_old: int, n_new: int, avg_len_old: float, avg_len_new: float, *, max_memories: int = MAX_MEMORIES
) -> float:
    """E = clamp(size * density * change, 0.1, 1.5) for a database going from ``n_old`` to ``n_new`` items."""
    if n_old < 0 or n_new < 0:
        raise ValueError(f"memory counts must be >= 0, got n_old={n_old}, n_new={n_new}")
    size = 1.0 if n_new <= max_memories else max(0.1, 1.0 - (n_new - max_memories) / max_memories)
    # The original only measures density against a non-empty old database.
    density = min(1.2, avg_len_new / max(avg_len_old, 1.0)) if n_old > 0 else 1.0
    change = max(0.8, 1.0 - 0.5 * abs(n_new - n_old) / max(n_old, 1))
    return _clamp(size * density * change, 0.1, 1.5)


def memupdate_reward(p_old: float, p_new: float, e: float) -> float:
    """r = (P_new - P_old) * E."""
    return (p_new - p_old) * e


def score_memupdate(
    answer: object,
    retrieved_old: Sequence[str],
    retrieved_new: Sequence[str],
    old_texts: Sequence[str],
    new_texts: Sequence[str],
    *,
    max_memories: int = MAX_MEMORIES,
    context_chars: int = CONTEXT_CHARS,
    question: object = None,
) -> RewardOutcome:
    """The whole MemUpdate reward for one question, as an outcome.

    ``retrieved_old``/``retrieved_new``: texts of the memories retrieved for the question before and
    after the episode, best first (enough to fill ``context_chars``: both are cut to that budget); ``old_texts``/``new_texts``: all memory texts before and after (for E). A reward
    that cannot be computed is a failure, never a number.
    """
    try:
        p_old = answer_coverage(answer, context_window(retrieved_old, context_chars), question=question)
        p_new = answer_coverage(answer, context_window(retrieved_new, context_chars), question=question)
    except ValueError as exc:
        return RewardOutcome.failed(f"memupdate: {exc}")
    e = efficiency_factor(
        len(old_texts),
        len(new_texts),
        average_length(old_texts),
        average_length(new_texts),
        max_memories=max_memories,
    )
    return RewardOutcome.ok(
        memupdate_reward(p_old, p_new, e),
        p_old=p_old,
        p_new=p_new,
        efficiency=e,
        n_old=float(len(old_texts)),
        n_new=float(len(new_texts)),
    )
