"""A :class:`~memrl.memory.search.terms.NamespaceTerms` as a snapshot file (:mod:`memrl.memory.index.snapshot`).

A new process's first search with session scores or spreading activation would otherwise read every item of
the namespace and analyse it again: its content terms and its entities by the tagger (seconds at 30,000
items, the rule tagger's regular expressions most of it). The file keeps what that analysis gave, per unit
in the namespace's order: the unit's key (``("u", unit)`` or ``("r", rid)``), its rids, its session, its term
counts and its entities, as one JSON array (units and sessions are JSON values: :func:`snapshot.pack_json`).
The postings derived from the units (entity -> units, session -> term counts and length) are summed again at
load (:meth:`NamespaceTerms.restore <memrl.memory.search.terms.NamespaceTerms.restore>`): a pass over the
units' counts costs a small part of what the analysis did, and a file cannot then hold postings that
disagree with its units. This module is below :mod:`~memrl.memory.search.terms`, which imports it.

The file's key (:func:`key`) names what the analysis depended on: the module's version, the tagger and its
version (the spaCy and model packages' for ``tagger="spacy"``), the stemmer's, and the unit and speaker
keys the rows were read with.
"""

from __future__ import annotations

import json
from typing import Any

from memrl.memory.analysis import tokenizer
from memrl.memory.index import snapshot

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


def to_arrays(nt: Any) -> dict[str, Any]:
    """The units of ``nt`` (a :class:`~memrl.memory.search.terms.NamespaceTerms`), in its order."""
    units = [[list(k), list(u.rids), u.session, dict(u.terms), list(u.entities)] for k, u in nt.units.items()]
    return {"units": snapshot.pack_json(units)}


def units_of(a: dict[str, Any]) -> list[tuple[tuple[str, Any], list[int], Any, dict[str, int], list[str]]]:
    """The units :func:`to_arrays` was given: (key, rids, session, term counts, entities) each; ValueError
    (or KeyError, TypeError) when the file's units are not units."""
    out = []
    for (kind, value), rids, session, terms, entities in snapshot.unpack_json(a["units"]):
        if (
            kind not in ("u", "r")
            or not all(type(r) is int for r in rids)
            or not all(isinstance(t, str) and type(c) is int and c > 0 for t, c in terms.items())
            or not all(isinstance(e, str) for e in entities)
        ):
            raise ValueError("not a unit")
        out.append(((kind, value), rids, session, terms, entities))
    return out


def load(store: Any, ns: str, generation: int, key: str) -> tuple[int, list[Any]] | None:
    """(seq, :func:`units_of`) of ``ns``'s file when it is this store's at its generation now and whole;
    else None."""
    got = snapshot.read(path(store, ns, key), {"kind": KIND, "ns": ns, "key": key, "generation": generation})
    if got is None:
        return None
    meta, arrays = got
    seq = meta.get("seq")
    if not isinstance(seq, int) or seq <= 0 or store.seq_time(seq) != meta.get("seq_at"):
        return None  # another database's file, or this one's from a history it no longer has
    try:
        return seq, units_of(arrays)
    except (KeyError, ValueError, TypeError, AttributeError):
        return None


def save(store: Any, ns: str, nt: Any, key: str) -> bool:
    """Write ``nt``'s file (atomically); False when there is nowhere to write it or nothing to stamp it with."""
    where = path(store, ns, key)
    if where is None:
        return False
    stamp = snapshot.stamp(store, ns, nt.seq)
    if stamp is None or stamp["generation"] != nt.generation:
        return False
    snapshot.write(where, {"kind": KIND, "ns": ns, "key": key, **stamp}, to_arrays(nt))
    return True
