"""The memory server loads its embedder as it starts, on a thread, and says so while it loads.

``memrl serve memory`` and ``memrl ui`` used to load the embedding model (all-MiniLM-L6-v2: 7-10 s on a
CPU, longer on a busy one) inside the first request that embedded, which then took that long with no
sign of why. Now the app's startup hands :meth:`~memrl.memory.embedders.base.Embedder.load` to a thread
(:class:`EmbedderLoad`) and the server answers at once. While the model loads:

- ``/health`` answers ``{"status": "loading", "embedder": "loading", ...}`` (then ``"ok"`` and
  ``"ready"``; ``"failed"`` with the error when the load failed);
- a request that embeds (an add, an update, a dense or hybrid search; in the API and the browser's
  forms) **waits** for the load, on the event loop, holding no thread, before its store work starts: a
  script that starts a server and searches at once gets its answer, not an error to retry, however long
  the model takes (its store deadline, ``--store-timeout``, counts from the end of the load). Only a load
  outlasting ``Limits.embedder_wait`` (600 s) ends the request in 503 with ``Retry-After`` and the message
  that the embedding model is still loading; so does a request that met the load inside its store work
  (a remember job's writes) and ran out of its store deadline;
- every page of the browser shows a notice that the embedding model is loading.

A load that fails is not fatal: the error is kept for ``/health``, and a request that embeds tries the
load again (and reports the error itself).
"""

from __future__ import annotations

import asyncio
import threading

from memrl.errors import public_message
from memrl.memory.embedders import Embedder
from memrl.server.offload import busy

#: What the browser shows while the model loads (and what a 503 past the deadline says).
LOADING = "the embedding model is still loading (the first start takes a few seconds)"


class EmbedderLoad:
    """Loads ``embedder`` on a background thread (:meth:`start`, called by the app's startup) and reports
    on it (:attr:`state`). An embedder with nothing to load is ready at once, and no thread starts."""

    #: Seconds a client is told to wait (``Retry-After``) when its request outlasted the load.
    retry_after = 5.0

    def __init__(self, embedder: Embedder, max_wait: float = 600.0) -> None:
        self.embedder = embedder
        self.max_wait = max_wait
        self.error: str | None = None
        self._thread: threading.Thread | None = None

    @property
    def state(self) -> str:
        """``ready``, ``loading`` or ``failed`` (the last load raised: :attr:`error` says what)."""
        if self.embedder.loaded:
            return "ready"
        return "failed" if self.error is not None else "loading"

    def start(self) -> None:
        """Start loading (once); returns at once."""
        if self._thread is not None or self.embedder.loaded:
            return
        self._thread = threading.Thread(target=self._load, name="memrl-embedder-load", daemon=True)
        self._thread.start()

    def _load(self) -> None:
        try:
            self.embedder.load()
        except Exception as e:  # noqa: BLE001 - kept for /health; a request that embeds meets it again
            self.error = public_message(e) or type(e).__name__
        else:
            self.error = None

    async def wait(self) -> None:
        """Return once the load has ended (a failed load too: the request then meets the error itself), on
        the event loop, holding no thread; at once when no load was started (the request loads for itself).
        503 with ``Retry-After`` past :attr:`max_wait` seconds."""
        thread = self._thread
        if thread is None or self.embedder.loaded:
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.max_wait
        while thread.is_alive() and not self.embedder.loaded:
            if loop.time() > deadline:
                raise busy(f"{LOADING}; retry in a few seconds", self.retry_after)
            await asyncio.sleep(0.05)

    def health(self) -> dict[str, str]:
        """The fields ``/health`` adds: ``embedder`` (the state) and, when it failed, ``embedder_error``."""
        out = {"embedder": self.state}
        if self.error is not None and out["embedder"] == "failed":
            out["embedder_error"] = self.error
        return out

    def notice(self) -> str:
        """What a page says about the embedder: :data:`LOADING` while it loads, else nothing."""
        return LOADING if self.state == "loading" else ""

    def slow(self) -> tuple[str, float] | None:
        """(reason, seconds to wait) when a request ran out of time because of this load (the store gate's
        503 says it: :class:`~memrl.server.offload.StoreGate`), else None."""
        return (LOADING, self.retry_after) if self.state == "loading" else None
