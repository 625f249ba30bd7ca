import json, sys
from pathlib import Path
import numpy as np
from bench import peers
from bench.cold_1m import search_once
from bench.store_data import DIM, QUERY_NOISE
p = peers.MemrlPeer(Path(sys.argv[1])); p.open()
idx = p.mem.index._indexes.current(peers.NAMESPACE) if hasattr(p.mem.index, "_indexes") else None
search_once(p, "dense", np.ones(DIM, dtype=np.float32) / DIM**0.5, "x")
idx = p.mem.index._indexes.current(peers.NAMESPACE)
rng = np.random.default_rng(7)
rows = rng.integers(0, idx.n, size=40)
texts = [t for _, t in p.mem.store.texts_of(idx.rids[rows].tolist())]
out = {}
for mode in ("default", "hybrid"):
    got = []
    for i, r in enumerate(rows):
        v = idx.matrix[r] + (QUERY_NOISE / DIM**0.5) * rng.standard_normal(DIM)
        v = (v / np.linalg.norm(v)).astype(np.float32)
        words = " ".join(texts[i].split()[:4])
        got.append(search_once(p, mode, v, words))
    out[mode] = got
print(json.dumps(out))
