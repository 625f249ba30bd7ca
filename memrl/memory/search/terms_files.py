"""A :class:`~memrl.memory.search.terms.NamespaceTerms` as a snapshot file (:mod:`memrl.memory.index.snapshot`).

A new process's first search with session scores or spreading activation would otherwise read every item of
the namespace and analyse it again: its content terms and its entities by the tagger (seconds at 30,000
items, the rule tagger's regular expressions most of it). The file keeps what that analysis gave, per unit
in the namespace's order: the unit's key (``("u", unit)`` or ``("r", rid)``), its rids, its session, its term
counts and its entities, as one JSON array (units and sessions are JSON values: :func:`snapshot.pack_json`).
The postings derived from the units (entity -> units, session -> term counts and length) are summed again at
load: a pass over the units' counts costs a small part of what the analysis did, and a file cannot then
hold postings that disagree with its units.

The file's key (:func:`key`) names what the analysis depended on: the module's version, the tagger and its
version (the spaCy and model packages' for ``tagger="spacy"``), the stemmer's, and the unit and speaker
keys the rows were read with.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from memrl.memory.analysis import tokenizer
from memrl.memory.index import snapshot
from memrl.memory.search.terms import NamespaceTerms, Unit

KIND = "terms"


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
    import Stemmer  # PyStemmer: the content terms are its stems

    return json.dumps(
        [version, tagger_version(tagger), tokenizer.ANALYZER, Stemmer.version(), collapse, speaker_key],
        separators=(",", ":"),
    )


def path(store: Any, ns: str, key: str) -> Any:
    return snapshot.snapshot_path(getattr(store, "path", None), ns, KIND, key)


def to_arrays(nt: NamespaceTerms) -> dict[str, Any]:
    units = [[list(k), list(u.rids), u.session, dict(u.terms), list(u.entities)] for k, u in nt.units.items()]
    return {"units": snapshot.pack_json(units)}


def from_arrays(
    generation: int, seq: int, tagger: str, keys: tuple[Any, Any], a: dict[str, Any]
) -> NamespaceTerms:
    """The terms :func:`to_arrays` was given, derived postings summed again; ValueError (or KeyError,
    TypeError) when the file's units are not units."""
    nt = NamespaceTerms(generation, tagger, keys, seq)
    for k, rids, session, terms, entities in snapshot.unpack_json(a["units"]):
        kind, value = k
        if kind not in ("u", "r") or not all(isinstance(t, str) and type(c) is int for t, c in terms.items()):
            raise ValueError("not a unit")
        key = (kind, value)
        if key in nt.units or any(not isinstance(r, int) or r in nt.unit_of for r in rids):
            raise ValueError("a unit or a rid twice")
        unit = nt.units[key] = Unit(set(rids), session, Counter(terms), {str(e) for e in entities})
        for r in rids:
            nt.unit_of[r] = key
        nt._count(unit, +1)
        for e in unit.entities:
            nt.entity_units.setdefault(e, set()).add(key)
    return nt


def load(
    store: Any, ns: str, generation: int, key: str, tagger: str, keys: tuple[Any, Any]
) -> NamespaceTerms | None:
    """``ns``'s terms from their file when it is this store's at its generation now and whole; else None."""
    got = snapshot.read(path(store, ns, key), {"kind": KIND, "ns": ns, "key": key, "generation": generation})
    if got is None:
        return None
    meta, arrays = got
    seq = meta.get("seq")
    if not isinstance(seq, int) or seq <= 0 or store.seq_time(seq) != meta.get("seq_at"):
        return None  # another database's file, or this one's from a history it no longer has
    try:
        return from_arrays(generation, seq, tagger, keys, arrays)
    except (KeyError, ValueError, TypeError, AttributeError):
        return None


def save(store: Any, ns: str, nt: NamespaceTerms, key: str) -> bool:
    """Write ``nt``'s file (atomically); False when there is nowhere to write it or nothing to stamp it with."""
    where = path(store, ns, key)
    if where is None:
        return False
    stamp = snapshot.stamp(store, ns, nt.seq)
    if stamp is None or stamp["generation"] != nt.generation:
        return False
    snapshot.write(where, {"kind": KIND, "ns": ns, "key": key, **stamp}, to_arrays(nt))
    return True
