"""The memory server loads its embedder as it starts, on a thread (memrl/server/warmup.py), over real HTTP:
the server answers at once, ``/health`` says ``loading``, a search waits for the load (or, past the store
deadline, gets 503 with Retry-After saying the model is loading), the browser shows a notice; then ready.

The boundary faked is the model: a deterministic hashing embedder whose load waits until the test lets it
finish, and whose embed loads first, as the sentence-transformers embedder's does."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from memrl.memory.embedders.providers import HashingEmbedder
from memrl.memory.facade.memory import AsyncMemory
from memrl.server.http import Limits, ServerThread, Tokens
from memrl.server.memory_api import create_app
from tests.server_helpers import client


class SlowLoad(HashingEmbedder):
    """``hashing-64`` behind a load that ends when ``release`` is set (or raises ``fail``)."""

    def __init__(self, fail: Exception | None = None) -> None:
        super().__init__(64)
        self.release = threading.Event()
        self.started = threading.Event()  # a load began
        self.fail = fail
        self.loads = 0  # loads that ran to the end
        self.waiting = 0  # embed calls waiting for a load
        self._model: object | None = None
        self._lock = threading.Lock()

    @property
    def loaded(self) -> bool:
        return self._model is not None

    def load(self) -> None:
        with self._lock:
            if self._model is None:
                self.started.set()
                if not self.release.wait(60):
                    raise AssertionError("the test never released the load")
                if self.fail is not None:
                    raise self.fail
                self.loads += 1
                self._model = object()

    def embed(self, texts):  # type: ignore[override]
        if self._model is None:
            self.waiting += 1
            self.load()
        return super().embed(texts)


def until(cond, seconds: float = 20.0) -> None:
    deadline = time.monotonic() + seconds
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting")
        time.sleep(0.02)


@pytest.fixture
def stored(db_path):
    """A store holding one memory, written with the same embedder (name, dim) the server will load."""
    with_hashing = AsyncMemory(db_path, embedder=HashingEmbedder(64))
    item = asyncio.run(with_hashing.add("Alice moved to Lisbon in May 2023", namespace="alice"))
    asyncio.run(with_hashing.close())
    return db_path, item.id


def serve(db_path, embedder, limits: Limits | None = None) -> ServerThread:
    memory = AsyncMemory(db_path, embedder=embedder)
    return ServerThread(create_app(memory, Tokens(), limits))


def test_server_answers_while_the_model_loads_and_a_search_waits_for_it(stored) -> None:
    db_path, item_id = stored
    embedder = SlowLoad()
    with serve(db_path, embedder) as server:  # starting does not wait for the load (it never ends alone)
        c = client(server.base_url, None)
        until(embedder.started.is_set)  # the server began the load itself, before any request embeds
        assert embedder.waiting == 0
        health = c.get("/health").json()
        assert health["status"] == "loading" and health["embedder"] == "loading"
        page = c.get("/").text
        assert "the embedding model is still loading" in page

        answer: dict = {}
        t = threading.Thread(target=lambda: answer.update(r=c.post(
            "/v1/namespaces/alice/search", json={"query": "where does Alice live", "top_k": 3})))  # fmt: skip
        t.start()
        time.sleep(0.5)  # the search is in, waiting for the load
        assert "r" not in answer and c.get("/health").json()["status"] == "loading"
        embedder.release.set()
        t.join(30)
        r = answer["r"]
        assert r.status_code == 200, r.text
        assert [h["id"] for h in r.json()] == [item_id]
        assert embedder.loads == 1  # the server's load, which the search used: not a second one
        assert c.get("/health").json() | {"auth": False} == {
            "status": "ok",
            "auth": False,
            "embedder": "ready",
        }
        assert "the embedding model is still loading" not in c.get("/").text


def test_the_store_deadline_counts_from_the_end_of_the_load_and_reads_do_not_wait(stored) -> None:
    """A load far longer than the store deadline: the search still gets its answer (it waited on the event
    loop, not inside its store work); a listing, which embeds nothing, answers during the load."""
    db_path, item_id = stored
    embedder = SlowLoad()
    with serve(db_path, embedder, Limits(store_timeout=0.3)) as server:
        c = client(server.base_url, None)
        until(embedder.started.is_set)
        assert c.get("/v1/namespaces/alice/memories").json()["total"] == 1  # at once, during the load
        answer: dict = {}
        t = threading.Thread(
            target=lambda: answer.update(r=c.post("/v1/namespaces/alice/search", json={"query": "Lisbon"}))
        )
        t.start()
        time.sleep(1.0)  # three store deadlines: the search must still be waiting, not refused
        assert (
            "r" not in answer and embedder.waiting == 0
        )  # it waits before its store work, holding no thread
        embedder.release.set()
        t.join(30)
        assert answer["r"].status_code == 200, answer["r"].text
        assert [h["id"] for h in answer["r"].json()] == [item_id]


def test_a_load_past_the_embedder_wait_gets_503_saying_the_model_is_loading(stored) -> None:
    db_path, _ = stored
    embedder = SlowLoad()
    with serve(db_path, embedder, Limits(embedder_wait=0.3)) as server:
        c = client(server.base_url, None)
        r = c.post("/v1/namespaces/alice/search", json={"query": "Lisbon"})
        assert r.status_code == 503, r.text
        assert r.headers["Retry-After"] == "5"
        assert r.json()["error"]["type"] == "busy"
        assert "embedding model is still loading" in r.json()["error"]["message"]
        assert (
            c.post("/v1/namespaces/alice/search", json={"query": "Lisbon", "mode": "bm25"}).status_code == 200
        )
        embedder.release.set()
        until(lambda: c.get("/health").json()["status"] == "ok")
        assert c.post("/v1/namespaces/alice/search", json={"query": "Lisbon"}).status_code == 200


def test_a_failed_load_shows_in_health_and_the_request_that_embeds_reports_it(stored) -> None:
    from memrl.errors import ConfigError

    db_path, _ = stored
    embedder = SlowLoad(fail=ConfigError("all-MiniLM-L6-v2 is not installed"))
    embedder.release.set()
    with serve(db_path, embedder) as server:
        c = client(server.base_url, None)
        until(lambda: c.get("/health").json()["embedder"] == "failed")
        health = c.get("/health").json()
        assert health["status"] == "degraded" and "not installed" in health["embedder_error"]
        r = c.post("/v1/namespaces/alice/search", json={"query": "Lisbon"})
        assert r.status_code == 400 and "not installed" in r.json()["error"]["message"]
        assert "still loading" not in c.get("/").text


def test_an_embedder_with_nothing_to_load_is_ready_at_once(stored) -> None:
    db_path, _ = stored
    with serve(db_path, HashingEmbedder(64)) as server:
        assert client(server.base_url, None).get("/health").json()["status"] == "ok"
