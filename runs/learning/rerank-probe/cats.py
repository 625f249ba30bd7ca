import asyncio, json, numpy as np
from memrl.eval.retrieval import load_conversations
from memrl.eval.retrieval.config import RetrievalConfig
d = np.load("runs/learning/rerank-probe/feat100.npz"); Y, G, C, nev = d["Y"], d["G"], d["C"], d["nev"]
config = RetrievalConfig(dataset="locomo")
convs = load_conversations(config)
cats = [q.category for c in convs for q in c.questions if config.selects(q) and q.evidence]
nq = len(C); assert len(cats) == nq, (len(cats), nq)
starts = np.searchsorted(G, np.arange(nq)); ends = np.searchsorted(G, np.arange(nq), side="right")
for cat in ("multi-hop", "temporal", "open-domain", "single-hop"):
    qs = [q for q in range(nq) if cats[q] == cat]
    r10 = np.mean([min(Y[starts[q]:starts[q] + 10].sum(), nev[q]) / nev[q] for q in qs])
    r100 = np.mean([min(Y[starts[q]:ends[q]].sum(), nev[q]) / nev[q] for q in qs])
    print(cat, len(qs), round(r10, 3), round(r100, 3))
