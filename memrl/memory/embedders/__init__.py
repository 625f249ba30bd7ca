"""Embedders: texts in, unit float32 vectors out. The protocol (:mod:`.base`), the built-in providers and the
factory by name (:mod:`.providers`: hashing, OpenAI-compatible, cached, combined), and the offline
sentence-transformers models (:mod:`.minilm`, :mod:`.mpnet`; their heavy imports happen on first use).
"""

from memrl.memory.embedders.base import Embedder, normalize_rows
from memrl.memory.embedders.providers import (
    CachedEmbedder,
    CombinedEmbedder,
    HashingEmbedder,
    OpenAIEmbedder,
    cache_embedder,
    create_embedder,
    default_cache_path,
)  # fmt: skip

__all__ = [
    "CachedEmbedder", "CombinedEmbedder", "Embedder", "HashingEmbedder", "OpenAIEmbedder", "cache_embedder",
    "create_embedder", "default_cache_path", "normalize_rows",
]  # fmt: skip
