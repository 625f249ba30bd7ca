"""BM25 computed within one namespace: per-namespace inverted indexes that follow the store like the dense one.

Why not SQLite FTS5 (what search used before): an FTS5 table keeps *one* set of statistics (row count,
average length, document frequency of each term) for every row it holds. With all namespaces in one
table, one tenant's writes changed another's BM25 scores and rankings (a side channel: a tenant could
watch a word's score drop after someone else stored it), and one FTS5 table per namespace does not
scale to the thousands of RL-episode namespaces a training run clones and drops (each one would be
schema changes, five shadow tables and its own triggers). So the store keeps the items and search keeps,
per namespace, an inverted index in memory:

- :class:`LexicalIndex`: one namespace's live items as postings (term -> item slots and term counts),
  with their lengths and types; BM25 with the namespace's own statistics (live items, average length,
  document frequency), the formula and constants of FTS5's ``bm25()`` (k1 1.2, b 0.75, idf floored at
  1e-6), so a store with one namespace scores as FTS5 did;
- :class:`LexicalIndexes`: one index per namespace, kept in step with the database the way
  :class:`~memrl.memory.index.dense.DenseIndexes` is (rows changed since the history sequence number last seen;
  a new generation reloads), and one index of each namespace's retrieval keys
  (:mod:`memrl.memory.store.keys`), rebuilt when the namespace's keys version changes.

Nothing is written at insert time (the store's inserts got faster without FTS5); a clone or an import is
indexed on its first search. A big content index is also kept in a snapshot file beside a SQLite store
(:mod:`memrl.memory.index.lexical_files`): a new process loads it and applies the rows changed since, instead
of tokenizing the whole namespace again (seconds at 30,000 items). Any back-end that offers what this
module reads (``generation(ns)``, ``changes_since(ns, seq)`` with each row's ``live`` flag and content,
``keys_state(ns)`` = (generation, a version that grows with every change of the namespace's keys) and
``keys_rows(ns)``) gets the same scores: the statistics are computed here, not by the database.

Text is analysed by :mod:`memrl.memory.analysis.tokenizer` and weighted by :mod:`memrl.memory.analysis.bm25`.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from memrl.memory.analysis import bm25
from memrl.memory.analysis.tokenizer import TermCounts, query_terms, term_counts
from memrl.memory.index import lexical_files
from memrl.memory.store.follow import Following

log = logging.getLogger(__name__)

#: Names how this module turns text into postings, in the key of its snapshot files: change it whenever
#: :class:`LexicalIndex` would hold other postings or lengths for the same rows (with the tokenizer's
#: :data:`~memrl.memory.analysis.tokenizer.ANALYZER`, also in the key), so that old files are not loaded.
VERSION = 1


class LexicalIndex:
    """Postings of one namespace's live texts, with BM25 over the namespace's own statistics.

    Items live in slots (append-only; a changed or deleted item's slot dies and its text, if any, takes a
    new one); dead slots are compacted away once they outnumber the live ones."""

    def __init__(self, generation: int, version: int = 0) -> None:
        self.generation = generation
        self.version = version  # keys index: the namespace's keys version it was built from
        self.seq = 0
        self.slot_of: dict[int, int] = {}  # rid -> live slot
        self._rids: list[int] = []
        self._types: list[int] = []
        self._lengths: list[int] = []
        self._alive: list[bool] = []
        self._postings: dict[str, tuple[list[int], list[int]]] = {}
        self._arrays: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self._cols: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None
        # Postings loaded from a snapshot stay in its arrays (offsets, slots, counts; term -> its number
        # there) until a write to the term copies them into _postings: a load builds no list per term.
        self._base: dict[str, int] = {}
        self._base_cols: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        self.total_length = 0

    @property
    def n(self) -> int:
        """Live items."""
        return len(self.slot_of)

    def upsert(self, rid: int, text: str, type_code: int = 0, counts: TermCounts | None = None) -> None:
        """Index ``text`` as item ``rid`` (replacing what it was). ``counts``: its :func:`term_counts`,
        when the caller has them already (a cache shared by namespaces: a clone's texts are not
        tokenized again)."""
        self.remove(rid)
        self._add(rid, counts or term_counts(text), type_code)

    def remove(self, rid: int) -> None:
        slot = self.slot_of.pop(rid, None)
        if slot is None:
            return
        self._alive[slot] = False
        self.total_length -= self._lengths[slot]
        self._cols = None
        dead = len(self._rids) - len(self.slot_of)
        if dead > 64 and dead > len(self.slot_of):
            self._compact()

    def _compact(self) -> None:
        """Drop dead slots: the live items' term counts, rebuilt from the postings, indexed afresh."""
        counts: dict[int, dict[str, int]] = {s: {} for s in self.slot_of.values()}
        for term, (slots, tfs) in self.postings():
            for s, tf in zip(slots, tfs, strict=True):
                if s in counts:
                    counts[s][term] = tf
        fresh = LexicalIndex(self.generation, self.version)
        for s in sorted(counts):
            fresh._add(self._rids[s], (counts[s], self._lengths[s]), self._types[s])
        fresh.seq = self.seq
        self.__dict__.update(fresh.__dict__)

    def _add(self, rid: int, counts: TermCounts, type_code: int) -> None:
        tf_of, length = counts
        slot = len(self._rids)
        self._rids.append(rid)
        self._types.append(type_code)
        self._lengths.append(length)
        self._alive.append(True)
        self.slot_of[rid] = slot
        self.total_length += length
        postings, arrays, base = self._postings, self._arrays, self._base
        for term, tf in tf_of.items():
            post = postings.get(term)
            if post is None and term in base:
                post = postings[term] = self._unbase(term)
            if post is None:
                postings[term] = ([slot], [tf])
            else:
                post[0].append(slot)
                post[1].append(tf)
                if term in arrays:
                    del arrays[term]
        self._cols = None

    def _base_posting(self, term: str) -> tuple[np.ndarray, np.ndarray] | None:
        """The loaded arrays' (slots, counts) of ``term`` (views), or None."""
        i = self._base.get(term)
        if i is None or self._base_cols is None:
            return None
        offsets, slots, tfs = self._base_cols
        a, b = int(offsets[i]), int(offsets[i + 1])
        return slots[a:b], tfs[a:b]

    def _unbase(self, term: str) -> tuple[list[int], list[int]]:
        """``term``'s loaded postings as lists (a write is about to extend them); it leaves the arrays."""
        slots, tfs = self._base_posting(term)  # type: ignore[misc]
        del self._base[term]
        return slots.tolist(), tfs.tolist()

    def postings(self) -> Iterator[tuple[str, tuple[list[int], list[int]]]]:
        """Every term's (slots, counts) as lists, loaded ones included (compaction, snapshots)."""
        yield from self._postings.items()
        for term in self._base:
            slots, tfs = self._base_posting(term)  # type: ignore[misc]
            yield term, (slots.tolist(), tfs.tolist())

    def _columns(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        if self._cols is None:
            self._cols = (
                np.asarray(self._rids, dtype=np.int64),
                np.asarray(self._types, dtype=np.int8),
                np.asarray(self._lengths, dtype=np.float64),
                np.asarray(self._alive, dtype=bool),
            )
        return self._cols

    def _posting(self, term: str) -> tuple[np.ndarray, np.ndarray] | None:
        arr = self._arrays.get(term)
        if arr is None:
            post = self._postings.get(term)
            if post is None:
                post = self._base_posting(term)
                if post is None:
                    return None
            arr = self._arrays[term] = (
                np.asarray(post[0], dtype=np.int64),
                np.asarray(post[1], dtype=np.float64),
            )
        return arr

    def scores(self, terms: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """(slots, BM25 scores) of the live items matching any of ``terms`` (each term one phrase: a
        term given twice counts twice, as two FTS5 phrases did)."""
        n = self.n
        if n == 0 or not terms:
            return np.zeros(0, dtype=np.int64), np.zeros(0)
        _, _, lengths, alive = self._columns()
        avgdl = self.total_length / n
        total = np.zeros(len(self._rids))
        hit = np.zeros(len(self._rids), dtype=bool)
        for term in terms:
            post = self._posting(term)
            if post is None:
                continue
            slots, tf = post
            live = alive[slots]
            if not live.any():
                continue
            slots, tf = slots[live], tf[live]
            df = len(slots)
            total[slots] += bm25.weight(bm25.idf(n, df), tf, lengths[slots], avgdl)
            hit[slots] = True
        matched = np.flatnonzero(hit)
        return matched, total[matched]

    def top(
        self,
        terms: Sequence[str],
        k: int,
        *,
        type_codes: Sequence[int] | None = None,
        allowed: np.ndarray | None = None,
        only: Any = None,
    ) -> list[tuple[int, float]]:
        """The ``k`` best (rid, BM25 score), best first (ties: lower rid first). ``allowed``: rids that
        may be returned; ``only``: a callable filtering an array of rids (same length bool mask)."""
        if k <= 0:
            return []
        slots, scores = self.scores(terms)
        if not len(slots):
            return []
        rids_all, types_all, _, _ = self._columns()
        rids = rids_all[slots]
        keep = np.ones(len(slots), dtype=bool)
        if type_codes is not None:
            keep &= np.isin(types_all[slots], np.asarray(type_codes, dtype=np.int8))
        if allowed is not None:
            keep &= np.isin(rids, allowed)
        if only is not None:
            keep &= only(rids)
        rids, scores = rids[keep], scores[keep]
        if len(rids) > k:
            cut = np.argpartition(-scores, k - 1)[:k]
            # every score tied with the k-th must stay a candidate so ties break by rid, not by slot
            kth = scores[cut].min()
            pool = np.flatnonzero(scores >= kth)
            rids, scores = rids[pool], scores[pool]
        order = np.lexsort((rids, -scores))[:k]
        return [(int(r), float(s)) for r, s in zip(rids[order], scores[order], strict=True)]

    def live_mask(self, rids: np.ndarray, type_codes: Sequence[int] | None = None) -> np.ndarray:
        """Which of ``rids`` are live items here (of ``type_codes`` when given)."""
        _, types_all, _, _ = self._columns()
        out = np.zeros(len(rids), dtype=bool)
        for i, r in enumerate(rids.tolist()):
            s = self.slot_of.get(r)
            if s is not None and (type_codes is None or int(types_all[s]) in type_codes):
                out[i] = True
        return out


class LexicalIndexes:
    """One :class:`LexicalIndex` of item contents and one of retrieval keys per namespace of a store,
    kept in step with it (see the module docstring)."""

    #: A content index is saved to its snapshot file from this many live items (on :meth:`save_snapshots`
    #: and after a catch-up that indexed this many rows): below it, a rebuild costs less than a file.
    SNAPSHOT_MIN = 1000

    def __init__(self, store: Any, type_code: dict[str, int]) -> None:
        self.store = store
        self.type_code = type_code
        self._content: Following[LexicalIndex] = Following(store, self._build_content)
        self._saved: dict[str, tuple[int, int]] = {}  # ns -> (generation, seq) of its last file
        self._snapshot_key: str | None = None
        # keyed by the namespace's keys version: a change of any key rebuilds the keys index
        self._keys: Following[LexicalIndex] = Following(store, self._build_keys)
        self._lock = threading.RLock()
        # text -> its term counts, per clone family (a namespace and the clones made from it in this
        # process): RL episodes clone one namespace again and again, and a clone's index is then built
        # without tokenizing anything. Not shared further: a cache hit is faster, and how long a search
        # takes must not tell whether another tenant indexed a text. Bounded: cleared when full.
        self._counts: dict[str, dict[str, TermCounts]] = {}
        self._family: dict[str, str] = {}
        self._n_counted = 0
        self.max_cached_texts = 50_000

    def _counted(self, ns: str, text: str) -> TermCounts:
        family = self._counts.setdefault(self._family.get(ns, ns), {})
        got = family.get(text)
        if got is None:
            if self._n_counted >= self.max_cached_texts:
                self._counts.clear()
                self._n_counted = 0
                family = self._counts.setdefault(self._family.get(ns, ns), {})
            got = family[text] = term_counts(text)
            self._n_counted += 1
        return got

    def cloned(self, src: str, dst: str) -> None:
        """``dst`` was just cloned from ``src``: it shares ``src``'s family of term counts."""
        with self._lock:
            self._family[dst] = self._family.get(src, src)

    def content(self, ns: str) -> LexicalIndex:
        """The content index of ``ns``, brought up to date with the database."""
        with self._lock:
            idx = self._content.current(ns)
            rows = self.store.changes_since(ns, idx.seq)
            for r in rows:
                if r.live:
                    idx.upsert(r.rid, r.content, self.type_code[r.type], self._counted(ns, r.content))
                else:
                    idx.remove(r.rid)
                idx.seq = max(idx.seq, r.seq)
            # a cold build (or a long catch-up) is saved at once, so a process killed later leaves its file;
            # not a clone made here (an RL episode's copy: a file per episode would cost more than it saves)
            if len(rows) >= self.SNAPSHOT_MIN and ns not in self._family:
                self._save(ns, idx)
            return idx

    # ------------------------------------------------------------------ snapshot files
    def snapshot_key(self) -> str:
        """What the postings depend on besides the rows (:func:`lexical_files.key`)."""
        if self._snapshot_key is None:
            self._snapshot_key = lexical_files.key(VERSION, self.type_code)
        return self._snapshot_key

    def _build_content(self, ns: str, generation: int, key: Any) -> LexicalIndex:
        """A new content index of ``ns``: its snapshot when there is a good one, else empty (filled from
        the store by :meth:`content`)."""
        loaded = lexical_files.load(self.store, ns, generation, self.snapshot_key(), LexicalIndex)
        if loaded is None:
            return LexicalIndex(generation)
        self._saved[ns] = (loaded.generation, loaded.seq)
        return loaded

    def _save(self, ns: str, idx: LexicalIndex) -> None:
        if idx.n < self.SNAPSHOT_MIN or self._saved.get(ns) == (idx.generation, idx.seq):
            return
        try:
            if lexical_files.save(self.store, ns, idx, self.snapshot_key()):
                self._saved[ns] = (idx.generation, idx.seq)
        except OSError as e:  # a full disk or a read-only directory costs the next process a rebuild, no more
            log.warning("could not save the BM25 snapshot of namespace %r: %s", ns, e)

    def save_snapshots(self) -> None:
        """Write the snapshot of each content index changed since its last file (from :data:`SNAPSHOT_MIN`
        live items): what :meth:`SearchIndex.close <memrl.memory.search.hybrid.SearchIndex.close>` calls."""
        with self._lock:
            for ns, idx in list(self._content.items()):
                self._save(ns, idx)

    def keys(self, ns: str) -> LexicalIndex:
        """The retrieval-keys index of ``ns`` (every keyed item of the namespace, rebuilt when its keys
        version or generation changes)."""
        with self._lock:
            _, version = self.store.keys_state(ns)
            return self._keys.current(ns, version)

    def _build_keys(self, ns: str, generation: int, version: int) -> LexicalIndex:
        idx = LexicalIndex(generation, version)
        for rid, text in self.store.keys_rows(ns):
            idx.upsert(rid, text)
        return idx

    def top(
        self,
        ns: str,
        query: str,
        k: int,
        *,
        keys: bool = False,
        types: Sequence[str] | None = None,
        allowed: np.ndarray | None = None,
    ) -> list[tuple[int, float]]:
        """The ``k`` best live items of ``ns`` by BM25 of ``query`` over their content, or over their
        retrieval keys (``keys``): :class:`~memrl.memory.store.interface.LexicalRanker`."""
        codes = [self.type_code[t] for t in types] if types else None
        content = self.content(ns)
        if not keys:
            return bm25_top(content, query, k, type_codes=codes, allowed=allowed)
        live = functools.partial(content.live_mask, type_codes=codes)
        return bm25_top(self.keys(ns), query, k, only=live, allowed=allowed)

    def forget(self, ns: str) -> None:
        """``ns`` was replaced (reset, import): its indexes go, and it leaves its clone family."""
        with self._lock:
            self._content.forget(ns)
            self._keys.forget(ns)
            self._family.pop(ns, None)
            self._saved.pop(ns, None)


def bm25_top(
    index: LexicalIndex,
    query: str,
    k: int,
    *,
    type_codes: Sequence[int] | None = None,
    allowed: np.ndarray | None = None,
    only: Any = None,
) -> list[tuple[int, float]]:
    """The ``k`` best (rid, BM25 score) of ``index`` for the free-text ``query`` (:func:`query_terms`)."""
    return index.top(query_terms(query), k, type_codes=type_codes, allowed=allowed, only=only)
