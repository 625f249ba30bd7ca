import sys, time, numpy as np
from pathlib import Path
from bench import peers
from bench.store_data import make_corpus
n=int(sys.argv[1]); t=time.perf_counter(); corpus=make_corpus(0,n,20000)
p=peers.MemrlPeer(Path(sys.argv[2])); p.insert(corpus.texts[:n], corpus.vectors[:n]); print("insert", time.perf_counter()-t, flush=True)
t=time.perf_counter(); p.dense(corpus.vectors[0],10,"q"); print("first dense (matrix+graph)", time.perf_counter()-t, flush=True)
t=time.perf_counter(); p._search("cold query trounroukpaik", corpus.vectors[0], "dense", 10); print("default dense (facts)", time.perf_counter()-t, flush=True)
t=time.perf_counter(); p.text("cold query trounroukpaik",10); print("first bm25 (postings+terms)", time.perf_counter()-t, flush=True)
t=time.perf_counter(); p.hybrid("cold query trounroukpaik",corpus.vectors[0],10); print("first hybrid", time.perf_counter()-t, flush=True)
t=time.perf_counter(); p.loop.run_until_complete(p.mem.close()); print("close", time.perf_counter()-t, flush=True)
