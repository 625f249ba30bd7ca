"""What search knows of each live item besides its text: unit, speaker, session, date and time flag.

The query priors (a named speaker, a month, a time question), collapsing by unit, diversity and the
re-scorers read these for every candidate. Reading them from each candidate's metadata per search would
cost a JSON parse per candidate per search, so :class:`Facts` keeps them per namespace and options, in step
with the store like the dense index (rows changed since the last sequence number seen; a new generation
starts over): one cheap query per search.

A new process used to read them for the whole namespace at its first search, a JSON value parsed per item
and field (1.4 s at 30k items here). They are saved with the index snapshots
(:mod:`memrl.memory.index.snapshot`: a SQLite file store, namespaces of at least ``min_items`` items): after
a namespace was read whole, after a tenth of it changed since the last save, and when the store is closed;
a new process loads them and applies what changed since.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from memrl.memory.index import snapshot
from memrl.memory.store.follow import Following
from memrl.memory.store.indexing import fact

log = logging.getLogger(__name__)

KIND = "facts"
VERSION = 1  # of what a fact is (memrl.memory.store.indexing.fact and the row layout below)


@dataclass
class Signals:
    """One namespace's facts for one set of keys: rid -> (unit, speaker, session, date, time)."""

    generation: int
    keys: tuple[Any, ...]
    seq: int = 0
    of: dict[int, tuple[Any, ...]] = field(default_factory=dict)
    speakers: set[str] = field(default_factory=set)
    saved_seq: int = 0
    unsaved: int = 0
    origin: str = "store"  # read whole from the database, or "snapshot"


class Facts:
    """Per-namespace :class:`Signals` of a store, brought up to date by :meth:`get`."""

    SAVE_AFTER = 0.1

    def __init__(self, store: Any, *, min_items: int = 1000) -> None:
        self.store = store
        self.min_items = min_items
        self._cache: Following[Signals] = Following(store, self._new)

    def forget(self, ns: str) -> None:
        self._cache.forget(ns)

    def get(self, ns: str, keys: tuple[Any, ...]) -> Signals:
        """The facts of ``ns`` read with ``keys`` = (unit key, speaker key, date key, time key)."""
        cache = self._cache.current(ns, keys)
        rows = self.store.signal_rows(ns, keys, cache.seq)
        for rid, deleted, seq, unit, speaker, session, date, when in rows:
            if deleted:
                cache.of.pop(rid, None)
            else:
                speaker, date = fact(speaker) if keys[1] else None, fact(date) if keys[2] else None
                cache.of[rid] = (
                    fact(unit) if keys[0] else None,
                    speaker if isinstance(speaker, str) else None,
                    session,
                    date if isinstance(date, str) else None,
                    bool(fact(when)) if keys[3] else None,
                )
            cache.seq = max(cache.seq, seq)
        if rows:
            cache.speakers = {f[1] for f in cache.of.values() if isinstance(f[1], str)}
            cache.unsaved += len(rows)
            if self._due(cache):
                self._save(ns, cache)
        return cache

    # ------------------------------------------------------------------ snapshot files
    def _key(self, keys: Sequence[Any]) -> str:
        return f"{VERSION}:" + snapshot.json_key(list(keys))

    def _new(self, ns: str, generation: int, keys: tuple[Any, ...]) -> Signals:
        """A namespace's facts: from a valid snapshot file, else empty (:meth:`get` reads them all)."""
        got = snapshot.load_stamped(self.store, KIND, ns, self._key(keys), generation)
        if got is not None:
            meta, a = got
            rows = snapshot.unpack_json(a["rows"])
            rids = a["rids"].tolist()
            if len(rows) == len(rids):
                s = Signals(generation, keys, seq=int(meta["seq"]), origin="snapshot")
                s.of = dict(zip(rids, map(tuple, rows), strict=True))
                s.speakers = {f[1] for f in rows if isinstance(f[1], str)}
                s.saved_seq = s.seq
                return s
        return Signals(generation, keys)

    def _due(self, s: Signals) -> bool:
        if len(s.of) < self.min_items or s.seq <= s.saved_seq:
            return False
        return s.saved_seq == 0 or s.unsaved >= self.SAVE_AFTER * len(s.of)

    def _save(self, ns: str, s: Signals) -> None:
        def arrays() -> dict[str, np.ndarray]:
            rids = np.fromiter(s.of.keys(), dtype=np.int64, count=len(s.of))
            return {"rids": rids, "rows": snapshot.pack_json(list(s.of.values()))}

        seq = s.seq
        try:
            saved = snapshot.save_stamped(self.store, KIND, ns, self._key(s.keys), s.generation, seq, arrays)
        except OSError as e:
            log.warning("could not save the search facts of %r: %s", ns, e)
            return
        if saved:
            s.saved_seq, s.unsaved = seq, 0

    def save_snapshots(self) -> None:
        """Save every namespace's facts changed since their last save (on close)."""
        for ns, s in list(self._cache.items()):
            if len(s.of) >= self.min_items and s.seq > s.saved_seq:
                self._save(ns, s)
