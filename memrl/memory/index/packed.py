"""Dicts and string columns read from a snapshot file's arrays one entry at a time
(:mod:`memrl.memory.index.snapshot`).

A search reads a few hundred of a namespace's units, facts or term rows; at a million items decoding every
entry when a file is loaded cost most of a new process's first search (20 s for the terms, 1.6 s for the
facts). :class:`Packed` is a dict over a file's entries: an entry is decoded when first read (then kept),
and what is written or deleted afterwards lives beside the arrays, so the index that loaded it is brought
forward from the history as a dict would be. Used by :mod:`memrl.memory.search.terms_files` and
:mod:`memrl.memory.search.facts`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, MutableMapping
from typing import Any

import numpy as np

_MISSING = object()


def positions(ordered: np.ndarray, rids: list[Any]) -> list[int]:
    """:func:`position` of each of ``rids`` in one ``searchsorted``."""
    ints = [r if isinstance(r, int) else None for r in rids]
    probe = np.fromiter((-1 if r is None else r for r in ints), dtype=np.int64, count=len(ints))
    if not len(ordered):
        return [-1] * len(ints)
    at = np.minimum(np.searchsorted(ordered, probe), len(ordered) - 1)
    ok = ordered[at] == probe
    return [
        i if good and r is not None else -1 for i, good, r in zip(at.tolist(), ok.tolist(), ints, strict=True)
    ]


def position(ordered: np.ndarray, rid: Any) -> int:
    """Where the int ``rid`` sits in the ascending array ``ordered``; -1 when it is not there (or not an int)."""
    if not isinstance(rid, int):
        return -1
    at = int(np.searchsorted(ordered, rid))
    return at if at < len(ordered) and ordered[at] == rid else -1


def prefetch(mapping: Any, keys: Any) -> None:
    """:meth:`Packed.prefetch` when ``mapping`` is one (a dict holds every value already)."""
    if isinstance(mapping, Packed):
        mapping.prefetch(keys)


class Packed(MutableMapping[Any, Any]):
    """A dict read from a snapshot's arrays one entry at a time and written in memory: an entry is decoded
    when first read (then kept), written entries and deletions live beside the arrays. Iteration order is a
    dict's: the file's entries in their order, then entries added since in theirs (a deleted entry added
    again comes last, as in a dict).

    ``n`` entries in the file; ``index(key)`` is a key's number there (-1: not there), ``decode(i)`` entry
    ``i``'s value, ``keys()`` the file's (key, number) pairs in order, ``size(i)`` ``len`` of entry ``i``'s
    value."""

    def __init__(
        self,
        n: int,
        index: Callable[[Any], int],
        decode: Callable[[int], Any],
        keys: Callable[[], Iterator[tuple[Any, int]]],
        size: Callable[[int], int],
    ) -> None:
        self._n, self._index, self._decode, self._keys, self._size = n, index, decode, keys, size
        self._read: dict[Any, Any] = {}  # file entries decoded (or overwritten)
        self._gone: set[Any] = set()  # file entries deleted
        self._added: dict[Any, Any] = {}  # entries not in the file

    def _base(self, k: Any) -> int:
        """The file's number of ``k``, or -1 (deleted, or never there)."""
        if k in self._gone:
            return -1
        try:
            return self._index(k)
        except (TypeError, ValueError):
            return -1

    def __getitem__(self, k: Any) -> Any:
        got = self._read.get(k, _MISSING)
        if got is _MISSING:
            got = self._added.get(k, _MISSING)
        if got is _MISSING:
            i = self._base(k)
            if i < 0:
                raise KeyError(k)
            got = self._read[k] = self._decode(i)
        return got

    def prefetch(self, keys: Any) -> None:
        """Read the file entries of ``keys`` not read yet in one pass (kept as :meth:`__getitem__` keeps
        them): a search about to read a few thousand entries one by one pays one batched lookup instead
        (:meth:`_numbers`, :meth:`_decode_many`). Keys absent, deleted or added since are skipped."""
        read, added, gone = self._read, self._added, self._gone
        todo = [k for k in dict.fromkeys(keys) if k not in read and k not in added and k not in gone]
        if not todo:
            return
        numbers = self._numbers(todo)
        found = [(k, i) for k, i in zip(todo, numbers, strict=True) if i >= 0]
        if found:
            values = self._decode_many([i for _, i in found])
            read.update(zip((k for k, _ in found), values, strict=True))

    def _numbers(self, keys: list[Any]) -> list[int]:
        """The file's number of each key (-1: not there); one at a time unless a subclass batches it."""
        out = []
        for k in keys:
            try:
                out.append(self._index(k))
            except (TypeError, ValueError):
                out.append(-1)
        return out

    def _decode_many(self, numbers: list[int]) -> list[Any]:
        return [self._decode(i) for i in numbers]

    def __setitem__(self, k: Any, v: Any) -> None:
        if k in self._read or (k not in self._added and self._base(k) >= 0):
            self._read[k] = v
        else:
            self._added[k] = v

    def __delitem__(self, k: Any) -> None:
        if k in self._added:
            del self._added[k]
        elif k in self._read or self._base(k) >= 0:
            self._read.pop(k, None)
            self._gone.add(k)
        else:
            raise KeyError(k)

    def __contains__(self, k: object) -> bool:
        return k in self._read or k in self._added or self._base(k) >= 0

    def __len__(self) -> int:
        return self._n - len(self._gone) + len(self._added)

    def __iter__(self) -> Iterator[Any]:
        for k, _ in self._keys():
            if k not in self._gone:
                yield k
        yield from list(self._added)

    def items_once(self) -> Iterator[tuple[Any, Any]]:
        """Every (key, value) in order, file entries not read so far decoded for this pass only (not kept):
        what a save of the whole dict reads (``items()`` would look each key up and keep every value)."""
        for k, i in self._keys():
            if k in self._gone:
                continue
            got = self._read.get(k, _MISSING)
            yield k, (self._decode(i) if got is _MISSING else got)
        yield from list(self._added.items())

    def overlay(self) -> tuple[set[Any], dict[Any, Any]]:
        """(the file's keys whose entry is not to be taken from the arrays: read, written or deleted since
        the load; the current value of every entry not taken from the arrays)."""
        return set(self._read) | self._gone, {**self._read, **self._added}

    def size(self, k: Any) -> int:
        """``len(self[k])`` without decoding a file entry (0 when absent)."""
        got = self._read.get(k, _MISSING)
        if got is _MISSING:
            got = self._added.get(k, _MISSING)
        if got is not _MISSING:
            return len(got)
        i = self._base(k)
        return self._size(i) if i >= 0 else 0


class Strings:
    """A column of strings (:func:`snapshot.pack_strings`), each decoded when read."""

    def __init__(self, data: np.ndarray, offsets: np.ndarray) -> None:
        self._raw, self._o = data.tobytes(), offsets

    def __len__(self) -> int:
        return len(self._o) - 1

    def __getitem__(self, i: int) -> str:
        return self._raw[int(self._o[i]) : int(self._o[i + 1])].decode()
