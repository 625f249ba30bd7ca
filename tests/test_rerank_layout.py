"""The re-scorer's per-namespace layout (each unit's items, its session, its neighbours there) is built in one
pass and reads a unit's neighbours from its session's items when asked; after any sequence of moves, adds and
deletes it must answer as a layout built from scratch on the final facts, and as an independent reading of
what a unit's neighbours are (its session's units by first item, the one before and the one after), also when
it was read between the writes."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from memrl.memory.search.rerank import _Layout

UNITS = st.one_of(st.none(), st.sampled_from(["a", "b", "c", "d"]))
SESSIONS = st.one_of(st.none(), st.sampled_from(["s1", "s2", "s3"]))
FACT = st.tuples(UNITS, st.none(), SESSIONS, st.none(), st.booleans())
RIDS = st.integers(min_value=1, max_value=12)
OPS = st.lists(st.tuples(RIDS, st.one_of(st.none(), FACT)), max_size=30)


def _expected(facts: dict[int, tuple[Any, ...]]) -> tuple[dict[Any, list[int]], dict[Any, tuple[Any, ...]]]:
    """Each live unit's items and neighbours, read directly from the facts."""
    rids: dict[Any, list[int]] = {}
    for rid in sorted(facts):
        unit = facts[rid][0]
        rids.setdefault(("u", unit) if unit is not None else ("r", rid), []).append(rid)
    session = {k: facts[r[0]][2] for k, r in rids.items()}
    neighbours: dict[Any, tuple[Any, ...]] = {}
    for s in {v for v in session.values() if v is not None}:
        keys = sorted((k for k in rids if session[k] == s), key=lambda k: rids[k][0])
        for i, k in enumerate(keys):
            neighbours[k] = tuple(keys[j] for j in (i - 1, i + 1) if 0 <= j < len(keys))
    return rids, neighbours


def _check(lay: _Layout, facts: dict[int, tuple[Any, ...]]) -> None:
    rids, neighbours = _expected(facts)
    every = {("u", u) for u in "abcde"} | {("r", r) for r in range(0, 14)}
    for k in every:
        assert lay.rids_of(k) == rids.get(k, []), k
        assert lay.neighbours_of(k) == neighbours.get(k, ()), k
        if k in rids:
            assert lay.session_of(k) == facts[rids[k][0]][2]


@settings(max_examples=300, deadline=None)
@given(start=st.dictionaries(RIDS, FACT, max_size=10), ops=OPS, read_between=st.booleans())
def test_a_layout_kept_in_step_answers_as_one_built_from_the_final_facts(start, ops, read_between):
    facts = dict(start)
    lay = _Layout(0)
    lay.fill(facts)
    _check(lay, facts)
    for rid, fact in ops:
        if fact is None:
            facts.pop(rid, None)
        else:
            facts[rid] = fact
        lay.place(rid, fact)
        if read_between:
            _check(lay, facts)
    _check(lay, facts)
    fresh = _Layout(0)
    fresh.fill(facts)
    assert (lay.unit_rids, lay.by_session) == (fresh.unit_rids, fresh.by_session)


def test_neighbours_skip_the_items_of_units_that_start_elsewhere():
    """A session's items in rid order: 10 (unit a, which starts in s0), 11, 12 (unit b's first), 13 (unit b),
    14 (unit a again), 15: 11's neighbours are nothing before (10 is unit a's, which starts in s0) and unit b
    after; 15's are unit b before (13 and 14 start no unit) and nothing after; a delete is seen at the next ask."""
    facts = {
        5: ("a", None, "s0", None, False),
        10: ("a", None, "s1", None, False),
        11: (None, None, "s1", None, False),
        12: ("b", None, "s1", None, False),
        13: ("b", None, "s1", None, False),
        14: ("a", None, "s1", None, False),
        15: (None, None, "s1", None, False),
    }
    lay = _Layout(0)
    lay.fill(facts)
    assert lay.neighbours_of(("r", 11)) == (("u", "b"),)
    assert lay.neighbours_of(("u", "b")) == (("r", 11), ("r", 15))
    assert lay.neighbours_of(("r", 15)) == (("u", "b"),)
    assert lay.neighbours_of(("u", "a")) == ()  # alone in s0
    _check(lay, facts)
    del facts[12]
    lay.place(12, None)  # b now starts at 13
    assert lay.neighbours_of(("r", 11)) == (("u", "b"),) and lay.rids_of(("u", "b")) == [13]
    del facts[5]
    lay.place(5, None)  # a now starts at 10, in s1
    assert lay.neighbours_of(("u", "a")) == (("r", 11),)
    assert lay.neighbours_of(("r", 11)) == (("u", "a"), ("u", "b"))
    _check(lay, facts)
