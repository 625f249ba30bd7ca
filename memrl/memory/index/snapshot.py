"""Snapshot files of the per-namespace indexes: what a new process loads instead of rebuilding from the store.

Search keeps per namespace, in the process, what it cannot ask the database for cheaply: the dense matrix
(:mod:`memrl.memory.index.dense`), the BM25 postings (:mod:`memrl.memory.index.lexical`) and each item's
signals (:meth:`memrl.memory.search.hybrid.SearchIndex._facts`). Each follows the store from the history
sequence number it reflects (:mod:`memrl.memory.store.follow`), so a copy of one written at sequence ``S`` is
as good as a rebuild once the rows changed after ``S`` are applied, *if* it really is this database's state
at ``S``. A snapshot therefore carries a stamp, and :func:`read` returns it only when the stamp matches:

- the format, the kind of index, the namespace, the key it was built with (model and dimension, options),
- the namespace's generation (it only grows: a reset, a drop or a clone onto the namespace changes it),
- ``seq`` and the time the store recorded for history row ``seq`` (:func:`stamp`): a file left by another
  database at the same path, or by a later life of a backup restored over it, names a row this database
  does not have, or has with another time;
- a checksum of each array (XXH3-64: 10 GB/s here, where zlib's CRC-32 does 0.9 GB/s and would cost a
  second and a half on a million 384-d vectors), so a damaged byte anywhere is caught.

A file that fails any of these is rebuilt from the store, never trusted. One file per snapshot, written to
a temporary name and renamed over the old one, so a crash mid-write leaves the old file or none. Large
arrays come back memory-mapped copy-on-write: their checksums read the file through a map closed after, so
the array's own map holds only the pages its searches touch, and the index may change its copy without touching the file.

Layout: ``MAGIC``, the header's length (8 bytes, little-endian), the header (JSON: ``meta`` and, per array,
dtype, shape, offset and checksum), then each array's bytes at a 64-byte aligned offset.
"""

from __future__ import annotations

import hashlib
import json
import mmap
import os
import struct
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import xxhash

from memrl.loading import cache_root

FORMAT = 1
MAGIC = b"MEMRLSNAP\x01"
ALIGN = 64
#: Arrays from this size come back memory-mapped (copy-on-write); smaller ones are read into memory.
MMAP_FROM = 1 << 20


def snapshot_dir(db: Any) -> Path | None:
    """The folder of the snapshots of the store at ``db`` (its ``path``): ``<db>.index/`` beside a SQLite
    file; for a server database (a ``postgres://`` URL, password removed) a folder of this machine's cache,
    ``$MEMRL_CACHE_DIR/index/<hash of the URL>/``, so each client keeps its own copy, stamped like a file's
    and checked against the server's history as one (``MEMRL_SERVER_INDEX_FILES=0``: none, each process
    rebuilds); None for an in-memory store."""
    if not isinstance(db, str) or not db or db == ":memory:" or db.startswith("file::memory:"):
        return None
    if db.startswith(("postgres://", "postgresql://")):
        if os.environ.get("MEMRL_SERVER_INDEX_FILES", "1").strip().lower() in ("0", "off", "false", "no"):
            return None  # no copy of a server's data on this machine: each process rebuilds
        url = "postgresql://" + db.split("://", 1)[1]
        return cache_root() / "index" / hashlib.sha256(url.encode()).hexdigest()[:24]
    return Path(db + ".index")


def snapshot_path(db: Any, ns: str, kind: str, key: str) -> Path | None:
    """Where ``ns``'s snapshot of ``kind`` built with ``key`` lives for the store at ``db``:
    ``<snapshot_dir>/<hash>.snap`` (:func:`snapshot_dir`); None for an in-memory store."""
    folder = snapshot_dir(db)
    if folder is None:
        return None
    name = hashlib.sha256(f"{ns}\0{kind}\0{key}".encode()).hexdigest()[:32]
    return folder / f"{name}.snap"


def stamp(store: Any, ns: str, seq: int) -> dict[str, Any] | None:
    """What makes a snapshot of ``ns`` at history ``seq`` this store's: generation, seq and the time of that
    history row. None when there is nothing to stamp (``seq`` 0, or no such row)."""
    if seq <= 0:
        return None
    at = store.seq_time(seq)
    if at is None:
        return None
    return {"generation": store.generation(ns), "seq": int(seq), "seq_at": at}


def load_stamped(
    store: Any, kind: str, ns: str, key: str, generation: int
) -> tuple[dict[str, Any], dict[str, np.ndarray]] | None:
    """(meta, arrays) of ``ns``'s snapshot of ``kind`` built with ``key``, when it is this store's at
    ``generation`` and whole (:func:`read`, then its history row ``seq`` checked against the store's); None
    otherwise: no file, or one the caller must rebuild."""
    path = snapshot_path(getattr(store, "path", None), ns, kind, key)
    if path is None or not path.exists():
        return None
    got = read(path, {"kind": kind, "ns": ns, "key": key, "generation": generation})
    if got is None:
        return None
    seq = got[0].get("seq")
    if not isinstance(seq, int) or seq <= 0 or store.seq_time(seq) != got[0].get("seq_at"):
        return None  # another database's file, or this one's from a history it no longer has
    return got


def save_stamped(store: Any, kind: str, ns: str, key: str, generation: int, seq: int,
                 arrays: Callable[[], Mapping[str, np.ndarray]]) -> bool:  # fmt: skip
    """Write ``ns``'s snapshot of ``kind`` at history ``seq`` (``arrays()`` gives its content, built only when
    there is somewhere to write it); False when there is not, or nothing to stamp it with (no history row
    ``seq``, or ``ns`` was replaced since: its generation is no longer ``generation``). OSError propagates."""
    path = snapshot_path(getattr(store, "path", None), ns, kind, key)
    if path is None:
        return False
    st = stamp(store, ns, seq)
    if st is None or st["generation"] != generation:
        return False
    write(path, {"kind": kind, "ns": ns, "key": key, **st}, arrays())
    return True


def _pad(n: int) -> int:
    return (-n) % ALIGN


def checksum(a: np.ndarray) -> int:
    return xxhash.xxh3_64_intdigest(memoryview(np.ascontiguousarray(a)).cast("B"))


def file_checksum(path: Path, at: int, nbytes: int) -> int:
    """:func:`checksum` of the ``nbytes`` bytes of ``path`` from offset ``at``, through a map of its own that
    is closed on return (half the time of reading the bytes into a buffer: 0.2 s against 0.36 s for 1.5 GB
    here), so the pages it read are no longer this process's. ValueError when the file ends first."""
    if nbytes == 0:
        return xxhash.xxh3_64_intdigest(b"")
    if at + nbytes > path.stat().st_size:
        raise ValueError(f"{path}: ends before byte {at + nbytes}")
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        view = memoryview(m)
        try:
            return xxhash.xxh3_64_intdigest(view[at : at + nbytes])
        finally:
            view.release()


def write(path: Path, meta: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> None:
    """Write ``arrays`` with ``meta`` to ``path`` atomically (temporary file, fsync, rename)."""
    arrays = {k: np.ascontiguousarray(v) for k, v in arrays.items()}
    for k, v in arrays.items():
        if v.dtype.hasobject:
            raise TypeError(f"snapshot array {k!r} holds Python objects")
    entries: dict[str, dict[str, Any]] = {}
    offset = 0
    for k, v in arrays.items():
        entries[k] = {"dtype": v.dtype.str, "shape": list(v.shape), "offset": offset,
                      "xxh3": checksum(v)}  # fmt: skip
        offset += v.nbytes + _pad(v.nbytes)
    header = json.dumps({"format": FORMAT, "meta": dict(meta), "arrays": entries}).encode()
    start = len(MAGIC) + 8 + len(header)
    start += _pad(start)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(MAGIC + struct.pack("<Q", len(header)) + header)
            f.write(b"\0" * (start - f.tell()))
            for v in arrays.values():
                if v.nbytes:
                    f.write(memoryview(v).cast("B"))
                f.write(b"\0" * _pad(v.nbytes))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def read(path: Path | None, expect: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, np.ndarray]] | None:
    """(meta, arrays) of the snapshot at ``path`` when every item of ``expect`` equals its meta's and the file
    is whole (sizes, checksums); None otherwise (no file, another format, another stamp, damage)."""
    if path is None:
        return None
    try:
        size = path.stat().st_size
        got = _header(path, size)
        if got is None:
            return None
        header, n = got
        meta = header["meta"]
        if any(meta.get(k) != v for k, v in expect.items()):
            return None
        start = len(MAGIC) + 8 + n
        start += _pad(start)
        arrays: dict[str, np.ndarray] = {}
        for k, e in header["arrays"].items():
            dtype, shape = np.dtype(e["dtype"]), tuple(e["shape"])
            count = int(np.prod(shape, dtype=np.int64))
            at = start + int(e["offset"])
            if at + count * dtype.itemsize > size:
                return None  # truncated
            if count == 0:
                a = np.zeros(shape, dtype=dtype)
            elif count * dtype.itemsize >= MMAP_FROM:
                # a plain array over the map (its base keeps the map open): slices of a memmap are memmaps,
                # whose bookkeeping cost a search more than the slices' reads
                a = np.memmap(path, dtype=dtype, mode="c", offset=at, shape=shape).view(np.ndarray)
                # checked through a map of its own, closed after: the array's map starts with no page
                # read, and holds only those the searches touch
                if file_checksum(path, at, count * dtype.itemsize) != e["xxh3"]:
                    return None
            else:
                a = np.fromfile(path, dtype=dtype, count=count, offset=at).reshape(shape)
                if checksum(a) != e["xxh3"]:
                    return None
            arrays[k] = a
    except (OSError, ValueError, KeyError, TypeError, struct.error):
        return None
    return meta, arrays


def _header(path: Path, size: int) -> tuple[dict[str, Any], int] | None:
    """(the header, its length) of the file at ``path`` of ``size`` bytes, when it is a snapshot of this
    format; None otherwise. OSError, ValueError and struct.error propagate."""
    with open(path, "rb") as f:
        if f.read(len(MAGIC)) != MAGIC:
            return None
        (n,) = struct.unpack("<Q", f.read(8))
        if n > size:
            return None
        got = json.loads(f.read(n))
    return (got, n) if isinstance(got, dict) and got.get("format") == FORMAT else None


def head(path: Path) -> dict[str, Any] | None:
    """The meta of the snapshot at ``path`` (its header alone), or None when it is not one of this format."""
    try:
        got = _header(path, path.stat().st_size)
        meta = got[0].get("meta") if got is not None else None
        return meta if isinstance(meta, dict) else None
    except (OSError, ValueError, KeyError, TypeError, struct.error):
        return None


#: A temporary file (``NAME.PID.tmp``) older than this is a killed writer's, not one being written.
TMP_AGE = 3600.0


def prune(store: Any, now: float | None = None) -> list[Path]:
    """Delete the snapshot files beside ``store`` that no process can load again: a namespace's files of a
    generation it no longer has (dropped, reset, cloned over, replaced by an import: generations only
    grow), files that are not snapshots of this format, and temporary files older than :data:`TMP_AGE`
    (a writer killed before its rename). Returns what was deleted. Files of other options (another model
    or analyzer) are kept: a search with those options loads them."""
    db = getattr(store, "path", None)
    probe = snapshot_path(db, "", "", "")
    if probe is None or not probe.parent.is_dir():
        return []
    now = time.time() if now is None else now
    gone: list[Path] = []
    generations: dict[str, int] = {}
    for f in sorted(probe.parent.iterdir()):
        try:
            if f.name.endswith(".tmp"):
                stale = now - f.stat().st_mtime > TMP_AGE
            elif f.suffix == ".snap":
                meta = head(f)
                ns = meta.get("ns") if meta is not None else None
                if isinstance(ns, str) and ns not in generations:
                    generations[ns] = store.generation(ns)
                gen = meta.get("generation") if meta is not None else None
                # older than the namespace now (one written since for a newer generation stays)
                stale = not isinstance(ns, str) or not isinstance(gen, int) or gen < generations[ns]
            else:
                continue
            if stale:
                f.unlink()
                gone.append(f)
        except OSError:  # removed by another process meanwhile, or not ours to remove
            continue
    return gone


def pack_strings(values: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Strings as (UTF-8 bytes, offsets): :func:`unpack_strings` reverses it."""
    data = [v.encode() for v in values]
    offsets = np.zeros(len(data) + 1, dtype=np.int64)
    np.cumsum([len(d) for d in data], out=offsets[1:])
    return np.frombuffer(b"".join(data), dtype=np.uint8), offsets


def unpack_strings(data: np.ndarray, offsets: np.ndarray) -> list[str]:
    raw = data.tobytes()
    o = offsets.tolist()
    return [raw[o[i] : o[i + 1]].decode() for i in range(len(o) - 1)]


def json_key(value: Any) -> str:
    """A snapshot key from a JSON-able value (options an index was built with)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def pack_json(value: Any) -> np.ndarray:
    """A JSON-able value as bytes (one array)."""
    return np.frombuffer(json.dumps(value, separators=(",", ":")).encode(), dtype=np.uint8)


def unpack_json(data: np.ndarray) -> Any:
    return json.loads(data.tobytes())
