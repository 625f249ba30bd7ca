"""A namespace's terms loaded from a snapshot file are read on demand (``terms_files.Packed``): after any
sequence of adds and drops applied to both, terms restored from a file must equal terms that never left
memory in every part and in a dict's iteration order, answer ``holders`` without decoding, and save a file
that loads back equal again; the spreading activation over them scores as over the in-memory ones."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from memrl.memory.search import terms_files
from memrl.memory.search.expand import spread
from memrl.memory.search.terms import NamespaceTerms

WORDS = ["lake", "boats", "lighthouse", "keeper", "coffee", "stove", "ridge", "socks"]
ENTITIES = ["Paris", "Oslo", "Rex", "1999", "Mona"]
ADD = st.tuples(
    st.just("add"),
    st.integers(1, 15),  # rid
    # None: the item's own key; 1, 1.0 and True: one unit to a dict, three JSON values
    st.one_of(
        st.integers(1, 6).map(lambda u: ("u", f"t{u}")),
        st.sampled_from([("u", 1), ("u", 1.0), ("u", True)]),
        st.just(None),
    ),
    st.one_of(st.none(), st.sampled_from(["s1", "s2", "s3"])),
    st.lists(st.sampled_from(WORDS), max_size=5).map(" ".join),
    st.sets(st.sampled_from(ENTITIES), max_size=3),
)
DROP = st.tuples(st.just("drop"), st.integers(1, 15))


def apply(nt: NamespaceTerms, op: tuple) -> None:
    if op[0] == "drop":
        nt.drop(op[1])
    else:
        _, rid, key, session, text, ents = op
        nt.add(rid, key if key is not None else ("r", rid), session, text, set(ents))


def parts(nt: NamespaceTerms) -> dict:
    return {
        "units": [
            (k, sorted(u.rids), u.session, dict(u.terms), sorted(u.entities)) for k, u in nt.units.items()
        ],
        "unit_of": dict(nt.unit_of.items()),
        "entity_units": {e: set(v) for e, v in nt.entity_units.items()},
        "session_tf": {t: dict(row) for t, row in nt.session_tf.items()},
        "session_len": dict(nt.session_len),
        "holders": {e: nt.holders(e) for e in [*ENTITIES, "nobody"]},
    }


def loaded(nt: NamespaceTerms) -> NamespaceTerms:
    out = NamespaceTerms(0, "rule")
    out.restore(terms_files.to_arrays(nt))
    return out


@settings(max_examples=200, deadline=None)
@given(before=st.lists(ADD, max_size=12), after=st.lists(st.one_of(ADD, DROP), max_size=15))
def test_loaded_terms_follow_writes_as_terms_in_memory(before, after):
    mem = NamespaceTerms(0, "rule")
    for op in before:
        apply(mem, op)
    assert parts(loaded(mem)) == parts(mem)
    got = loaded(mem)  # written to before anything is read from it (a read keeps what it decoded)
    assert isinstance(got.units, terms_files.Packed) or not mem.units
    for op in after:
        apply(mem, op)
        apply(got, op)
        assert parts(got)["holders"] == parts(mem)["holders"]
    assert parts(got) == parts(mem)
    assert list(got.units) == list(mem.units) and len(got.units) == len(mem.units)
    assert parts(loaded(got)) == parts(mem)  # a loaded index saves a file that loads back the same
    fused = {k: 1.0 / (i + 1) for i, k in enumerate(mem.units)}
    a, b = (spread(nt, fused, weight=0.5, seeds=3, max_share=1.0) for nt in (got, mem))
    # equal but for the order floats are summed in (a set of entities iterates in its own order)
    assert a.keys() == b.keys() and all(math.isclose(a[k], b[k], rel_tol=1e-12) for k in a)


def test_a_load_decodes_nothing_until_asked():
    mem = NamespaceTerms(0, "rule")
    for rid in range(1, 51):
        mem.add(rid, ("u", f"t{rid // 2}"), f"s{rid // 10}", "lake boats lighthouse", {"Oslo"})
    got = loaded(mem)
    assert got.units._read == {} and got.entity_units._read == {}
    assert got.holders("Oslo") == 26 and got.entity_units._read == {}  # counted from the offsets
    again = NamespaceTerms(0, "rule")
    again.restore(terms_files.to_arrays(got))  # a save reads every unit once and keeps none of them
    assert got.units._read == {} and got.session_tf._read == {} and parts(again) == parts(mem)
    assert got.units[("u", "t3")].rids == {6, 7} and list(got.units._read) == [("u", "t3")]


FACT = st.tuples(
    st.one_of(st.none(), st.sampled_from(["t1", "t2", 3, 3.0])),  # 3 and 3.0: one dict key, two JSON values
    st.one_of(st.none(), st.sampled_from(["Ann", "Bob"])),
    st.one_of(st.none(), st.sampled_from(["s1", "s2"])),
    st.one_of(st.none(), st.just("2023-05-08")),
    st.one_of(st.none(), st.booleans()),
)


@settings(max_examples=200, deadline=None)
@given(start=st.dictionaries(st.integers(1, 20), FACT, max_size=12),
       ops=st.lists(st.tuples(st.integers(1, 20), st.one_of(st.none(), FACT)), max_size=12))  # fmt: skip
def test_facts_loaded_from_their_columns_follow_writes_as_a_dict(start, ops):
    """The search facts' file (memrl.memory.search.facts): rows read back as written, and the groups the
    re-scorer takes from the columns equal grouping the current rows one by one."""
    from memrl.memory.search.facts import FIELDS, Rows, to_arrays

    mem = dict(start)
    first = Rows(to_arrays(mem))
    assert dict(first) == mem and list(first) == sorted(mem)
    got = Rows(to_arrays(mem))  # written to before anything is read from it
    for rid, fact in ops:
        for d in (mem, got):
            d.pop(rid, None)
            if fact is not None:
                d[rid] = fact
    assert dict(got) == mem
    for j, name in enumerate(FIELDS[:3:2]):  # unit, session
        expected: dict = {}
        for rid in sorted(mem):
            if mem[rid][2 * j] is not None:
                expected.setdefault(mem[rid][2 * j], []).append(rid)
        assert got.groups(name) == expected
    assert Rows(to_arrays(got)).speaker_count() == {
        s: n for s in ("Ann", "Bob") if (n := sum(f[1] == s for f in mem.values()))
    }


@settings(max_examples=200, deadline=None)
@given(start=st.dictionaries(st.integers(1, 20), FACT, max_size=12),
       ops=st.lists(st.tuples(st.integers(1, 20), st.one_of(st.none(), FACT)), max_size=8),
       asked=st.lists(st.one_of(st.integers(-2, 24), st.sampled_from(["x", 2.5, None])), max_size=30))  # fmt: skip
def test_facts_read_in_one_batch_equal_facts_read_one_by_one(start, ops, asked):
    """``prefetch`` (what a search calls before reading a few thousand facts) keeps what reading each key
    would: written, deleted and absent keys untouched, the values of the file's entries equal, and the
    mapping still equal to the dict it mirrors."""
    from memrl.memory.index.packed import prefetch
    from memrl.memory.search.facts import Rows, to_arrays

    mem = dict(start)
    batch, single = Rows(to_arrays(mem)), Rows(to_arrays(mem))
    for rid, fact in ops:
        for d in (mem, batch, single):
            d.pop(rid, None)
            if fact is not None:
                d[rid] = fact
    prefetch(batch, asked)
    prefetch(mem, asked)  # a dict: nothing to do
    for k in asked:
        assert batch.get(k) == single.get(k) == mem.get(k)
    assert dict(batch) == mem and len(batch) == len(mem)
    read = {k for k in asked if k in start and k in mem and all(r != k for r, _ in ops)}
    assert read <= set(batch._read)  # the file's entries asked for were decoded in the batch
