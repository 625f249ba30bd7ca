"""Terms and entities of each namespace's units, kept in step with the store, for the retrieval steps that
look past a single item (session-level BM25 and the entity graph, :mod:`memrl.memory.search.expand`).

:class:`TermIndex` keeps one :class:`NamespaceTerms` per namespace in step with the store, the way the
dense index does (rows changed since the last search, ``seq > last``; a new generation reloads). It reads
each item's plain text (``metadata["text"]`` when the builder keeps one, as the ``raw`` builder does, else
the content), so a turn stored in several views (alone, with neighbours) counts once per unit. What an item
is about comes from :mod:`memrl.memory.analysis.terms`. A big namespace's terms are also kept in a snapshot
file beside a SQLite store (:mod:`memrl.memory.search.terms_files`): a new process loads them and analyses only
the rows changed since, not the whole namespace again.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import MutableMapping
from dataclasses import dataclass, field
from typing import Any

from memrl.memory.analysis.terms import content_terms, tagger_of
from memrl.memory.search import terms_files
from memrl.memory.store.follow import Following
from memrl.memory.store.indexing import fact

log = logging.getLogger(__name__)

#: Names what the units' terms and entities are made of (:func:`content_terms`, the rule tagger, how rows
#: become units), in the key of the snapshot files: change it whenever the same rows would give other
#: terms, entities or units, so that old files are not loaded.
VERSION = 3  # 3: unit keys hashed as a dict compares them (2: as written; 1: one JSON value)


@dataclass
class Unit:
    """One retrievable unit (a turn, or an item without a unit): its session, terms and entities."""

    rids: set[int]
    session: Any
    terms: dict[str, int]  # term -> count (a Counter when analysed here, a dict when loaded from a file)
    entities: set[str]


@dataclass
class NamespaceTerms:
    """Terms and entities of one namespace's live units, with the postings the expansions need, all kept
    up to date incrementally (a write costs the size of the units it touches, not of the namespace)."""

    generation: int
    tagger: str
    keys: tuple[str | None, str | None] = (None, None)  # (collapse, speaker_key) the units were read with
    seq: int = 0
    # dicts, or terms_files.Packed ones over a loaded snapshot file (the same interface)
    unit_of: MutableMapping[int, Any] = field(default_factory=dict)  # rid -> unit key
    units: MutableMapping[Any, Unit] = field(default_factory=dict)
    entity_units: MutableMapping[str, set[Any]] = field(default_factory=dict)  # entity -> unit keys
    session_tf: MutableMapping[str, dict[Any, int]] = field(default_factory=dict)  # term -> {session: count}
    session_len: dict[Any, int] = field(default_factory=dict)  # session -> number of terms

    def _count(self, unit: Unit, sign: int) -> None:
        if unit.session is None:
            return
        s = unit.session
        for t, c in unit.terms.items():
            row = self.session_tf.setdefault(t, {})
            row[s] = row.get(s, 0) + sign * c
            if row[s] <= 0:
                del row[s]
                if not row:
                    del self.session_tf[t]
        self.session_len[s] = self.session_len.get(s, 0) + sign * sum(unit.terms.values())
        if self.session_len[s] <= 0:
            del self.session_len[s]

    def drop(self, rid: int) -> None:
        key = self.unit_of.pop(rid, None)
        unit = self.units.get(key)
        if unit is None:
            return
        unit.rids.discard(rid)
        if not unit.rids:
            del self.units[key]
            self._count(unit, -1)
            for e in unit.entities:
                holders = self.entity_units.get(e)
                if holders is not None:
                    holders.discard(key)
                    if not holders:
                        del self.entity_units[e]

    def add(self, rid: int, key: Any, session: Any, text: str, entities: set[str]) -> None:
        self.drop(rid)
        self.unit_of[rid] = key
        unit = self.units.get(key)
        if unit is None:
            unit = self.units[key] = Unit(set(), session, Counter(content_terms(text)), entities)
            self._count(unit, +1)
            for e in entities:
                self.entity_units.setdefault(e, set()).add(key)
        unit.rids.add(rid)

    def restore(self, arrays: dict[str, Any]) -> None:
        """Make these (empty) terms those of a snapshot file's ``arrays``
        (:mod:`memrl.memory.search.terms_files`: read from them on demand); ValueError (or KeyError,
        IndexError) when its parts do not fit together."""
        loaded = terms_files.Loaded(arrays, Unit)
        self.units, self.unit_of = loaded.units(), loaded.unit_of()
        self.session_tf, self.entity_units = loaded.session_tf(), loaded.entity_units()
        self.session_len = loaded.session_len()

    def holders(self, entity: str) -> int:
        """How many units name ``entity`` (without reading which, from a loaded file)."""
        eu = self.entity_units
        return eu.size(entity) if isinstance(eu, terms_files.Packed) else len(eu.get(entity, ()))


class TermIndex:
    """Per-namespace :class:`NamespaceTerms` of a store, brought up to date on each :meth:`get`."""

    #: A namespace's terms are saved to their snapshot file from this many live items (on
    #: :meth:`save_snapshots` and after a catch-up that read this many rows).
    SNAPSHOT_MIN = 1000
    #: ... and after a catch-up that read this share of the namespace's items.
    SAVE_AFTER = 0.1

    def __init__(self, store: Any) -> None:
        self.store = store
        self._cache: Following[NamespaceTerms] = Following(store, self._build)
        self._saved: dict[str, tuple[int, Any, int]] = {}  # ns -> (generation, key, seq) of its last file
        self._keys: dict[Any, str] = {}
        self._clones: set[str] = set()  # namespaces cloned by this process (saved on close only)
        self._lock = threading.RLock()

    def forget(self, ns: str) -> None:
        with self._lock:
            self._cache.forget(ns)
            self._saved.pop(ns, None)
            self._clones.discard(ns)

    def cloned(self, src: str, dst: str) -> None:
        """``dst`` was just cloned from ``src`` (after :meth:`forget`)."""
        with self._lock:
            self._clones.add(dst)

    def get(self, ns: str, *, collapse: str | None, speaker_key: str | None, tagger: str) -> NamespaceTerms:
        with self._lock:
            return self._get(ns, collapse, speaker_key, tagger)

    def _get(self, ns: str, collapse: str | None, speaker_key: str | None, tagger: str) -> NamespaceTerms:
        # other keys, other units: a search with other options rebuilds
        cache = self._cache.current(ns, (tagger, collapse, speaker_key))
        rows = self.store.unit_rows(ns, collapse, speaker_key, cache.seq)
        if not rows:
            return cache
        rows = [(r[0], r[1], r[2], fact(r[3]), r[4], r[5], fact(r[6])) for r in rows]
        live = [r for r in rows if not r[1]]
        speakers = {r[6] for r in live if isinstance(r[6], str)}
        ents = tagger_of(tagger)([r[5] for r in live], speakers) if live else []
        by_rid = dict(zip((r[0] for r in live), ents, strict=True))
        for rid, deleted, seq, unit, session, text, _ in rows:
            if deleted:
                cache.drop(rid)
            else:
                key = ("u", unit) if collapse and unit is not None else ("r", rid)
                cache.add(rid, key, session, text, by_rid[rid])
            cache.seq = max(cache.seq, seq)
        # a cold build (or a catch-up of a tenth of the namespace) is saved at once, so a process killed
        # later leaves its file (a smaller catch-up waits for close: a save at a million units takes seconds);
        # not a clone made here (an RL episode's copy: a file per episode would cost more than it saves)
        if (
            len(rows) >= max(self.SNAPSHOT_MIN, self.SAVE_AFTER * len(cache.unit_of))
            and ns not in self._clones
        ):
            self._save(ns, cache)
        return cache

    # ------------------------------------------------------------------ snapshot files
    def _build(self, ns: str, generation: int, key: tuple[str, Any, Any]) -> NamespaceTerms:
        """New terms of ``ns``: its snapshot when there is a good one, else empty (filled by :meth:`get`)."""
        nt = NamespaceTerms(generation, key[0], key[1:])
        with terms_files.paused_gc():
            loaded = terms_files.load(self.store, ns, generation, self._key(key))
            if loaded is None:
                return nt
            try:
                nt.restore(loaded[1])
            except (ValueError, TypeError, KeyError, IndexError):  # not what this module writes: rebuilt
                return NamespaceTerms(generation, key[0], key[1:])
        nt.seq = loaded[0]
        self._saved[ns] = (generation, key, nt.seq)
        return nt

    def _key(self, key: tuple[str, Any, Any]) -> str:
        """The snapshot key of the options ``key`` (cached: the spaCy tagger's reads package versions)."""
        got = self._keys.get(key)
        if got is None:
            got = self._keys[key] = terms_files.key(VERSION, *key)
        return got

    def _save(self, ns: str, nt: NamespaceTerms) -> None:
        key = (nt.tagger, *nt.keys)
        if len(nt.unit_of) < self.SNAPSHOT_MIN or self._saved.get(ns) == (nt.generation, key, nt.seq):
            return
        try:
            if terms_files.save(self.store, ns, nt, self._key(key)):
                self._saved[ns] = (nt.generation, key, nt.seq)
        except OSError as e:  # a full disk or a read-only directory costs the next process a rebuild, no more
            log.warning("could not save the terms snapshot of namespace %r: %s", ns, e)

    def save_snapshots(self) -> None:
        """Write the snapshot of each namespace's terms changed since its last file (from
        :data:`SNAPSHOT_MIN` live items): what ``SearchIndex.close`` calls."""
        with self._lock:
            for ns, nt in list(self._cache.items()):
                self._save(ns, nt)
