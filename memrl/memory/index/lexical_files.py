"""A :class:`~memrl.memory.index.lexical.LexicalIndex` as a snapshot file (:mod:`memrl.memory.index.snapshot`).

What a new process would otherwise do on its first BM25 search of a big namespace is tokenize every item
(seconds at 30,000 items). The index is saved as it is in memory, slots and all (dead ones too, so the
loaded index is the saved one, not a compacted cousin), in numpy arrays only:

- per slot: ``rids``, ``types``, ``lengths``, ``alive``;
- postings: the terms (``term_data``/``term_offsets``, :func:`~memrl.memory.index.snapshot.pack_strings`),
  and per term a run (``post_offsets``) of ``post_slots`` and ``post_tfs``.

A loaded index keeps those runs where they are and reads a term's run when a query asks for it (or copies
it into lists when a write extends it), so a load builds one dict of terms, not a list per term.

The file's key (:func:`key`) names what turned the texts into postings: the index's version, the tokenizer's
analysis and the stemmer library's version, the type codes. Its stamp (generation, seq, time of history row
seq) is checked against the store before anything of it is used (:func:`load`). The index is read and
filled by attribute (this module is below :mod:`~memrl.memory.index.lexical`, which imports it).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from typing import Any

import numpy as np

from memrl.memory.analysis import tokenizer
from memrl.memory.index import snapshot

KIND = "lexical"


def key(version: int, type_code: dict[str, int]) -> str:
    """What the postings of the same rows depend on: change any and the old file is not loaded."""
    import Stemmer  # PyStemmer: the stems are its algorithm's (ANALYZER names which), as of its version

    codes = json.dumps(sorted(type_code.items()), separators=(",", ":"))
    return f"v{version}|{tokenizer.ANALYZER}|pystemmer-{Stemmer.version()}|{codes}"


def to_arrays(idx: Any) -> dict[str, np.ndarray]:
    """``idx`` as arrays (loaded runs gathered as arrays, written terms from their lists)."""
    lists = list(idx._postings.values())
    lens = [np.fromiter((len(s) for s, _ in lists), np.int64, len(lists))]
    total = int(lens[0].sum())
    slots = [np.fromiter(itertools.chain.from_iterable(s for s, _ in lists), np.int32, total)]
    tfs = [np.fromiter(itertools.chain.from_iterable(t for _, t in lists), np.int32, total)]
    terms = list(idx._postings)
    if idx._base and idx._base_cols is not None:
        offsets, b_slots, b_tfs = idx._base_cols
        which = np.fromiter(idx._base.values(), np.int64, len(idx._base))
        starts, n = offsets[which], offsets[which + 1] - offsets[which]
        # positions of each run in the loaded arrays, runs one after another
        at = np.repeat(starts - (np.cumsum(n) - n), n) + np.arange(int(n.sum()))
        terms += list(idx._base)
        lens.append(n)
        slots.append(b_slots[at].astype(np.int32))
        tfs.append(b_tfs[at].astype(np.int32))
    post_offsets = np.zeros(len(terms) + 1, dtype=np.int64)
    np.cumsum(np.concatenate(lens), out=post_offsets[1:])
    term_data, term_offsets = snapshot.pack_strings(terms)
    return {
        "rids": np.asarray(idx._rids, dtype=np.int64),
        "types": np.asarray(idx._types, dtype=np.int8),
        "lengths": np.asarray(idx._lengths, dtype=np.int64),
        "alive": np.asarray(idx._alive, dtype=bool),
        "term_data": term_data,
        "term_offsets": term_offsets,
        "post_offsets": post_offsets,
        "post_slots": np.concatenate(slots),
        "post_tfs": np.concatenate(tfs),
    }


def from_arrays(idx: Any, a: dict[str, np.ndarray]) -> Any:
    """Fill the empty ``idx`` with the index :func:`to_arrays` was given; ValueError (or KeyError) when the
    arrays do not fit together."""
    rids, types, lengths, alive = (np.asarray(a[k]) for k in ("rids", "types", "lengths", "alive"))
    offsets, slots, tfs = (np.asarray(a[k]) for k in ("post_offsets", "post_slots", "post_tfs"))
    n = len(rids)
    terms = snapshot.unpack_strings(a["term_data"], a["term_offsets"])
    if (
        any(x.ndim != 1 for x in (rids, types, lengths, alive, offsets, slots, tfs))
        or not len(types) == len(lengths) == len(alive) == n
        or len(offsets) != len(terms) + 1
        or offsets[0] != 0
        or offsets[-1] != len(slots)
        or len(tfs) != len(slots)
        or (len(offsets) > 1 and np.diff(offsets).min() < 0)
        or (len(slots) and (slots.min() < 0 or slots.max() >= n))
    ):
        raise ValueError("snapshot arrays do not fit together")
    live = np.flatnonzero(alive)
    idx.slot_of = dict(zip(rids[live].tolist(), live.tolist(), strict=True))
    idx._base = dict(zip(terms, range(len(terms)), strict=True))
    if len(idx.slot_of) != len(live) or len(idx._base) != len(terms):
        raise ValueError("snapshot holds a rid or a term twice")
    idx._rids, idx._types, idx._lengths = rids.tolist(), types.tolist(), lengths.tolist()
    idx._alive = alive.tolist()
    idx.total_length = int(lengths[live].sum())
    idx._base_cols = (offsets, slots, tfs)
    return idx


def load(store: Any, ns: str, generation: int, key: str, new: Callable[[int], Any]) -> Any:
    """``ns``'s index (made empty by ``new(generation)``, then filled) from its file when the file is this
    store's at its generation now and whole; None otherwise (the caller rebuilds)."""
    got = snapshot.load_stamped(store, KIND, ns, key, generation)
    if got is None:
        return None
    meta, arrays = got
    idx = new(generation)
    idx.seq = meta["seq"]
    try:
        return from_arrays(idx, arrays)
    except (KeyError, ValueError, TypeError, UnicodeDecodeError):
        return None


def save(store: Any, ns: str, idx: Any, key: str) -> bool:
    """Write ``idx``'s file (atomically); False when there is nowhere to write it or nothing to stamp it
    with (no history row ``idx.seq``, or ``ns`` was replaced since ``idx`` last followed it)."""
    return snapshot.save_stamped(store, KIND, ns, key, idx.generation, idx.seq, lambda: to_arrays(idx))
