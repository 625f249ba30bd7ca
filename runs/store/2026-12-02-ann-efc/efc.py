"""Scratch: build the 1M graph with another efConstruction (the store's graph dir moved aside first), then
recall@10 of memrl's vector search (PLAIN) against exact on 100 queries (cold_1m's: rng 0) and 100 of seed 1, per EF_SEARCH."""
import sys, time, json
import numpy as np
from pathlib import Path
from bench import peers
from bench.cold_1m import search_once
from bench.store_data import DIM, QUERY_NOISE
from memrl.memory.index.ann import AnnGraph, exact_scores
efc = int(sys.argv[2]); AnnGraph.EF_CONSTRUCTION = efc
p = peers.MemrlPeer(Path(sys.argv[1])); p.open()
t = time.perf_counter()
search_once(p, "dense", np.ones(DIM, dtype=np.float32) / DIM**0.5, "x")
build_s = time.perf_counter() - t
idx = p.mem.index._indexes.current(peers.NAMESPACE)
print("efConstruction", idx.ann.index.hnsw.efConstruction, "build+first search s", round(build_s, 1), flush=True)
out = {"ef_construction": efc, "build_s": round(build_s, 1)}
for seed in (0, 1):
    rng = np.random.default_rng(seed)
    qs = idx.matrix[rng.integers(0, idx.n, size=100)] + (QUERY_NOISE / DIM**0.5) * rng.standard_normal((100, DIM))
    qs = (qs / np.linalg.norm(qs, axis=1, keepdims=True)).astype(np.float32)
    exact = []
    for v in qs:
        top = idx.rids[np.argsort(-exact_scores(idx.matrix, v), kind="stable")[:10]].tolist()
        exact.append({int(it.id[1:]) for it in p.mem.store.get_many_by_rid(top).values()})
    for ef in (400, 800):
        AnnGraph.EF_SEARCH = ef
        rec, ms, zero = [], [], 0
        for v, want in zip(qs, exact):
            a = time.perf_counter(); got = search_once(p, "dense", v, "x"); ms.append((time.perf_counter() - a) * 1e3)
            r = len(set(got) & want) / 10; rec.append(r); zero += r == 0
        out[f"seed{seed}_ef{ef}"] = {"recall": float(np.mean(rec)), "misses": zero, "p50_ms": float(np.median(ms))}
        print(seed, ef, out[f"seed{seed}_ef{ef}"], flush=True)
p.loop.run_until_complete(p.mem.close())
print(json.dumps(out))
