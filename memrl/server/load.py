"""A bounded load generator for memrl's HTTP servers: N concurrent clients, a fixed number of requests each.

Used by the reliability tests (which then verify every write) and by ``bench/service.py`` (which reports
the figures). Each client is a thread with its own keep-alive ``httpx.Client``, so the server sees N real
concurrent connections on loopback.

    report = run_load(base_url, token, clients=8, per_client=50, make_request=add_request("alice"))
    report.rps, report.statuses, report.results    # requests/s, status counts, every response body
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

#: (client index, request index) -> (method, path, json body or None)
RequestMaker = Callable[[int, int], tuple[str, str, Any]]


@dataclass
class LoadReport:
    requests: int
    seconds: float
    statuses: Counter = field(default_factory=Counter)
    results: list[tuple[int, int, int, Any]] = field(default_factory=list)  # (client, i, status, body)
    latencies: list[float] = field(default_factory=list)

    @property
    def rps(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0

    def latency_ms(self, q: float) -> float:
        xs = sorted(self.latencies)
        return 1000 * xs[min(len(xs) - 1, int(q * len(xs)))] if xs else 0.0

    def summary(self) -> dict[str, Any]:
        return {
            "requests": self.requests, "seconds": round(self.seconds, 3), "rps": round(self.rps, 1),
            "p50_ms": round(self.latency_ms(0.5), 2), "p99_ms": round(self.latency_ms(0.99), 2),
            "statuses": dict(self.statuses),
        }  # fmt: skip


def run_load(
    base_url: str,
    token: str | None,
    *,
    clients: int,
    per_client: int,
    make_request: RequestMaker,
    client_headers: Callable[[int], dict[str, str]] | None = None,
    barrier: threading.Barrier | None = None,
) -> LoadReport:
    """Send ``clients * per_client`` requests from ``clients`` threads at once; collect every response.

    ``client_headers(i)``: extra headers of client ``i`` (its own token, an ``Origin``); ``barrier``: also
    wait on it before starting (to start several loads together)."""
    import httpx

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    lock = threading.Lock()
    report = LoadReport(clients * per_client, 0.0)
    start = threading.Barrier(clients + 1)

    def worker(ci: int) -> None:
        mine = {**headers, **(client_headers(ci) if client_headers else {})}
        with httpx.Client(base_url=base_url, headers=mine, timeout=60) as c:
            start.wait()
            for i in range(per_client):
                method, path, body = make_request(ci, i)
                t0 = time.perf_counter()
                r = c.request(method, path, json=body)
                dt = time.perf_counter() - t0
                payload = (
                    r.json() if r.headers.get("content-type", "").startswith("application/json") else r.text
                )
                with lock:
                    report.statuses[r.status_code] += 1
                    report.results.append((ci, i, r.status_code, payload))
                    report.latencies.append(dt)

    threads = [threading.Thread(target=worker, args=(ci,)) for ci in range(clients)]
    for t in threads:
        t.start()
    if barrier is not None:
        barrier.wait()
    start.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    report.seconds = time.perf_counter() - t0
    return report


def add_request(ns: str) -> RequestMaker:
    """Each request adds a distinct memory: ``client {c} note {i}``."""
    return lambda c, i: (
        "POST",
        f"/v1/namespaces/{ns}/memories",
        {"content": f"client {c} note {i} about Lisbon"},
    )


def search_request(ns: str) -> RequestMaker:
    return lambda c, i: ("POST", f"/v1/namespaces/{ns}/search", {"query": f"note {i} Lisbon", "top_k": 10})
