"""Dense matrices saved beside the store, so a new process maps a namespace's vectors instead of reading them.

Without this, a new process's first dense search of a namespace reads every live row joined with its cached
vector from the database and stacks them (:meth:`memrl.memory.index.dense.DenseIndexes._load`): about half
a second at 30k items, 17 s at 100k on this machine under load, far more at a million. With it, the
namespace's matrix, rids and type codes come from one snapshot file (:mod:`memrl.memory.index.snapshot`,
memory-mapped copy-on-write) and the rows changed since the snapshot's history sequence number are applied
by the usual incremental path, so the result is the rebuilt index's.

When a snapshot is written (a SQLite file store only; namespaces of at least :data:`SNAPSHOT_MIN` vectors):
after a namespace was read whole from the store, after the rows applied since the last save reach a tenth
of the namespace, and when the store is closed. A write that fails is logged and search goes on.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from memrl.memory.index import snapshot

log = logging.getLogger(__name__)

#: Namespaces below this many vectors are read from the store (fast enough) and get no file.
SNAPSHOT_MIN = 1000
#: Save again once the rows applied since the last save reach this share of the namespace.
SAVE_AFTER = 0.1
KIND = "dense"


class DenseFiles:
    """The snapshot side of a :class:`~memrl.memory.index.dense.DenseIndexes` (``owner``)."""

    def __init__(self, owner: Any) -> None:
        self.owner = owner
        self.min_items = SNAPSHOT_MIN

    def key(self) -> str:
        e = self.owner.embedder
        return f"{e.name}:{e.dim}"

    def load(self, ns: str, generation: int, make: Any) -> Any:
        """The index of ``ns`` at ``generation`` from its snapshot (``make(dim, generation)`` gives an empty
        :class:`~memrl.memory.index.dense.DenseIndex`), or None when there is no valid one."""
        got = snapshot.load_stamped(self.owner.store, KIND, ns, self.key(), generation)
        if got is None:
            return None
        meta, a = got
        matrix, rids, types = a["matrix"], a["rids"], a["types"]
        dim = self.owner.embedder.dim
        if matrix.ndim != 2 or matrix.shape[1] != dim or not len(rids) == len(types) == matrix.shape[0]:
            return None
        idx = make(dim, generation)
        idx.matrix, idx.rids, idx.types, idx.n = matrix, rids, types, len(rids)
        idx.row_of = dict(zip(rids.tolist(), range(len(rids)), strict=True))
        idx.seq = idx.saved_seq = int(meta["seq"])
        idx.origin = "snapshot"
        return idx

    def due(self, idx: Any) -> bool:
        """Whether ``idx`` should be saved now (after a sync)."""
        if idx.n < self.min_items or idx.seq <= idx.saved_seq:
            return False
        return idx.saved_seq == 0 or idx.unsaved >= SAVE_AFTER * idx.n

    def save(self, ns: str, idx: Any) -> None:
        """Write ``idx`` (namespace ``ns``) as it is now; a failure is logged, never raised."""
        seq, n = idx.seq, idx.n
        arrays = {"matrix": idx.matrix[:n], "rids": idx.rids[:n], "types": idx.types[:n]}
        try:
            saved = snapshot.save_stamped(
                self.owner.store, KIND, ns, self.key(), idx.generation, seq, lambda: arrays
            )
        except OSError as e:
            log.warning("could not save the dense index of %r: %s", ns, e)
            return
        if saved:
            idx.saved_seq, idx.unsaved = seq, 0

    def save_all(self, indexes: Any) -> None:
        for ns, idx in list(indexes.items()):
            ours = isinstance(getattr(idx, "matrix", None), np.ndarray)  # not a database's own index
            if ours and idx.n >= self.min_items and idx.seq > idx.saved_seq:
                self.save(ns, idx)
