import sys, time, cProfile, pstats, numpy as np
t0=time.perf_counter()
from bench import peers
from pathlib import Path
p=peers.MemrlPeer(Path(sys.argv[1]))
import memrl
t1=time.perf_counter()
p.open()
pr=cProfile.Profile(); pr.enable()
mode=sys.argv[2]
q=np.ones(384,dtype=np.float32)/384**.5
if mode=="dense": hits=p.dense(q,10,"cold query")
elif mode=="default": hits=p._search("cold query", q, "dense", 10)
elif mode=="bm25": hits=p.text("cold query trounroukpaik",10)
else: hits=p.hybrid("cold query trounroukpaik",q,10)
pr.disable()
t2=time.perf_counter()
print(mode, "import", round(t1-t0,2), "first", round(t2-t1,2), len(hits))
pstats.Stats(pr).sort_stats("cumulative").print_stats(45)
