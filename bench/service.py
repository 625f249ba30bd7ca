"""Load test of memrl's HTTP servers on loopback: requests per second of the memory API and the reward server,
and a multi-tenant phase with every browser defence on.

    flock /work/cpu.lock .venv/bin/python -m bench.service [--clients 8] [--requests 100] [--tenants 8]

N concurrent clients (threads with keep-alive connections) each send a fixed number of requests to a real
uvicorn server on 127.0.0.1: adds, then searches, on one namespace of a fresh SQLite file (hashing
embedder, so the figure is the service's own cost, not an embedding model's), then batches of 24 items
to the reward server. Every add is verified afterwards (none lost). The peer in the same run is the same
operation called in-process on ``Memory`` from one thread (no HTTP): ``http_vs_inprocess`` is the ratio.

Tenants phase (``tenants``): one namespace per tenant (8 by default), each with its own scoped token. At
once: a writer per tenant (REST adds sending the page's ``Origin``, so the Origin check runs on each), a
reader per tenant (searches), a browser per tenant (the web page's add form, with its cookie and CSRF
token), one probe of another's namespace per writer (must be 403), and an isolation probe: a fixed
namespace searched over and over in BM25 and hybrid mode while the tenants store the very words it
searches for; every answer must equal the one before the load (ids, order and scores): ``isolation``
counts the probes and the mismatches. p50/p99 per kind, unexpected statuses as errors, every write checked.

Remember phase (``remember``): agent jobs, a conversation posted to ``/v1/namespaces/{ns}/remember?wait=true``
by each client on its own namespace, MemBuilder's four agents answered by an instant scripted model, so the
figure is the job machinery's own cost (queue, scratch clone, diff, one-batch commit): jobs per minute, p50/p99
of the request and of the job (created to finished), every job checked succeeded with its events.
``--remember-offline`` runs it again with the offline local model (slow: ``--remember-jobs`` jobs in all).
Prints one JSON line last.
"""

from __future__ import annotations

import argparse
import json
import re
import tempfile
import threading
import time
from pathlib import Path

from memrl.agents.jobs import JobRunner
from memrl.llm.scripted import ScriptedLLM
from memrl.memory.embedders.providers import HashingEmbedder
from memrl.memory.facade.blocking import Memory
from memrl.memory.facade.memory import AsyncMemory
from memrl.memory.jobs.table import JobTable
from memrl.server.http import ServerThread, Tokens
from memrl.server.load import add_request, run_load, search_request
from memrl.server.memory_api import create_app
from memrl.server.reward_api import create_reward_app

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


PROBE = ["Alice moved to Lisbon in May", "Alice paints the Lisbon coast", "A cat named Pastel",
         "The tram to Belem", "Sourdough bread every Sunday", "The ferry across the Tagus"]  # fmt: skip
PROBE_QUERIES = ["Lisbon tram", "cat Pastel", "bread Sunday", "ferry Tagus river"]


def tenants(tmp: Path, n: int, k: int) -> dict:
    """The tenants phase (see the module docstring)."""
    import httpx

    secrets = {f"t{i}": f"tenant-secret-{i:04d}" for i in range(n)}
    specs = [f"{ns}={tok}:{ns}" for ns, tok in secrets.items()] + ["probe=probe-secret-01:probe"]
    memory = AsyncMemory(tmp / "tenants.db", embedder=HashingEmbedder(128))
    out: dict = {"tenants": n}
    with ServerThread(create_app(memory, Tokens.parse(specs))) as server:
        url = server.base_url
        probe = httpx.Client(base_url=url, headers={"Authorization": "Bearer probe-secret-01"}, timeout=60)
        for text in PROBE:
            probe.post("/v1/namespaces/probe/memories", json={"content": text}).raise_for_status()

        def probe_answers() -> list:
            return [[(h["id"], h["score"], h["bm25_score"]) for h in probe.post("/v1/namespaces/probe/search",
                     json={"query": q, "mode": mode, "top_k": 5}).json()]
                    for q in PROBE_QUERIES for mode in ("bm25", "hybrid")]  # fmt: skip

        baseline = probe_answers()
        names = list(secrets)
        words = " ".join(PROBE_QUERIES)
        origin = {"Origin": url}

        def headers(i: int) -> dict[str, str]:
            return {"Authorization": f"Bearer {secrets[names[i]]}", **origin}

        def write(c: int, i: int) -> tuple:
            if i == 0:  # one attempt at another tenant's namespace: must be refused
                return ("POST", f"/v1/namespaces/{names[(c + 1) % n]}/memories", {"content": "intrusion"})
            return (
                "POST",
                f"/v1/namespaces/{names[c]}/memories",
                {"content": f"{names[c]} note {i}: {words}"},
            )

        def read(c: int, i: int) -> tuple:
            return ("POST", f"/v1/namespaces/{names[c]}/search", {"query": f"note {i} {words}", "top_k": 10})

        forms: dict = {"latencies": [], "statuses": {}}
        lock = threading.Lock()

        def browser(ci: int) -> None:
            ns = names[ci]
            with httpx.Client(base_url=url, cookies={"memrl_token": secrets[ns]}, timeout=60) as c:
                token = re.search(r'name="csrf" value="([0-9a-f]+)"', c.get(f"/ns/{ns}").text).group(1)
                barrier.wait()
                for i in range(k // 4):
                    t0 = time.perf_counter()
                    r = c.post(f"/ns/{ns}/add", data={"csrf": token, "content": f"{ns} form {i}", "type": "semantic"},
                               headers=origin, follow_redirects=False)  # fmt: skip
                    with lock:
                        forms["latencies"].append(time.perf_counter() - t0)
                        forms["statuses"][r.status_code] = forms["statuses"].get(r.status_code, 0) + 1

        isolation = {"probes": 0, "mismatches": 0}
        stop = threading.Event()

        def prober() -> None:
            barrier.wait()
            while not stop.is_set():
                got = probe_answers()
                isolation["probes"] += 1
                isolation["mismatches"] += got != baseline

        barrier = threading.Barrier(2 + n + 1 + 1)  # two loads, the browsers, the prober, this thread
        reports: dict = {}
        threads = [threading.Thread(target=browser, args=(i,)) for i in range(n)]
        threads.append(threading.Thread(target=prober))
        threads += [
            threading.Thread(target=lambda key=key, mk=mk: reports.__setitem__(key, run_load(
                url, None, clients=n, per_client=k, make_request=mk, client_headers=headers, barrier=barrier)))
            for key, mk in (("write", write), ("read", read))
        ]  # fmt: skip
        for t in threads:
            t.start()
        barrier.wait()
        t0 = time.perf_counter()
        for t in threads[:n]:
            t.join()
        for t in threads[n + 1 :]:
            t.join()
        seconds = time.perf_counter() - t0
        stop.set()
        threads[n].join()
        probe.close()

    w, r = reports["write"], reports["read"]
    refused = sum(1 for c, i, status, _ in w.results if i == 0 and status == 403)
    write_errors = sum(1 for c, i, status, _ in w.results if status != (403 if i == 0 else 201))
    read_errors = sum(1 for *_, status, _ in r.results if status != 200)
    stored = {(i.namespace, i.content) for ns in names for i in memory.store.list(ns)}
    wanted = {(names[c], f"{names[c]} note {i}: {words}") for c in range(n) for i in range(1, k)}
    wanted |= {(ns, f"{ns} form {i}") for ns in names for i in range(k // 4)}
    lat = sorted(forms["latencies"])
    out.update({
        "seconds": round(seconds, 2),
        "write": {**w.summary(), "errors": write_errors, "scope_refused": f"{refused}/{n}"},
        "read": {**r.summary(), "errors": read_errors},
        "browser_form": {"requests": len(lat), "p50_ms": round(1000 * lat[len(lat) // 2], 2) if lat else None,
                         "p99_ms": round(1000 * lat[min(len(lat) - 1, int(0.99 * len(lat)))], 2) if lat else None,
                         "statuses": forms["statuses"], "errors": sum(v for s, v in forms["statuses"].items() if s != 303)},
        "lost_writes": len(wanted - stored),
        "leaked_writes": sum(1 for ns, text in stored if not text.startswith(ns)),
        "isolation": isolation,
    })  # fmt: skip
    return out


ANSWERS = {
    "core": {"operation": "APPEND", "content": "The user lives in Lisbon."},
    "episodic": {"operations": [{"operation": "ADD", "memory": "2024-05-01: the user moved to Lisbon"}]},
    "semantic": {"operations": [{"operation": "ADD", "memory": "User - Home: Lisbon"}]},
    "procedural": {"operations": []},
}
CONVERSATION = [
    {"role": "user", "content": "I moved to Lisbon in May, to a flat near the river."},
    {"role": "assistant", "content": "Lisbon is lovely in spring. How is the new flat?"},
]


def instant_membuilder(messages, tools, json_schema) -> str:
    """MemBuilder's four agents, answered at once (the scripted model: no model cost in the figure)."""
    kind = next(t for t in ANSWERS if f"is the {t.upper()} memory" in messages[0]["content"])
    return json.dumps(ANSWERS[kind])


def _pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return round(1000 * values[min(len(values) - 1, int(q * len(values)))], 1) if values else 0.0


def remember_phase(tmp: Path, llm, clients: int, per_client: int) -> dict:
    """Agent jobs over HTTP: each client remembers ``per_client`` conversations in its own namespace."""
    memory = AsyncMemory(tmp / f"remember-{llm.provider}.db", embedder=HashingEmbedder(128))
    app = create_app(memory, Tokens.parse([f"bench={TOKEN}:*"]), ui=False, jobs=JobRunner(memory, llm))
    body = {"messages": CONVERSATION, "session_time": "2024-05-01T10:00:00"}
    with ServerThread(app) as server:
        load = run_load(server.base_url, TOKEN, clients=clients, per_client=per_client,
                        make_request=lambda c, i: ("POST", f"/v1/namespaces/user{c}/remember?wait=true&timeout=600",
                                                   body))  # fmt: skip
    table = JobTable(memory.store)
    jobs = [j for c in range(clients) for j in table.list(f"user{c}", limit=per_client + 1)]
    ok = [j for j in jobs if j.status == "succeeded" and j.result.get("events")]
    job_s = [j.finished_at - j.created_at for j in ok]
    return {**load.summary(), "jobs": len(jobs), "failed": len(jobs) - len(ok), "model": llm.name,
            "jobs_per_min": round(60 * len(ok) / load.seconds, 1) if load.seconds else 0.0,
            "job_p50_ms": _pct(job_s, 0.5), "job_p99_ms": _pct(job_s, 0.99),
            "events_per_job": round(sum(len(j.events) for j in ok) / max(1, len(ok)), 2)}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--requests", type=int, default=100, help="requests per client per phase")
    ap.add_argument("--tenants", type=int, default=8, help="namespaces (and tokens) in the tenants phase")
    ap.add_argument("--remember-jobs", type=int, default=4, help="jobs in all with --remember-offline")
    ap.add_argument("--remember-offline", action="store_true",
                    help="also run the remember phase with the offline local model (slow; loads torch)")  # fmt: skip
    ap.add_argument("--only-remember", action="store_true", help="run the remember phase(s) only")
    args = ap.parse_args()
    n, k = args.clients, args.requests
    out: dict = {"clients": n, "requests_per_client": k}
    with tempfile.TemporaryDirectory() as tmp:
        scripted = ScriptedLLM(instant_membuilder, max_concurrency=64)
        out["remember"] = remember_phase(Path(tmp), scripted, n, max(1, k // 10))
        if args.remember_offline:
            from memrl.llm import create_llm

            out["remember_offline"] = remember_phase(Path(tmp), create_llm("local"), 1, args.remember_jobs)
        if args.only_remember:
            print(json.dumps(out))
            return
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
        out["tenants"] = tenants(Path(tmp), args.tenants, k)
    out["http_vs_inprocess"] = {
        "add": round(out["memory_add"]["rps"] / out["inprocess_peer"]["add_rps"], 3),
        "search": round(out["memory_search"]["rps"] / out["inprocess_peer"]["search_rps"], 3),
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
