"""The protocol every embedder implements: texts in, an ``(n, dim)`` float32 array of unit vectors out.

The bottom of the embedding modules: the sentence-transformers embedder (:mod:`memrl.memory.embedders.minilm`), the
MPNet one built on it (:mod:`memrl.memory.embedders.mpnet`), the others and the ``create_embedder`` factory
(:mod:`memrl.memory.embedders.providers`) all import it, and it imports none of them. The store and search only
need this type.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # numpy is imported by the first embed, not by `import memrl.memory` (the CLI starts fast)
    import numpy as np


def normalize_rows(x: np.ndarray) -> np.ndarray:
    import numpy as np

    x = np.asarray(x, dtype=np.float32)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return x / norms


class Embedder(ABC):
    """Maps texts to an ``(n, dim)`` float32 array of unit vectors. ``name`` keys the embedding cache."""

    name: str
    dim: int

    @abstractmethod
    def embed(self, texts: Sequence[str]) -> np.ndarray: ...

    @property
    def loaded(self) -> bool:
        """Whether an embed call now answers without first loading something (a model's weights)."""
        return True

    def load(self) -> None:  # noqa: B027 - a hook, not abstract: most embedders have nothing to load
        """Load now what the first embed call would load (a server calls it on a thread as it starts:
        :mod:`memrl.server.warmup`); an embed call made meanwhile waits for it. Nothing by default."""

    async def aembed(self, texts: Sequence[str]) -> np.ndarray:
        """Async variant; local models run in a worker thread so the event loop stays free."""
        return await asyncio.to_thread(self.embed, texts)
