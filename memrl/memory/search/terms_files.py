"""A :class:`~memrl.memory.search.terms.NamespaceTerms` as a snapshot file (:mod:`memrl.memory.index.snapshot`).

A new process's first search with session scores or spreading activation would otherwise read every item of
the namespace and analyse it again: its content terms and its entities by the tagger (seconds at 30,000
items, the rule tagger's regular expressions most of it). The file keeps what that analysis gave, per unit
in the namespace's order: the unit's key (``("u", unit)`` or ``("r", rid)``), its rids, its session, its term
counts and its entities, and the postings derived from them (entity -> units, session -> term counts and
length), as flat arrays with offsets (:func:`to_arrays`). A load reads only the vocabularies; each unit,
term row and entity's units is decoded when a search or a write first asks for it
(:class:`~memrl.memory.index.packed.Packed`): a
search reads a few hundred units, and at a million units decoding everything at load (the first version
of this file, one JSON value) took 20 s of a new process's first search. This module is below
:mod:`~memrl.memory.search.terms`, which imports it.

The file's key (:func:`key`) names what the analysis depended on: the module's version, the tagger and its
version (the spaCy and model packages' for ``tagger="spacy"``), the stemmer's, and the unit and speaker
keys the rows were read with.
"""

from __future__ import annotations

import contextlib
import gc
import json
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import xxhash

from memrl.memory.analysis import tokenizer
from memrl.memory.index import snapshot
from memrl.memory.index.packed import Packed, Strings, position

KIND = "terms"


@contextlib.contextmanager
def paused_gc() -> Iterator[None]:
    """The cyclic garbage collector off while a load (or a save) makes its ~10 containers per unit (none of
    them garbage): at 30,000 units its passes over the young objects took as long as the load itself."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def tagger_version(tagger: str) -> str:
    """What the entities of ``tagger`` depend on besides the text and this code (see the module docstring)."""
    if tagger != "spacy":
        return tagger
    from importlib.metadata import PackageNotFoundError, version

    from memrl.memory.analysis.terms import SPACY_MODELS

    got = []
    for name in ("spacy", *SPACY_MODELS):
        try:
            got.append(f"{name}-{version(name)}")
        except PackageNotFoundError:
            continue
    return "spacy:" + ",".join(got)


def key(version: int, tagger: str, collapse: str | None, speaker_key: str | None) -> str:
    """What the units of the same rows depend on: change any and the old file is not loaded."""
    import Stemmer  # PyStemmer: the content terms are its stems

    return json.dumps(
        [version, tagger_version(tagger), tokenizer.ANALYZER, Stemmer.version(), collapse, speaker_key],
        separators=(",", ":"),
    )


def _number(v: Any) -> Any:
    """``v`` as the one value a dict takes it for: 1, 1.0 and True are one key; JSON writes them apart."""
    if isinstance(v, (bool, int, float)) and not (isinstance(v, float) and not v.is_integer()):
        return int(v)
    return v


#: ``json.dumps(v, separators=(",", ":"))`` without making an encoder per call (a third of a key lookup)
_COMPACT = json.JSONEncoder(separators=(",", ":")).encode


def unit_json(key: Any) -> str:
    """A unit key's canonical JSON: what the file's key hashes are of, and how a lookup compares a key with
    the file's (keys a dict holds for one, as ``("u", 1)`` and ``("u", 1.0)``, have one)."""
    return _COMPACT([_number(v) for v in key])


def _csr(rows: list[list[int]], dtype: Any = np.int64) -> tuple[np.ndarray, np.ndarray]:
    offsets = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum([len(r) for r in rows], out=offsets[1:])
    flat = np.fromiter((v for r in rows for v in r), dtype=dtype, count=int(offsets[-1]))
    return flat, offsets


def _items(d: Any) -> list[tuple[Any, Any]]:
    """A dict's items; a loaded one's read once, nothing kept (:meth:`Packed.items_once`)."""
    return list(d.items_once()) if isinstance(d, Packed) else list(d.items())


def to_arrays(nt: Any) -> dict[str, np.ndarray]:
    """``nt`` (a :class:`~memrl.memory.search.terms.NamespaceTerms`) as arrays, its units in its order: the
    keys (JSON, and a sorted hash of each for lookups), each unit's rids, session, term counts and entities
    (term, entity and session numbers into vocabularies), and the postings derived from them (a term's
    sessions and counts, a session's length, an entity's units), rows in the order of the dicts they come
    from. :class:`Loaded` reads them back one entry at a time."""
    pairs = _items(nt.units)
    keys, units = [k for k, _ in pairs], [u for _, u in pairs]
    number = {k: i for i, k in enumerate(keys)}
    key_json = [_COMPACT(list(k)) for k in keys]  # as held: a load gives them back
    hashes = np.fromiter(
        (xxhash.xxh3_64_intdigest(unit_json(k).encode()) for k in keys), dtype=np.uint64, count=len(keys)
    )
    session_tf, entity_units = dict(_items(nt.session_tf)), dict(_items(nt.entity_units))
    vocab = list(dict.fromkeys([*session_tf, *(t for u in units for t in u.terms)]))
    term_no = {t: i for i, t in enumerate(vocab)}
    ents = list(dict.fromkeys([*entity_units, *(e for u in units for e in u.entities)]))
    ent_no = {e: i for i, e in enumerate(ents)}
    sessions = list(dict.fromkeys([*nt.session_len, *(u.session for u in units if u.session is not None)]))
    sess_no = {s: i for i, s in enumerate(sessions)}
    rids, rid_off = _csr([sorted(u.rids) for u in units])
    tids, t_off = _csr([[term_no[t] for t in u.terms] for u in units], np.int32)
    counts = np.fromiter((c for u in units for c in u.terms.values()), dtype=np.int64, count=len(tids))
    eids, e_off = _csr([[ent_no[e] for e in u.entities] for u in units], np.int32)
    tf_rows = [session_tf.get(t, {}) for t in vocab]
    tf_sess, tf_off = _csr([[sess_no[s] for s in row] for row in tf_rows], np.int32)
    tf_count = np.fromiter((c for row in tf_rows for c in row.values()), dtype=np.int64, count=len(tf_sess))
    holders, h_off = _csr([[number[k] for k in entity_units.get(e, ())] for e in ents], np.int32)
    order = np.argsort(rids, kind="stable")
    out = {
        "key_hash_order": np.argsort(hashes, kind="stable"),
        "key_hash": hashes,
        "unit_rids": rids,
        "unit_rid_offsets": rid_off,
        "rid_order": order,
        "unit_session": np.fromiter(
            (sess_no[u.session] if u.session is not None else -1 for u in units),
            dtype=np.int32,
            count=len(units),
        ),
        "unit_terms": tids,
        "unit_term_offsets": t_off,
        "unit_counts": counts,
        "unit_entities": eids,
        "unit_entity_offsets": e_off,
        "tf_sessions": tf_sess,
        "tf_offsets": tf_off,
        "tf_counts": tf_count,
        "session_len": np.fromiter(
            (nt.session_len.get(s, 0) for s in sessions), dtype=np.int64, count=len(sessions)
        ),
        "session_has_len": np.fromiter(
            (s in nt.session_len for s in sessions), dtype=bool, count=len(sessions)
        ),
        "holders": holders,
        "holder_offsets": h_off,
        "vocab_has_tf": np.fromiter((t in session_tf for t in vocab), dtype=bool, count=len(vocab)),
        "ent_has_holders": np.fromiter((e in entity_units for e in ents), dtype=bool, count=len(ents)),
        "session_json": snapshot.pack_json(sessions),
    }
    out["key_data"], out["key_offsets"] = snapshot.pack_strings(key_json)
    out["vocab_data"], out["vocab_offsets"] = snapshot.pack_strings(vocab)
    out["ent_data"], out["ent_offsets"] = snapshot.pack_strings(ents)
    return out


class Loaded:
    """The parts of a :class:`~memrl.memory.search.terms.NamespaceTerms` a file holds, as :class:`Packed`
    dicts over its arrays (``unit`` builds a unit from its fields: the terms module's ``Unit``)."""

    def __init__(self, a: dict[str, np.ndarray], unit: Callable[..., Any]) -> None:
        self.a, self._unit = a, unit
        self.key_json = Strings(a["key_data"], a["key_offsets"])  # a million keys: decoded when read
        self._numbers: dict[Any, int] = {}  # unit key -> its number in the file, for the keys found there
        n = len(self.key_json)
        self.vocab = snapshot.unpack_strings(a["vocab_data"], a["vocab_offsets"])
        self.ents = snapshot.unpack_strings(a["ent_data"], a["ent_offsets"])
        self.sessions = [_hashable(s) for s in snapshot.unpack_json(a["session_json"])]
        for name, length in (
            ("key_hash", n), ("key_hash_order", n), ("unit_session", n), ("unit_rid_offsets", n + 1),
            ("unit_term_offsets", n + 1), ("unit_entity_offsets", n + 1), ("tf_offsets", len(self.vocab) + 1),
            ("vocab_has_tf", len(self.vocab)), ("holder_offsets", len(self.ents) + 1),
            ("ent_has_holders", len(self.ents)), ("session_len", len(self.sessions)),
            ("session_has_len", len(self.sessions)), ("rid_order", len(a["unit_rids"])),
        ):  # fmt: skip
            if len(a[name]) != length:
                raise ValueError(f"snapshot column {name} of length {len(a[name])}, not {length}")
        self.sorted_hash = a["key_hash"][a["key_hash_order"]]
        self.sorted_rids = a["unit_rids"][a["rid_order"]]
        self.rid_unit = np.searchsorted(a["unit_rid_offsets"], a["rid_order"], side="right") - 1
        self.term_no = {t: i for i, t in enumerate(self.vocab) if a["vocab_has_tf"][i]}
        self.ent_no = {e: i for i, e in enumerate(self.ents) if a["ent_has_holders"][i]}

    def key(self, i: int) -> Any:
        return tuple(json.loads(self.key_json[i]))

    def unit_index(self, key: Any) -> int:
        """Unit ``key``'s number in the file (-1: not there); each key found is remembered (a search asks
        for a candidate's unit several times, and the canonical JSON and hash cost 50 us a key), so at most
        the file's keys are. Unit keys are flat (``("u", scalar)`` or ``("r", rid)``: ``unit_json``
        canonicalises the top level only)."""
        got = self._numbers.get(key)
        if got is None:
            got = self._find(key)
            if got >= 0:
                self._numbers[key] = got
        return got

    def _find(self, key: Any) -> int:
        j = unit_json(key)
        h = np.uint64(xxhash.xxh3_64_intdigest(j.encode()))
        at = int(np.searchsorted(self.sorted_hash, h))
        while at < len(self.sorted_hash) and self.sorted_hash[at] == h:
            i = int(self.a["key_hash_order"][at])
            held = self.key_json[i]  # as written; equal to j, it is this key (j is canonical already)
            if held == j or unit_json(self.key(i)) == j:
                return i
            at += 1
        return -1

    def decode_unit(self, i: int) -> Any:
        a = self.a
        lo, hi = int(a["unit_term_offsets"][i]), int(a["unit_term_offsets"][i + 1])
        terms = dict(zip(map(self.vocab.__getitem__, a["unit_terms"][lo:hi].tolist()),
                         a["unit_counts"][lo:hi].tolist(), strict=True))  # fmt: skip
        lo, hi = int(a["unit_rid_offsets"][i]), int(a["unit_rid_offsets"][i + 1])
        rids = set(a["unit_rids"][lo:hi].tolist())
        lo, hi = int(a["unit_entity_offsets"][i]), int(a["unit_entity_offsets"][i + 1])
        entities = set(map(self.ents.__getitem__, a["unit_entities"][lo:hi].tolist()))
        s = int(a["unit_session"][i])
        return self._unit(rids, self.sessions[s] if s >= 0 else None, terms, entities)

    def units(self) -> Packed:
        offsets = self.a["unit_rid_offsets"]
        return Packed(
            len(self.key_json), self.unit_index, self.decode_unit,
            lambda: ((self.key(i), i) for i in range(len(self.key_json))),
            lambda i: int(offsets[i + 1] - offsets[i]),
        )  # fmt: skip

    def unit_of(self) -> Packed:
        def index(rid: Any) -> int:
            return position(self.sorted_rids, rid)

        flat = self.a["unit_rids"]
        return Packed(
            len(flat), index, lambda at: self.key(int(self.rid_unit[at])),
            lambda: zip(self.sorted_rids.tolist(), range(len(flat)), strict=True), lambda at: 1,
        )  # fmt: skip

    def session_tf(self) -> Packed:
        a = self.a
        o = a["tf_offsets"]

        def decode(i: int) -> dict[Any, int]:
            lo, hi = int(o[i]), int(o[i + 1])
            return dict(zip(map(self.sessions.__getitem__, a["tf_sessions"][lo:hi].tolist()),
                            a["tf_counts"][lo:hi].tolist(), strict=True))  # fmt: skip

        return Packed(
            len(self.term_no), lambda t: self.term_no.get(t, -1), decode, lambda: iter(self.term_no.items()),
            lambda i: int(o[i + 1] - o[i]),
        )  # fmt: skip

    def entity_units(self) -> Packed:
        o = self.a["holder_offsets"]
        holders = self.a["holders"]

        def decode(i: int) -> set[Any]:
            return set(map(self.key, holders[int(o[i]) : int(o[i + 1])].tolist()))

        return Packed(
            len(self.ent_no), lambda e: self.ent_no.get(e, -1), decode, lambda: iter(self.ent_no.items()),
            lambda i: int(o[i + 1] - o[i]),
        )  # fmt: skip

    def session_len(self) -> dict[Any, int]:
        has, lengths = self.a["session_has_len"].tolist(), self.a["session_len"].tolist()
        return {s: n for s, n, h in zip(self.sessions, lengths, has, strict=True) if h}


def _hashable(v: Any) -> Any:
    return tuple(map(_hashable, v)) if isinstance(v, list) else v


def load(store: Any, ns: str, generation: int, key: str) -> tuple[int, dict[str, np.ndarray]] | None:
    """(seq, the arrays :func:`to_arrays` made) of ``ns``'s file when it is this store's at its generation now
    and whole; else None."""
    got = snapshot.load_stamped(store, KIND, ns, key, generation)
    if got is None:
        return None
    meta, arrays = got
    return meta["seq"], arrays


def save(store: Any, ns: str, nt: Any, key: str) -> bool:
    """Write ``nt``'s file (atomically); False when there is nowhere to write it or nothing to stamp it with."""

    def arrays() -> dict[str, Any]:
        with paused_gc():
            return to_arrays(nt)

    return snapshot.save_stamped(store, KIND, ns, key, nt.generation, nt.seq, arrays)
