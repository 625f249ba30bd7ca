"""Many tenants on one store: ``n`` items spread over ``namespaces`` namespaces (item i in namespace
``t{i % namespaces}``), searched one namespace at a time, as a product storing each user's memories would.

Part of ``bench/store.py`` (``--tenants N``): per back-end, the insert rate of the spread, dense / hybrid /
bm25 p50/p99 over queries each aimed at the namespace of its target item, each mode's hit@k (the target in
the top k), the hits that came from another namespace (must be 0: a tenant sees nothing of another), and
the cold first dense and hybrid query of a new :class:`AsyncMemory` on the same database (a new process
opening it: nothing of any namespace is loaded yet). A namespace of fewer items than the ANN threshold is
searched exactly, so no recall against exact is reported here (``bench/store.py``'s single namespace has it).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from bench.store_data import TYPES, Corpus, LookupEmbedder, item_index, make_queries, stats
from memrl.memory.facade.memory import AsyncMemory
from memrl.memory.store.base import NewItem


def tenant(i: int, namespaces: int) -> str:
    return f"t{i % namespaces}"


async def bench_tenants(
    db: str, corpus: Corpus, n: int, namespaces: int, queries: int, top_k: int, batch: int, seed: int
) -> dict[str, Any]:
    """The figures of ``n`` items over ``namespaces`` namespaces in a fresh database ``db`` (module docstring)."""
    embedder = LookupEmbedder(corpus.texts, corpus.vectors, name=f"bench-lookup-{seed}")
    mem = AsyncMemory(db, embedder=embedder, namespace=tenant(0, namespaces))
    t0 = time.perf_counter()
    try:
        for j in range(namespaces):
            own = list(range(j, n, namespaces))
            for b in range(0, len(own), batch):
                items = [
                    NewItem(corpus.texts[i], type=TYPES[i % 3], session=f"s{i // 20}", id=f"m{i}")
                    for i in own[b : b + batch]
                ]
                await mem.add_many(items, namespace=tenant(j, namespaces))
    finally:
        await mem.close()
    insert_s = time.perf_counter() - t0
    qs = make_queries(corpus, n, queries, seed)
    # a new process: the first query of one namespace, dense then hybrid, before anything is loaded
    mem = AsyncMemory(db, embedder=embedder, namespace=tenant(0, namespaces))
    try:
        ns0 = tenant(int(qs.targets[0]), namespaces)
        t0 = time.perf_counter()
        await mem.search(qs.texts[0], namespace=ns0, top_k=top_k, mode="dense", query_vector=qs.vectors[0])
        cold_dense_ms = (time.perf_counter() - t0) * 1e3
        t0 = time.perf_counter()
        await mem.search(qs.texts[0], namespace=ns0, top_k=top_k, mode="hybrid", query_vector=qs.vectors[0])
        cold_hybrid_ms = (time.perf_counter() - t0) * 1e3
        times: dict[str, list[float]] = {m: [] for m in ("dense", "hybrid", "bm25")}
        found: dict[str, list[bool]] = {m: [] for m in times}
        foreign = 0
        for i, target in enumerate(qs.targets):
            ns = tenant(int(target), namespaces)
            for m in times:
                t = time.perf_counter()
                hits = await mem.search(
                    qs.texts[i], namespace=ns, top_k=top_k, mode=m, query_vector=qs.vectors[i]
                )
                times[m].append((time.perf_counter() - t) * 1e3)
                got = [item_index(h.item.id) for h in hits]
                foreign += sum(g % namespaces != int(target) % namespaces for g in got)
                found[m].append(int(target) in got)
    finally:
        await mem.close()
    return {
        "n": n,
        "namespaces": namespaces,
        "insert_per_s": round(n / insert_s),
        "insert_s": round(insert_s, 1),
        "cold_dense_ms": round(cold_dense_ms, 1),
        "cold_hybrid_ms": round(cold_hybrid_ms, 1),
        "hits_from_other_namespaces": foreign,
        **{m: {**stats(t), "hit_at_k": round(float(np.mean(found[m])), 3)} for m, t in times.items()},
    }
