"""Embedders: hashing is deterministic; the OpenAI-compatible one talks to a real HTTP server on loopback."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest

from memrl.errors import ConfigError, ProviderError
from memrl.memory.embedders.providers import HashingEmbedder, OpenAIEmbedder, create_embedder
from memrl.memory.facade.memory import AsyncMemory


def test_hashing_is_deterministic_across_processes():
    vec = HashingEmbedder(64).embed(["Caroline went camping"])[0]
    code = "from memrl.memory.embedders.providers import HashingEmbedder; print(HashingEmbedder(64).embed(['Caroline went camping'])[0].tolist())"
    other = json.loads(subprocess.check_output([sys.executable, "-c", code], text=True))
    assert np.allclose(vec, other)
    assert np.linalg.norm(vec) == pytest.approx(1.0)
    e = HashingEmbedder(64)
    a, b, c = e.embed(["camping at the lake", "went camping near a lake", "tax return deadline"])
    assert a @ b > a @ c
    assert e.embed([""])[0].tolist() == [0.0] * 64


def test_create_embedder_specs():
    assert create_embedder("hashing:16").dim == 16
    assert create_embedder("openai:text-embedding-3-small").name == "openai:text-embedding-3-small"
    with pytest.raises(ConfigError, match="unknown embedder"):
        create_embedder("word2vec")


class _EmbeddingServer(BaseHTTPRequestHandler):
    calls: list[dict] = []
    fail_next = 0

    def do_POST(self):  # noqa: N802 - http.server API
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).calls.append(body)
        if type(self).fail_next:
            type(self).fail_next -= 1
            self.send_response(500)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(b'{"error": {"message": "boom"}}')
            return
        vecs = HashingEmbedder(32).embed(body["input"])
        data = [{"object": "embedding", "index": i, "embedding": v.tolist()} for i, v in enumerate(vecs)]
        data.reverse()  # servers may return rows out of order; the client must sort by index
        payload = {
            "object": "list",
            "data": data,
            "model": body["model"],
            "usage": {"prompt_tokens": 1, "total_tokens": 1},
        }
        raw = json.dumps(payload).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    _EmbeddingServer.calls = []
    _EmbeddingServer.fail_next = 0
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _EmbeddingServer)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/v1"
    srv.shutdown()


async def test_openai_embedder_against_loopback(server, tmp_path):
    emb = OpenAIEmbedder("mini-embed", base_url=server, api_key="test", batch_size=2, max_retries=0)
    texts = ["Caroline went camping", "Melanie paints", "tax deadline"]
    vecs = emb.embed(texts)
    assert np.allclose(vecs, HashingEmbedder(32).embed(texts), atol=1e-6)
    assert [len(c["input"]) for c in _EmbeddingServer.calls] == [2, 1]  # batched
    assert _EmbeddingServer.calls[0]["model"] == "mini-embed"
    avecs = await emb.aembed(texts)
    assert np.allclose(avecs, vecs)
    # Used by the store: each text is sent once per namespace, then served from its embedding cache (the cache
    # is per namespace: another namespace's identical text is sent again, issue 33).
    m = AsyncMemory(tmp_path / "m.db", embedder=emb)
    _EmbeddingServer.calls = []
    await m.add("Caroline went camping")
    await m.add("Caroline went camping", namespace="other")
    hits = await m.search("camping", mode="dense")
    assert hits[0].item.content == "Caroline went camping"
    await m.search("camping", mode="dense", namespace="other")
    sent = [t for c in _EmbeddingServer.calls for t in c["input"]]
    assert sent.count("Caroline went camping") == 2
    await m.close()


def test_openai_embedder_retries_then_errors(server):
    _EmbeddingServer.fail_next = 1
    emb = OpenAIEmbedder("m", base_url=server, api_key="t", max_retries=2)
    assert emb.embed(["x"]).shape == (1, 32)
    assert len(_EmbeddingServer.calls) == 2  # one failure, one retry
    _EmbeddingServer.fail_next = 10
    emb = OpenAIEmbedder("m", base_url=server, api_key="t", max_retries=1)
    with pytest.raises(ProviderError, match="embedding request to http://127.0.0.1"):
        emb.embed(["x"])


def test_unknown_model_dimension_is_asked_of_the_server_once(server):
    emb = OpenAIEmbedder("some-local-model", base_url=server, api_key="t", max_retries=0)
    assert emb.dim == 32 and len(_EmbeddingServer.calls) == 1
    assert emb.dim == 32 and len(_EmbeddingServer.calls) == 1


def test_cached_embedder_embeds_each_text_once_across_instances(tmp_path):
    from memrl.memory.embedders.providers import CachedEmbedder
    from tests.conftest import CountingEmbedder

    path = str(tmp_path / "cache" / "emb.db")
    first = CountingEmbedder(64)
    a = CachedEmbedder(first, path).embed(["camping", "pottery", "camping"])
    assert first.seen == ["camping", "pottery"] and a.shape == (3, 64)
    second = CountingEmbedder(64)  # a new process would see the same file
    b = CachedEmbedder(second, path).embed(["pottery", "painting", "camping"])
    assert second.seen == ["painting"]
    assert np.array_equal(b[0], a[1]) and np.array_equal(b[2], a[0])
    assert np.allclose(b[1], HashingEmbedder(64).embed(["painting"])[0])
    assert CachedEmbedder(second, path).name == second.name
    (tmp_path / "blocked").write_text("not a folder")
    with pytest.raises(ConfigError, match="embedding cache"):
        CachedEmbedder(second, str(tmp_path / "blocked" / "emb.db")).embed(["x"])


def test_combined_embedder_scores_the_weighted_mean_of_its_parts_cosines(tmp_path):
    from memrl.memory.embedders.providers import CachedEmbedder, CombinedEmbedder, cache_embedder
    from tests.conftest import CountingEmbedder

    texts = ["camping at the lake", "went camping near a lake", "tax return deadline"]
    small, big = HashingEmbedder(32), HashingEmbedder(96)
    both = create_embedder("0.25*hashing:32+hashing:96")
    assert isinstance(both, CombinedEmbedder) and both.dim == 128
    assert both.name == f"0.25*{small.name}+1*{big.name}"
    v = both.embed(texts)
    assert np.allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-6)
    s, b = small.embed(texts), big.embed(texts)
    for i, j in [(0, 1), (0, 2), (1, 2)]:
        assert v[i] @ v[j] == pytest.approx(0.2 * (s[i] @ s[j]) + 0.8 * (b[i] @ b[j]), abs=1e-6)
    # Cached per part, under each part's own name: a later single-model run reuses the vectors.
    path = str(tmp_path / "emb.db")
    parts = [CountingEmbedder(32), CountingEmbedder(96)]
    cached = cache_embedder(CombinedEmbedder(parts, [1, 3]), path)
    assert isinstance(cached, CombinedEmbedder) and all(isinstance(p, CachedEmbedder) for p in cached.parts)
    assert np.allclose(cached.embed(texts), CombinedEmbedder([small, big], [1, 3]).embed(texts), atol=1e-6)
    again = CountingEmbedder(96)
    CachedEmbedder(again, path).embed(texts)
    assert again.seen == [] and parts[1].seen == texts
    for bad in ["hashing:32+", "x*hashing:32+hashing:8", "0*hashing:32+hashing:8"]:
        with pytest.raises(ConfigError):
            create_embedder(bad)
