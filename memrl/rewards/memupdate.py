"""MemUpdate's reward: how much an edit of the memory database helps answer a question, what it cost, and
what it broke.

    r = E * (P_new - P_old)   if P_new > P_old   (a gain, discounted by the edit's cost)
    r = P_new - P_old         otherwise          (harm is charged in full)
    r = r - D                                     (D: what the edit took from other questions)

* ``P`` (:func:`answer_coverage`): how much of the answer a reader finds *stated together* in the memories
  retrieved for the question, read in rank order up to a budget of ``context_chars`` characters
  (:func:`context_window`, default 600: about the top-5 of LoCoMo's observation memory with their dates,
  the original's unit), each memory as a reader sees it (:func:`memrl.tools.memupdate.reader_text`: its
  date first). Each part of the answer (``"Paris, Rome"`` has two) counts the most of its tokens that one
  span of a few words of one memory holds (:func:`span_coverage`); answer tokens the question itself
  holds do not count (:func:`scorable_tokens`). P is clamped to [0.1, 1] as in the original.
* ``E`` (:func:`efficiency_factor`, at most 1) = economy x retention: *economy* = 1 / (1 + (k - 1) / 8)
  for an edit that adds or removes ``k`` memory texts (:func:`edit_size`: one create, update or delete is
  1; a 5-way merge 5), *retention* = the share of the removed texts' words still found somewhere in the
  database (:func:`retention`: 1 for a lossless merge or split, 0 for deleting a memory nothing else
  repeats).
* ``D`` (:func:`collateral`): the mean loss of P over *probe* questions, other questions of the same
  conversation (their answers are never shown to the policy), before and after the edit.

Why not the original's E (REFERENCE.md section 2: ``clamp(size x density x change, 0.1, 1.5)`` with size
falling above 100 memories and density rising with longer memories): on LoCoMo's observation memory
(240-324 memories) the size factor sits at its floor, so every merge that shrinks the database *raises*
E: the honest fix plus 28 blind 5-way merges of guessed ids earned 0.102 against the fix's 0.044. Here
an edit is paid for its effect on the question only, every extra changed memory costs, lost words cost,
and damage to other questions (which a per-question reward never sees, and which blind merges cause)
is subtracted.

Why spans, not the original's bag of answer tokens: a memory holding every day, month and year of a
decade "covers" any date answer; a reader does not read an answer out of a word list. A span of
``len(part) + 4`` words still holds the answer in any phrasing a memory states it ("[8 May 2023]
Caroline went ...", "went camping the week before 9 June 2023").

Why a character budget, not the original's top-5 items: with an item count, merging the top hits into
longer items let the reader see more text (25 blind merges earned twice the fix's reward on conv-26).

Tokenisation (ours: the original split raw lower-cased text on whitespace, so ``"Paris."`` never matched
``"Paris"``): :func:`memrl.scoring.metrics.normalize_answer`, then whitespace.

Failures: the original returned -0.1 whenever anything raised. Here :func:`score_memupdate` returns a
:class:`RewardOutcome` whose ``failure`` says why (e.g. an answer with no scorable token), and no value.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from memrl.rewards.answer import answer_parts
from memrl.rewards.outcome import RewardOutcome
from memrl.scoring.metrics import normalize_answer

__all__ = [
    "Probe",
    "answer_coverage",
    "collateral",
    "context_window",
    "edit_size",
    "efficiency_factor",
    "memupdate_reward",
    "retention",
    "scorable_tokens",
    "score_memupdate",
    "span_coverage",
    "tokens",
]

#: How many retrieved memories the coverage looks at, at most (the character budget decides).
TOP_K = 50
#: Characters of retrieved memory the coverage reads, the same before and after an episode.
CONTEXT_CHARS = 600
#: Words a span may hold beyond the answer part's own (its phrasing around it).
SPAN_SLACK = 4
#: Changed memories at which an edit's economy has halved (from 1 at one changed memory).
EDIT_SCALE = 8
#: Weight of the collateral loss over probe questions.
COLLATERAL_WEIGHT = 1.0


def _clamp(x: float, low: float, high: float) -> float:
    return max(low, min(high, x))


def tokens(text: object) -> set[str]:
    """The set of normalised word tokens of ``text`` (see the module docstring)."""
    return set(normalize_answer(text).split())


def scorable_tokens(answer: object, question: object = None) -> set[str]:
    """The answer's tokens that the question does not already give away: only these can show that memory
    holds the answer (a memory that copies the question would otherwise "cover" them)."""
    return tokens(answer) - (tokens(question) if question is not None else set())


def _best_span(words: Sequence[str], wanted: set[str], length: int) -> int:
    """The most distinct ``wanted`` tokens any ``length`` consecutive ``words`` hold."""
    best, counts = 0, Counter[str]()
    for i, w in enumerate(words):
        if w in wanted:
            counts[w] += 1
        if i >= length and words[i - length] in wanted:
            counts[words[i - length]] -= 1
            if not counts[words[i - length]]:
                del counts[words[i - length]]
        best = max(best, len(counts))
        if best == len(wanted):
            break
    return best


def span_coverage(
    answer: object, texts: Iterable[str], *, question: object = None, slack: int = SPAN_SLACK
) -> tuple[int, int]:
    """``(found, wanted)``: of the answer's scorable tokens (per part, :func:`memrl.rewards.answer.
    answer_parts`), how many a reader finds stated together: for each part, the most of its tokens one
    span of ``len(part) + slack`` words of one text holds. Raises ``ValueError`` when no token is left to
    score."""
    asked = tokens(question) if question is not None else set()
    parts = [tokens(p) - asked for p in answer_parts(answer)] or [tokens(answer) - asked]
    parts = [p for p in parts if p]
    if not parts:
        raise ValueError(f"answer {answer!r} has no scorable token (none that the question does not hold)")
    lines = [normalize_answer(t).split() for t in texts]
    found = sum(max((_best_span(words, p, len(p) + slack) for words in lines), default=0) for p in parts)
    return found, sum(len(p) for p in parts)


def answer_coverage(answer: object, retrieved_texts: Iterable[str], *, question: object = None) -> float:
    """P: share of the answer's tokens a reader finds stated together (:func:`span_coverage`) in the
    retrieved memories, clamped to [0.1, 1].

    Pass the texts of the memories retrieved for the question, cut to the reader's budget
    (:func:`context_window`). With ``question``, tokens of the answer that the question holds do not
    count. Raises ``ValueError`` if no token is left to score (the original silently scored an empty
    answer 0.5).
    """
    found, wanted = span_coverage(answer, retrieved_texts, question=question)
    return _clamp(found / wanted, 0.1, 1.0)


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


def edit_size(old_texts: Sequence[str], new_texts: Sequence[str]) -> int:
    """How many memories an edit changed: the larger of the texts it added and the texts it removed
    (multisets: a duplicate counts). A create, an update or a delete is 1; a 5-way merge is 5."""
    old, new = Counter(old_texts), Counter(new_texts)
    return max(sum((new - old).values()), sum((old - new).values()))


def retention(old_texts: Sequence[str], new_texts: Sequence[str]) -> float:
    """The share of the words of the removed texts still found somewhere in the new database (1.0 when
    nothing was removed): a lossless merge or split keeps 1, a delete of a memory nothing repeats 0."""
    removed = Counter(old_texts) - Counter(new_texts)
    words = [w for text in removed.elements() for w in tokens(text)]
    if not words:
        return 1.0
    kept = set().union(*(tokens(t) for t in new_texts)) if new_texts else set()
    return sum(w in kept for w in words) / len(words)


def efficiency_factor(
    old_texts: Sequence[str], new_texts: Sequence[str], *, scale: float = EDIT_SCALE
) -> float:
    """E = economy x retention, in [0, 1] (see the module docstring); 1.0 when nothing changed."""
    k = edit_size(old_texts, new_texts)
    economy = 1.0 / (1.0 + max(0, k - 1) / scale)
    return economy * retention(old_texts, new_texts)


@dataclass(frozen=True)
class Probe:
    """Another question of the conversation, and what a search for it retrieves before and after."""

    answer: object
    question: object
    retrieved_old: Sequence[str]
    retrieved_new: Sequence[str]


def collateral(probes: Iterable[Probe], context_chars: int = CONTEXT_CHARS) -> float:
    """D: the mean drop of P over the probes (a gain on a probe is not counted: the reward is for the
    target question); 0.0 without probes. Probes without a scorable token are skipped."""
    drops = []
    for p in probes:
        try:
            old = answer_coverage(
                p.answer, context_window(p.retrieved_old, context_chars), question=p.question
            )
            new = answer_coverage(
                p.answer, context_window(p.retrieved_new, context_chars), question=p.question
            )
        except ValueError:
            continue
        drops.append(max(0.0, old - new))
    return sum(drops) / len(drops) if drops else 0.0


def memupdate_reward(p_old: float, p_new: float, e: float, d: float = 0.0) -> float:
    """r = E * (P_new - P_old) for a gain, P_new - P_old for a loss, minus the collateral ``d``."""
    delta = p_new - p_old
    return (e * delta if delta > 0 else delta) - COLLATERAL_WEIGHT * d


def score_memupdate(
    answer: object,
    retrieved_old: Sequence[str],
    retrieved_new: Sequence[str],
    old_texts: Sequence[str],
    new_texts: Sequence[str],
    *,
    context_chars: int = CONTEXT_CHARS,
    question: object = None,
    probes: Sequence[Probe] = (),
) -> RewardOutcome:
    """The whole MemUpdate reward for one question, as an outcome.

    ``retrieved_old``/``retrieved_new``: texts of the memories retrieved for the question before and
    after the episode, best first, as a reader sees them (enough to fill ``context_chars``: both are cut
    to that budget); ``old_texts``/``new_texts``: all memory texts before and after (for E); ``probes``:
    other questions of the conversation (for D). A reward that cannot be computed is a failure, never a
    number.
    """
    try:
        p_old = answer_coverage(answer, context_window(retrieved_old, context_chars), question=question)
        p_new = answer_coverage(answer, context_window(retrieved_new, context_chars), question=question)
    except ValueError as exc:
        return RewardOutcome.failed(f"memupdate: {exc}")
    e = efficiency_factor(old_texts, new_texts)
    d = collateral(probes, context_chars)
    return RewardOutcome.ok(
        memupdate_reward(p_old, p_new, e, d),
        p_old=p_old,
        p_new=p_new,
        efficiency=e,
        edit_size=float(edit_size(old_texts, new_texts)),
        retention=retention(old_texts, new_texts),
        collateral=d,
        n_probes=float(len(probes)),
        n_old=float(len(old_texts)),
        n_new=float(len(new_texts)),
    )
