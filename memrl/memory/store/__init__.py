"""The store every back-end implements: :class:`Store` (items, core memory, namespaces, retrieval keys,
expiry and an undoable history over SQL any back-end runs) and the interface a back-end fills in; the
state of a namespace at an earlier time (:mod:`.past`); export and import (:mod:`.transfer`).
Imports only :mod:`memrl.memory.records`.
"""

from memrl.memory.store.base import (
    CONTENT_DERIVED_KEYS,
    Change,
    NewItem,
    Store,
    content_hash,
    new_id,
    strip_derived,
)
from memrl.memory.store.expiry import EXPIRES_AT, expiry_time
from memrl.memory.store.nesting import patience
from memrl.memory.store.past import AsOf, item_at, state_at, to_time, versions
from memrl.memory.store.transfer import (
    ImportReader,
    ImportRefused,
    export_namespace,
    import_namespace,
    read_jsonl,
    write_jsonl,
)  # fmt: skip

__all__ = [
    "CONTENT_DERIVED_KEYS", "EXPIRES_AT", "AsOf", "Change", "ImportReader", "ImportRefused", "NewItem", "Store",
    "content_hash", "export_namespace", "expiry_time", "import_namespace", "item_at", "new_id", "patience", "read_jsonl",
    "state_at", "strip_derived", "to_time", "versions", "write_jsonl",
]  # fmt: skip
