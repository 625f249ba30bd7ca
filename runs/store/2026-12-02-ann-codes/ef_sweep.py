"""At 1M: memrl's dense vector search (PLAIN) recall@10 against numpy's exact top 10 and p50, per efSearch."""
import json, sys, time
import numpy as np
from pathlib import Path
from bench import peers
from bench.store_data import DIM, QUERY_NOISE
from memrl.memory.index import ann
from memrl.memory.index.ann import exact_scores

p = peers.MemrlPeer(Path(sys.argv[1])); p.open()
q0 = np.ones(DIM, dtype=np.float32) / DIM**0.5
p.dense(q0, 10, "x")
idx = p.mem.index._indexes.current(peers.NAMESPACE)
rng = np.random.default_rng(1)
nq = int(sys.argv[2])
qs = idx.matrix[rng.integers(0, idx.n, size=nq)] + (QUERY_NOISE / DIM**0.5) * rng.standard_normal((nq, DIM))
qs = (qs / np.linalg.norm(qs, axis=1, keepdims=True)).astype(np.float32)
exact = []
for v in qs:
    rids = idx.rids[np.argsort(-exact_scores(idx.matrix, v), kind="stable")[:10]].tolist()
    exact.append({int(it.id[1:]) for it in p.mem.store.get_many_by_rid(rids).values()})
out = {"graph": type(idx.ann.index).__name__, "n": int(idx.n), "queries": nq, "rows": []}
for ef in [int(x) for x in sys.argv[3].split(",")]:
    ann.AnnGraph.EF_SEARCH = ef
    ts, rec = [], []
    for v, e in zip(qs, exact):
        t = time.perf_counter(); got = p.dense(v, 10, "x"); ts.append((time.perf_counter() - t) * 1e3)
        rec.append(len(set(got) & e) / 10)
    ts.sort()
    row = {"ef_search": ef, "recall_at_10": sum(rec) / len(rec), "p50_ms": round(ts[len(ts) // 2], 2), "p99_ms": round(ts[int(0.99 * len(ts))], 2)}
    out["rows"].append(row); print(row, flush=True)
print(json.dumps(out))
