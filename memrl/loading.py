"""One process-wide lock around loading model weights (LLMs, embedders), so loads never run at once.

transformers and sentence-transformers are not safe to load from two threads at the same time: their
lazy imports can fail half-way (``ImportError: cannot import name 'AutoModelForCausalLM'``) and
``from_pretrained`` builds models on the ``meta`` device through process-wide context managers, so a
second load in another thread can end in ``NotImplementedError: Cannot copy out of meta tensor``. An
evaluation answers several questions at once, and each may be the first to need the embedder or the
model, so every place that loads weights takes this lock::

    from memrl.loading import model_load_lock
    with model_load_lock():
        model = AutoModelForCausalLM.from_pretrained(path)

The lock is re-entrant (a loader may call another loader). It lives in this bottom-layer module so the
memory layer (embedders) and the llm layer (local models) share the very same lock, and the same cache
folder (:func:`cache_root`).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["cache_root", "model_load_lock"]

_LOCK = threading.RLock()


@contextmanager
def model_load_lock() -> Iterator[None]:
    """Hold the process-wide model-loading lock for the duration of the ``with`` block."""
    with _LOCK:
        yield


def cache_root() -> Path:
    """``$MEMRL_CACHE_DIR`` or ``~/.cache/memrl``: where converted models, the embedding cache and the
    LLM reply cache live (every layer asks here, so they always agree)."""
    env = os.environ.get("MEMRL_CACHE_DIR")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "memrl"
