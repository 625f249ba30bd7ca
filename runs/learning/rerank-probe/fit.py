import numpy as np, json, sys
from sklearn.ensemble import HistGradientBoostingClassifier
from sklearn.linear_model import LogisticRegression
d = np.load(sys.argv[1]); X, Y, G, C, nev, train = d["X"], d["Y"], d["G"], d["C"], d["nev"], set(d["train"])
nq = len(C)
starts = np.searchsorted(G, np.arange(nq)); ends = np.searchsorted(G, np.arange(nq), side="right")
def recall(scores, qs, k=10):
    out = []
    for q in qs:
        s, e = starts[q], ends[q]
        order = np.argsort(-scores[s:e], kind="stable")[:k] if scores is not None else np.arange(min(k, e - s))
        out.append(min(Y[s:e][order].sum(), nev[q]) / nev[q])
    return float(np.mean(out))
allq = np.arange(nq)
print("baseline all", round(recall(None, allq), 4), "upper bound in depth", round(np.mean([min(Y[starts[q]:ends[q]].sum(), nev[q]) / nev[q] for q in allq]), 4))
trq = np.array([q for q in allq if C[q] in train])
print("baseline train convs", round(recall(None, trq), 4), len(trq))
rank_feat = np.zeros(len(G))
for q in allq:
    rank_feat[starts[q]:ends[q]] = np.arange(ends[q] - starts[q])
Xr = np.column_stack([X, rank_feat])
def loco(make, Xm):
    res = []
    for held in sorted(train):
        tq = [q for q in trq if C[q] != held]; hq = [q for q in trq if C[q] == held]
        rows = np.concatenate([np.arange(starts[q], ends[q]) for q in tq])
        m = make().fit(Xm[rows], Y[rows])
        sc = np.zeros(len(G)); hrows = np.concatenate([np.arange(starts[q], ends[q]) for q in hq])
        sc[hrows] = m.predict_proba(Xm[hrows])[:, 1]
        res.append((recall(sc, hq), len(hq)))
    return sum(r * n for r, n in res) / sum(n for _, n in res)
for name, make, Xm in [
    ("logistic", lambda: LogisticRegression(C=1.0, max_iter=2000), Xr),
    ("hgb d3 lr.05 200", lambda: HistGradientBoostingClassifier(max_depth=3, learning_rate=0.05, max_iter=200, random_state=0), Xr),
    ("hgb d5 lr.05 300", lambda: HistGradientBoostingClassifier(max_depth=5, learning_rate=0.05, max_iter=300, random_state=0), Xr),
    ("hgb leaf15 lr.1 100", lambda: HistGradientBoostingClassifier(max_leaf_nodes=15, learning_rate=0.1, max_iter=100, random_state=0), Xr),
]:
    print(name, round(loco(make, Xm), 4), flush=True)
