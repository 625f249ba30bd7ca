"""A :class:`~memrl.memory.search.terms.NamespaceTerms` as a snapshot file (:mod:`memrl.memory.index.snapshot`).

A new process's first search with session scores or spreading activation would otherwise read every item of
the namespace and analyse it again: its content terms and its entities by the tagger (seconds at 30,000
items, the rule tagger's regular expressions most of it). The file keeps what that analysis gave, per unit
in the namespace's order: the unit's key (``("u", unit)`` or ``("r", rid)``), its rids, its session, its term
counts and its entities, and the postings derived from them (entity -> units, session -> term counts and
length), as one JSON value (units and sessions are JSON values: :func:`snapshot.pack_json`), column by column.
The postings are saved, not summed again at load: at 30,000 units summing them (a dict update per unit and
term) cost as much as all the rest of a load (:meth:`NamespaceTerms.restore
<memrl.memory.search.terms.NamespaceTerms.restore>` builds the objects with ``map``/``zip``, no loop per
term). This module is below :mod:`~memrl.memory.search.terms`, which imports it.

The file's key (:func:`key`) names what the analysis depended on: the module's version, the tagger and its
version (the spaCy and model packages' for ``tagger="spacy"``), the stemmer's, and the unit and speaker
keys the rows were read with.
"""

from __future__ import annotations

import contextlib
import gc
import json
from collections.abc import Iterator
from typing import Any

from memrl.memory.analysis import tokenizer
from memrl.memory.index import snapshot

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


def to_arrays(nt: Any) -> dict[str, Any]:
    """``nt`` (a :class:`~memrl.memory.search.terms.NamespaceTerms`) as one JSON array: its units column by
    column, in its order, and the postings derived from them (an entity's units by their number)."""
    keys, units = list(nt.units), list(nt.units.values())
    number = {k: i for i, k in enumerate(keys)}
    return {"terms": snapshot.pack_json({
        "keys": keys,
        "rids": [list(u.rids) for u in units],
        "sessions": [u.session for u in units],
        "terms": [u.terms for u in units],
        "entities": [list(u.entities) for u in units],
        "session_tf": [[t, list(row), list(row.values())] for t, row in nt.session_tf.items()],
        "session_len": [list(nt.session_len), list(nt.session_len.values())],
        "entity_units": [[e, [number[k] for k in held]] for e, held in nt.entity_units.items()],
    })}  # fmt: skip


def load(store: Any, ns: str, generation: int, key: str) -> tuple[int, dict[str, Any]] | None:
    """(seq, what :func:`to_arrays` packed) of ``ns``'s file when it is this store's at its generation now
    and whole; else None."""
    got = snapshot.load_stamped(store, KIND, ns, key, generation)
    if got is None:
        return None
    meta, arrays = got
    try:
        return meta["seq"], snapshot.unpack_json(arrays["terms"])
    except (KeyError, ValueError):
        return None


def save(store: Any, ns: str, nt: Any, key: str) -> bool:
    """Write ``nt``'s file (atomically); False when there is nowhere to write it or nothing to stamp it with."""

    def arrays() -> dict[str, Any]:
        with paused_gc():
            return to_arrays(nt)

    return snapshot.save_stamped(store, KIND, ns, key, nt.generation, nt.seq, arrays)
