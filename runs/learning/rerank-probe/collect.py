"""Scratch (issue 60): the reranker's feature rows for every LoCoMo question's top-DEPTH hybrid candidates."""
import asyncio, sys, json
import numpy as np
from bench.fit_rerank import collect
from memrl.eval.retrieval.config import RetrievalConfig
from memrl.eval.retrieval.search import namespace_of
from memrl.data.splits import LOCOMO_UPDATE_SPLIT

depth = int(sys.argv[1]); out = sys.argv[2]
config = RetrievalConfig(dataset="locomo", modes=("hybrid",), embed_cache="auto", rerank_depth=depth)
convs, rec = asyncio.run(collect(config))
by_ns = {namespace_of(c): c for c in convs}
qs = {(namespace_of(c), q.question): q for c in convs for q in c.questions if config.selects(q)}
X, Y, G, C = [], [], [], []
gi = 0
for ns, query, keys, x in rec.rows:
    q = qs.get((ns, query))
    if q is None or not q.evidence:
        continue
    conv = by_ns[ns]
    ids = [k[1] if k[0] == "u" else str(k[1]) for k in keys]
    y = [float(bool(set(conv.covered([i])) & set(q.evidence))) for i in ids]
    X.append(x); Y.append(y); G += [gi] * len(ids); C.append(conv.id); gi += 1
np.savez(out, X=np.vstack(X), Y=np.concatenate(Y), G=np.array(G), C=np.array(C),
         nev=np.array([len(qs[(n, q)].evidence) for n, q, _, _ in rec.rows if qs.get((n, q)) is not None and qs[(n, q)].evidence]),
         train=np.array(sorted(LOCOMO_UPDATE_SPLIT["train"])))
print(json.dumps({"questions": gi, "rows": int(sum(len(y) for y in Y))}))
