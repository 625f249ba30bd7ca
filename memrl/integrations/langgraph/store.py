"""``MemrlStore``: LangGraph's ``BaseStore`` over a memrl memory (``pip install 'memrl[langgraph]'``).

    from memrl import Memory
    from memrl.integrations.langgraph import MemrlStore

    store = MemrlStore(Memory("memrl.db"), index={"fields": ["text"]}, ttl={"default_ttl": 60 * 24})
    store.put(("users", "ana"), "city", {"text": "Ana moved to Lisbon"})
    store.search(("users",), query="where does Ana live", limit=3)        # memrl's hybrid search
    graph = builder.compile(store=store)                                   # LangGraph uses it as any store

Every operation is a :class:`~langgraph.store.base.GetOp`, ``PutOp``, ``SearchOp`` or
``ListNamespacesOp`` through ``batch``/``abatch``, with :class:`~langgraph.store.memory.InMemoryStore`'s
semantics (reads see the state before the batch's writes; of several puts of one key the last wins):

- a namespace tuple is one memrl namespace, ``langgraph/users/ana`` (:mod:`.naming`: escaped, reversible);
  a key is the item's id (hashed when memrl cannot take it); the value is kept whole (:mod:`.items`);
- a put replaces the item (memrl ``update``: the old value stays in the item's history and can be
  undone); ``None`` deletes it (memrl's soft delete, restorable); a put after a delete brings the id back;
- ``search`` without a query lists the items of every namespace under the prefix (namespaces in the
  order they were created, items in the order their keys were created), filters their values with
  LangGraph's filter operators, then pages with ``offset``/``limit``; with a query it runs memrl's search
  (``mode``: hybrid, dense or bm25) in each namespace, merges the hits by score and filters them, then
  appends unindexed items without a score when fewer than ``limit`` were found;
- ``list_namespaces`` lists namespaces holding a live item (not those whose items were all deleted,
  which ``InMemoryStore`` keeps listing), with prefix and suffix conditions (``*`` wildcards),
  ``max_depth``, ``limit`` and ``offset``;
- TTL (``TTLConfig``, minutes): a put's ``ttl`` (or ``default_ttl``) becomes memrl's ``expires_at``; a read
  with ``refresh_ttl`` moves it on (a metadata update, once it moves by 1% of the TTL); expired items are
  never returned, and leave search as memrl's expiry has them (its sweep soft-deletes them, op
  ``EXPIRE``); ``sweep_ttl()`` sweeps now, ``start_ttl_sweeper()`` every ``sweep_interval_minutes``.

Built on a :class:`~memrl.memory.Memory`, the blocking and async methods share its loop; on an
:class:`~memrl.memory.AsyncMemory` use one side (:mod:`memrl.integrations.running`).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterable
from typing import Any

from memrl.errors import NotFoundError, ValidationError
from memrl.integrations.langgraph import items as I
from memrl.integrations.langgraph.naming import SEP, check_root, decode_namespace, encode_namespace, item_id
from memrl.integrations.running import Runner, need
from memrl.memory import NewItem

_base = need("langgraph.store.base", "langgraph", "memrl.integrations.langgraph")
GetOp, PutOp, SearchOp, ListNamespacesOp = _base.GetOp, _base.PutOp, _base.SearchOp, _base.ListNamespacesOp
Item, SearchItem = _base.Item, _base.SearchItem

__all__ = ["MemrlStore"]
_TTL_KEYS = {"refresh_on_read", "default_ttl", "sweep_interval_minutes", "omit_expired"}


class MemrlStore(_base.BaseStore):
    """LangGraph's store interface over ``memory`` (a memrl ``Memory`` or ``AsyncMemory``). ``index``:
    LangGraph's ``IndexConfig`` minus the embedder (memrl embeds with the memory's own: ``fields`` says
    what to index, default the whole value); ``ttl``: LangGraph's ``TTLConfig``; ``root``: the prefix of
    the memrl namespaces; ``mode``: memrl's search mode for queries; ``actor``: who the history names."""

    supports_ttl = True

    def __init__(
        self,
        memory: Any,
        *,
        index: dict[str, Any] | None = None,
        ttl: dict[str, Any] | None = None,
        root: str = "langgraph",
        mode: str = "hybrid",
        actor: str = "langgraph",
    ) -> None:
        self._runner = Runner(memory)
        self.memory = self._runner.aio
        index = dict(index or {})
        if "embed" in index:
            raise ValidationError(
                "MemrlStore embeds with the memory's own embedder (AsyncMemory(..., embedder=...)): give "
                "index={'fields': [...]} without 'embed'",
                field="index",
            )
        unknown = set(index) - {"fields", "dims"}
        if unknown:
            raise ValidationError(
                f"unknown index settings {sorted(unknown)}; MemrlStore takes fields", field="index"
            )
        self.fields: list[str] | None = index.get("fields")
        if ttl is not None and set(ttl) - _TTL_KEYS:
            raise ValidationError(f"unknown TTL settings {sorted(set(ttl) - _TTL_KEYS)}", field="ttl")
        self.ttl_config = dict(ttl) if ttl is not None else None
        if mode not in ("hybrid", "dense", "bm25"):
            raise ValidationError(f"mode must be hybrid, dense or bm25, got {mode!r}", field="mode")
        self.root, self.mode, self.actor = check_root(root), mode, actor
        self._sweeper: tuple[threading.Thread, threading.Event] | None = None

    # ------------------------------------------------------------------ the two entry points
    def batch(self, ops: Iterable[Any]) -> list[Any]:
        ops = list(ops)
        return self._runner.sync(lambda: self._batch(ops))

    async def abatch(self, ops: Iterable[Any]) -> list[Any]:
        ops = list(ops)
        return await self._runner.run(lambda: self._batch(ops))

    async def _batch(self, ops: list[Any]) -> list[Any]:
        results: list[Any] = []
        puts: dict[tuple[tuple[str, ...], str], Any] = {}
        touched: dict[tuple[str, str], Any] = {}
        for op in ops:
            _base.validate_op_namespace(op)
            if isinstance(op, GetOp):
                results.append(await self._get(op, touched))
            elif isinstance(op, SearchOp):
                results.append(await self._search(op, touched))
            elif isinstance(op, ListNamespacesOp):
                results.append(await self._list(op))
            elif isinstance(op, PutOp):
                puts[(tuple(op.namespace), op.key)] = op
                results.append(None)
            else:
                raise ValidationError(f"unknown store operation {type(op).__name__}")
        await self._refresh(touched)
        for (namespace, key), op in puts.items():
            await self._put(namespace, key, op)
        return results

    # ------------------------------------------------------------------ reads
    def _item(self, item: Any, parts: dict[str, Any], namespace: tuple[str, ...], score: Any = ...) -> Any:
        args = {"namespace": namespace, "key": parts["key"], "value": parts["value"],
                "created_at": I.utc(parts["created_at"]), "updated_at": I.utc(item.updated_at)}  # fmt: skip
        return Item(**args) if score is ... else SearchItem(**args, score=score)

    async def _find(self, name: str, key: str) -> tuple[Any, dict[str, Any]] | None:
        """The live, unexpired item of ``key`` in namespace ``name`` and its LangGraph parts."""
        try:
            item = await self.memory.get(item_id(key), namespace=name)
        except NotFoundError:
            return None
        parts = I.parts_of(item)
        if parts is None or parts["key"] != key or I.expired(item):
            return None
        return item, parts

    async def _get(self, op: Any, touched: dict) -> Any:
        namespace = tuple(op.namespace)
        found = await self._find(encode_namespace(self.root, namespace), op.key)
        if found is None:
            return None
        if op.refresh_ttl:
            touched[(found[0].namespace, found[0].id)] = found
        return self._item(*found, namespace)

    async def _spaces(self, prefix: tuple[str, ...] = ()) -> list[tuple[str, tuple[str, ...]]]:
        """(name, tuple) of the LangGraph namespaces under ``prefix`` holding a live item, oldest first."""
        out = []
        for ns in sorted(await self.memory.namespaces(), key=lambda n: (n.get("created_at") or 0, n["name"])):
            namespace = decode_namespace(self.root, ns["name"])
            if namespace is not None and ns["items"] > 0 and namespace[: len(prefix)] == prefix:
                out.append((ns["name"], namespace))
        return out

    async def _items(self, name: str) -> list[tuple[Any, dict[str, Any]]]:
        """The live, unexpired LangGraph items of namespace ``name``, in the order their keys were created."""
        now = time.time()
        out = [(it, p) for it in await self.memory.list(namespace=name) if (p := I.parts_of(it)) is not None]
        out = [(it, p) for it, p in out if not I.expired(it, now)]
        return sorted(out, key=lambda x: x[1]["created_at"])

    async def _search(self, op: Any, touched: dict) -> list[Any]:
        if isinstance(op.limit, bool) or not isinstance(op.limit, int) or op.limit < 0:
            raise ValidationError(f"limit must be a whole number from 0, got {op.limit!r}", field="limit")
        if isinstance(op.offset, bool) or not isinstance(op.offset, int) or op.offset < 0:
            raise ValidationError(f"offset must be a whole number from 0, got {op.offset!r}", field="offset")
        spaces = await self._spaces(tuple(op.namespace_prefix))
        found: list[tuple[Any, Any, dict, tuple[str, ...]]] = []  # (score, item, parts, namespace)
        if not op.query:
            for name, namespace in spaces:
                found += [
                    (None, it, p, namespace)
                    for it, p in await self._items(name)
                    if I.matches(p["value"], op.filter)
                ]
            found = found[op.offset : op.offset + op.limit]
        else:
            for name, namespace in spaces:
                live = await self.memory.count(namespace=name)
                top_k = live if op.filter else min(live, op.offset + op.limit)
                if top_k < 1:
                    continue
                hits = await self.memory.search(op.query, namespace=name, top_k=top_k, mode=self.mode,
                                                filters={I.INDEXED: True})  # fmt: skip
                for h in hits:
                    p = I.parts_of(h.item)
                    if p is not None and I.matches(p["value"], op.filter):
                        found.append((h.score, h.item, p, namespace))
            found.sort(key=lambda x: -x[0])
            found = found[op.offset : op.offset + op.limit]
            if len(found) < op.limit:  # as InMemoryStore: unindexed items fill the page, without a score
                for name, namespace in spaces:
                    for it, p in await self._items(name):
                        if (
                            len(found) < op.limit
                            and not it.metadata.get(I.INDEXED)
                            and I.matches(p["value"], op.filter)
                        ):
                            found.append((None, it, p, namespace))
        if op.refresh_ttl:
            touched.update(((it.namespace, it.id), (it, p)) for _, it, p, _ in found)
        return [self._item(it, p, namespace, score) for score, it, p, namespace in found]

    async def _list(self, op: Any) -> list[tuple[str, ...]]:
        await self.asweep_ttl()  # a namespace left with expired items only is not listed (one indexed lookup)
        spaces = [namespace for _, namespace in await self._spaces()]
        for cond in op.match_conditions or ():
            spaces = [ns for ns in spaces if _matches(cond.match_type, tuple(cond.path), ns)]
        spaces = sorted({ns[: op.max_depth] for ns in spaces} if op.max_depth is not None else spaces)
        return spaces[op.offset : op.offset + op.limit]

    # ------------------------------------------------------------------ writes
    async def _refresh(self, touched: dict) -> None:
        """Move the expiry of the read items that have a TTL on (once it moves by 1% of the TTL, a second
        at least: each move is a metadata update in the item's history)."""
        now = time.time()
        for item, parts in touched.values():
            ttl = parts.get("ttl")
            if ttl is None or item.metadata.get(I.EXPIRES_AT, 0) + max(1.0, 0.6 * ttl) > now + 60.0 * ttl:
                continue  # moved by under 1% of the TTL (or a second): not worth a history entry
            meta = {**item.metadata, I.EXPIRES_AT: now + 60.0 * ttl}
            with contextlib.suppress(NotFoundError):  # deleted meanwhile: nothing to refresh
                await self.memory.update(item.id, namespace=item.namespace, metadata=meta, actor=self.actor)

    async def _put(self, namespace: tuple[str, ...], key: str, op: Any) -> None:
        name = encode_namespace(self.root, namespace)
        if op.value is not None and (not namespace or namespace[0] == "langgraph"):
            _base._validate_namespace(namespace)  # LangGraph's rule for puts: not empty, root not "langgraph"
        found = await self._find(name, key)
        mid = item_id(key)
        if op.value is None:
            if found is not None:
                await self.memory.delete(mid, namespace=name, actor=self.actor)
            return
        value = I.check_value(op.value)
        paths = op.index if isinstance(op.index, list) else self.fields
        limit = self.memory.store.max_content_chars
        content, indexed = I.content_of(value, paths, op.index is not False, limit)
        now = time.time()
        created = found[1]["created_at"] if found is not None else now
        try:
            meta = I.metadata_of(key, value, created, indexed, op.ttl, now)
            if found is not None:
                await self.memory.update(mid, content, namespace=name, metadata=meta, actor=self.actor)
                return
            try:  # a live but expired item of this id: replaced by the new one
                await self.memory.get(mid, namespace=name)
                await self.memory.update(mid, content, namespace=name, metadata=meta, actor=self.actor)
            except NotFoundError:
                item = NewItem(content, "semantic", meta, (), None, mid)
                await self.memory.add_many([item], namespace=name, actor=self.actor)
        except ValidationError as e:
            raise ValidationError(
                f"cannot store key {key!r} in namespace {namespace!r}: {e}", field=e.field
            ) from e

    # ------------------------------------------------------------------ TTL sweeps
    async def asweep_ttl(self) -> int:
        """Soft-delete the expired items of this store's namespaces now; returns how many."""
        due = [n for n in self.memory.store.expired_namespaces() if n.startswith(self.root + SEP)]
        return sum([await self.memory.sweep_expired(namespace=n) for n in due])

    def sweep_ttl(self) -> int:
        return self._runner.sync(self.asweep_ttl)

    def start_ttl_sweeper(self, sweep_interval_minutes: float | None = None) -> None:
        """Sweep every ``sweep_interval_minutes`` (default: the TTL config's) on a daemon thread."""
        minutes = sweep_interval_minutes or (self.ttl_config or {}).get("sweep_interval_minutes")
        if not minutes or minutes <= 0:
            raise ValidationError("give sweep_interval_minutes (here or in the TTL config)", field="ttl")
        if self._sweeper is not None:
            return
        stop = threading.Event()

        def loop() -> None:
            while not stop.wait(60.0 * minutes):
                self.sweep_ttl()

        thread = threading.Thread(target=loop, name="memrl-ttl-sweeper", daemon=True)
        self._sweeper = (thread, stop)
        thread.start()

    def stop_ttl_sweeper(self, timeout: float | None = None) -> bool:
        if self._sweeper is None:
            return True
        thread, stop = self._sweeper
        stop.set()
        thread.join(timeout)
        self._sweeper = None
        return not thread.is_alive()

    def close(self) -> None:
        """Stop the sweeper and the private loop (the memory itself is the caller's to close)."""
        self.stop_ttl_sweeper()
        self._runner.close()


def _matches(kind: str, path: tuple[str, ...], namespace: tuple[str, ...]) -> bool:
    """LangGraph's prefix/suffix match of a namespace, ``*`` matching any one label."""
    if len(namespace) < len(path):
        return False
    if kind not in ("prefix", "suffix"):
        raise ValidationError(f"match_type must be prefix or suffix, got {kind!r}")
    n = len(path)
    pairs = (
        zip(namespace[:n], path, strict=True)
        if kind == "prefix"
        else zip(namespace[-n:] if n else (), path, strict=True)
    )
    return all(p == "*" or n == p for n, p in pairs)
