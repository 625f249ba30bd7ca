"""What the agent loops and tools of one verl worker process share: one embedder per spec.

verl builds a new agent loop object for every sample (``AgentLoopWorker._run_agent_loop`` instantiates
it through Hydra) and a tool's episode store is created per trajectory, so anything kept on those objects
dies with the episode. An embedder is a model (MiniLM: ~90 MB loaded in seconds): built once per process
here, on first use, and shared by every episode's store.
"""

from __future__ import annotations

import threading
from typing import Any

_EMBEDDERS: dict[str, Any] = {}
_LOCK = threading.Lock()


def shared_embedder(spec: str) -> Any:
    """The embedder for ``spec`` (``minilm``, ``hashing``, ... as :func:`memrl.memory.embedders.providers.create_embedder`)
    of this process, built on first use."""
    from memrl.memory.embedders import create_embedder

    with _LOCK:
        if spec not in _EMBEDDERS:
            _EMBEDDERS[spec] = create_embedder(spec)
        return _EMBEDDERS[spec]
