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
a new process loads them and applies what changed since. The file holds each field as a column (a number
into the field's distinct values, JSON); a load reads an item's facts when a search first asks for them
(:class:`~memrl.memory.index.packed.Packed`), and :meth:`Rows.groups` hands the re-scorer its sessions and
units straight from the columns (one JSON value per item, as the first version of the file held, took 1.6 s
to load at a million items).
"""

from __future__ import annotations

import json
import logging
from bisect import insort
from collections import Counter
from collections.abc import MutableMapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from memrl.memory.index import snapshot
from memrl.memory.index.packed import Packed, Strings, position, positions
from memrl.memory.store.follow import Following
from memrl.memory.store.indexing import fact

log = logging.getLogger(__name__)

KIND = "facts"
VERSION = 2  # of what a fact is (memrl.memory.store.indexing.fact and the file's columns below)
#: The fields of a fact that are JSON values, with their columns' names (the fifth, the time flag, is a
#: byte: -1 none, 0, 1).
FIELDS = ("unit", "speaker", "session", "date")


@dataclass
class Signals:
    """One namespace's facts for one set of keys: rid -> (unit, speaker, session, date, time)."""

    generation: int
    keys: tuple[Any, ...]
    seq: int = 0
    of: MutableMapping[int, tuple[Any, ...]] = field(default_factory=dict)  # a dict, or Rows from a file
    speakers: set[str] = field(default_factory=set)
    speaker_count: Counter[str] = field(default_factory=Counter)
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
        count = cache.speaker_count
        for rid, deleted, seq, unit, speaker, session, date, when in rows:
            old = cache.of.pop(rid, None)
            if old is not None and old[1] is not None:
                count[old[1]] -= 1
            if not deleted:
                speaker, date = fact(speaker) if keys[1] else None, fact(date) if keys[2] else None
                speaker = speaker if isinstance(speaker, str) else None
                cache.of[rid] = (
                    fact(unit) if keys[0] else None,
                    speaker,
                    session,
                    date if isinstance(date, str) else None,
                    bool(fact(when)) if keys[3] else None,
                )
                if speaker is not None:
                    count[speaker] += 1
            cache.seq = max(cache.seq, seq)
        if rows:
            cache.speakers = {s for s, n in count.items() if n > 0}
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
            try:
                rows = Rows(a)
            except (KeyError, ValueError):  # not what this module writes: rebuilt
                return Signals(generation, keys)
            s = Signals(generation, keys, seq=int(meta["seq"]), origin="snapshot", of=rows)
            s.speaker_count = rows.speaker_count()
            s.speakers = set(s.speaker_count)
            s.saved_seq = s.seq
            return s
        return Signals(generation, keys)

    def _due(self, s: Signals) -> bool:
        if len(s.of) < self.min_items or s.seq <= s.saved_seq:
            return False
        return s.saved_seq == 0 or s.unsaved >= self.SAVE_AFTER * len(s.of)

    def _save(self, ns: str, s: Signals) -> None:
        def arrays() -> dict[str, np.ndarray]:
            return to_arrays(s.of)

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


def to_arrays(of: MutableMapping[int, tuple[Any, ...]]) -> dict[str, np.ndarray]:
    """Facts ``of`` (rid -> fact) as the file's columns, rows by rid."""
    pairs = sorted(of.items_once() if isinstance(of, Packed) else of.items())  # a loaded file read once
    rids, rows = [r for r, _ in pairs], [f for _, f in pairs]
    out: dict[str, np.ndarray] = {"rids": np.asarray(rids, dtype=np.int64)}
    for j, name in enumerate(FIELDS):
        number: dict[str, int] = {}
        codes = np.fromiter(
            (-1 if f[j] is None else number.setdefault(json.dumps(f[j]), len(number)) for f in rows),
            dtype=np.int32, count=len(rows),
        )  # fmt: skip
        out[name] = codes
        out[name + "_data"], out[name + "_offsets"] = snapshot.pack_strings(list(number))
    out["time"] = np.fromiter((-1 if f[4] is None else int(bool(f[4])) for f in rows), dtype=np.int8,
                              count=len(rows))  # fmt: skip
    return out


_TIME = (False, True, None)  # by the time column's value (-1 is the last)


class Rows(Packed):
    """A facts file's rows (rid -> fact), read on demand; :meth:`groups` gives the items of each session or
    unit without reading them one by one. ValueError (or KeyError) when the columns do not fit together."""

    def __init__(self, a: dict[str, np.ndarray]) -> None:
        self.a, rids = a, a["rids"]
        n = len(rids)
        if any(len(a[f]) != n for f in (*FIELDS, "time")) or (n and np.any(np.diff(rids) <= 0)):
            raise ValueError("facts columns of unequal length, or rids out of order")
        self.values = {f: Strings(a[f + "_data"], a[f + "_offsets"]) for f in FIELDS}
        for f in FIELDS:
            codes = a[f]
            if n and (int(codes.max()) >= len(self.values[f]) or int(codes.min()) < -1):
                raise ValueError(f"facts column {f} names a value it does not hold")
        self._cache: dict[str, dict[int, Any]] = {f: {} for f in FIELDS}
        super().__init__(
            n, self._index, self._row, lambda: zip(rids.tolist(), range(n), strict=True), lambda i: 5
        )

    def _index(self, rid: Any) -> int:
        return position(self.a["rids"], rid)

    def _numbers(self, keys: list[Any]) -> list[int]:
        return positions(self.a["rids"], keys)

    def _decode_many(self, numbers: list[int]) -> list[Any]:
        """Rows ``numbers`` at once: each column's codes in one fancy index, each distinct value decoded once."""
        a, at = self.a, np.asarray(numbers, dtype=np.int64)
        cols = []
        for f in FIELDS:
            value, codes = self._value, a[f][at].tolist()
            seen: dict[int, Any] = {}
            cols.append([seen[c] if c in seen else seen.setdefault(c, value(f, c)) for c in codes])
        times = [_TIME[t] for t in a["time"][at].tolist()]
        return list(zip(*cols, times, strict=True))

    def _value(self, f: str, code: int) -> Any:
        if code < 0:
            return None
        cache = self._cache[f]
        got = cache.get(code, _NONE)
        if got is _NONE:
            got = cache[code] = json.loads(self.values[f][code])
        return got

    def _row(self, i: int) -> tuple[Any, ...]:
        a = self.a
        return (*(self._value(f, int(a[f][i])) for f in FIELDS), _TIME[int(a["time"][i])])

    def _all_values(self, f: str) -> list[Any]:
        """Every value of column ``f``, by number: one JSON decode (one per value cost 0.3 s at 50,000)."""
        a = self.a
        raw, o = a[f + "_data"].tobytes(), a[f + "_offsets"].tolist()
        values = json.loads(b"[" + b",".join(raw[o[i] : o[i + 1]] for i in range(len(o) - 1)) + b"]")
        self._cache[f] = dict(enumerate(values))
        return values

    def speaker_count(self) -> Counter[str]:
        codes = self.a["speaker"]
        used = np.bincount(codes[codes >= 0], minlength=len(self.values["speaker"]))
        return Counter({self._value("speaker", c): int(n) for c, n in enumerate(used.tolist()) if n})

    def groups(self, field: str) -> dict[Any, list[int]]:
        """Each value of ``field`` (``"unit"`` or ``"session"``) -> the rids of the items that hold it now,
        in rid order."""
        j = FIELDS.index(field)
        skip, current = self.overlay()
        rids, codes = self.a["rids"], self.a[field]
        keep = codes >= 0
        if skip:
            keep &= ~np.isin(rids, np.fromiter((r for r in skip if isinstance(r, int)), dtype=np.int64))
        rids, codes = rids[keep], codes[keep]
        order = np.argsort(codes, kind="stable")  # rids ascending within a value
        rids, codes = rids[order], codes[order]
        starts = np.flatnonzero(np.r_[True, codes[1:] != codes[:-1]]) if len(codes) else np.zeros(0, int)
        out: dict[Any, list[int]] = {}
        bounds = [*starts.tolist(), len(codes)]
        flat = rids.tolist()
        values = self._all_values(field) if len(starts) else []
        for c, lo, hi in zip(codes[starts].tolist(), bounds, bounds[1:], strict=False):
            value = values[c]
            if value in out:  # two JSON values, one key (3 and 3.0)
                out[value] = sorted(out[value] + flat[lo:hi])
            else:
                out[value] = flat[lo:hi]
        for rid in sorted(current):  # what changed since the load, in rid order
            value = current[rid][j]
            if value is not None:
                group = out.setdefault(value, [])
                if group and group[-1] > rid:
                    insort(group, rid)
                else:
                    group.append(rid)
        return out


_NONE = object()
