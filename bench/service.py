"""Load test of memrl's HTTP servers on loopback: requests per second of the memory API and the reward server.

    flock /work/cpu.lock .venv/bin/python bench/service.py [--clients 8] [--requests 100]

N concurrent clients (threads with keep-alive connections) each send a fixed number of requests to a real
uvicorn server on 127.0.0.1: adds, then searches, on one namespace of a fresh SQLite file (hashing
embedder, so the figure is the service's own cost, not an embedding model's), then batches of 24 items
to the reward server. Every add is verified afterwards (none lost). The peer in the same run is the same
operation called in-process on ``Memory`` from one thread (no HTTP): ``http_vs_inprocess`` is the ratio.
Prints one JSON line last.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from memrl.memory.embedders import HashingEmbedder  # noqa: E402
from memrl.memory.facade import AsyncMemory, Memory  # noqa: E402
from memrl.server.http import ServerThread, Tokens  # noqa: E402
from memrl.server.load import add_request, run_load, search_request  # noqa: E402
from memrl.server.memory_api import create_app  # noqa: E402
from memrl.server.reward_api import create_reward_app  # noqa: E402

TOKEN = "bench-secret-1"
ITEMS = [
    {"metric": "locomo_f1", "prediction": "She moved in May 2023", "answer": "May 2023", "category": 2},
    {"metric": "token_f1", "prediction": "a red car", "answers": ["the red car", "blue"]},
    {"metric": "memagent", "response": "so \\boxed{Paris}", "answers": ["Paris"]},
] * 8


def inprocess(db: Path, n: int) -> dict[str, float]:
    with Memory(db, embedder=HashingEmbedder(128), namespace="peer") as m:
        t0 = time.perf_counter()
        for i in range(n):
            m.add(f"client 0 note {i} about Lisbon")
        add = n / (time.perf_counter() - t0)
        t0 = time.perf_counter()
        for i in range(n):
            m.search(f"note {i} Lisbon", top_k=10)
        search = n / (time.perf_counter() - t0)
    return {"add_rps": round(add, 1), "search_rps": round(search, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--requests", type=int, default=100, help="requests per client per phase")
    args = ap.parse_args()
    n, k = args.clients, args.requests
    out: dict = {"clients": n, "requests_per_client": k}
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "bench.db"
        memory = AsyncMemory(db, embedder=HashingEmbedder(128))
        app = create_app(memory, Tokens.parse([f"bench={TOKEN}:*"]), ui=False)
        with ServerThread(app) as server:
            adds = run_load(
                server.base_url, TOKEN, clients=n, per_client=k, make_request=add_request("alice")
            )
            searches = run_load(
                server.base_url, TOKEN, clients=n, per_client=k, make_request=search_request("alice")
            )
        stored = {i.content for i in memory.store.list("alice")}
        wanted = {f"client {c} note {i} about Lisbon" for c in range(n) for i in range(k)}
        out["memory_add"] = {**adds.summary(), "lost": len(wanted - stored)}
        out["memory_search"] = searches.summary()
        out["inprocess_peer"] = inprocess(Path(tmp) / "peer.db", n * k)
        with ServerThread(create_reward_app(Tokens.parse([f"bench={TOKEN}:*"]))) as server:
            body = {"items": ITEMS}
            rewards = run_load(server.base_url, TOKEN, clients=n, per_client=k,
                               make_request=lambda c, i: ("POST", "/v1/score", body))  # fmt: skip
        out["reward_score"] = {**rewards.summary(), "items_per_request": len(ITEMS),
                               "items_per_s": round(rewards.rps * len(ITEMS), 1)}  # fmt: skip
    out["http_vs_inprocess"] = {
        "add": round(out["memory_add"]["rps"] / out["inprocess_peer"]["add_rps"], 3),
        "search": round(out["memory_search"]["rps"] / out["inprocess_peer"]["search_rps"], 3),
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
