"""The two boundaries verl's v1 trainer crosses that a CPU test cannot start, faked in process.

* :class:`TokenServer` and :class:`LoadBalancer`: a rollout server replica (vLLM/SGLang on a GPU) and
  verl's global load balancer, both Ray actors in a real run. The server generates with a real (tiny)
  model and reports the weight version it runs, as verl's async servers do (``extra_fields =
  {"global_steps": ...}``); verl's own ``LLMServerClient`` talks to them (``.remote`` calls return
  awaitables, as Ray object refs are).
* :class:`KVStore`: TransferQueue's key-value service (Ray actors with ZMQ storage units in a real run):
  keys, tags merged on update, per-sample field values packed back with TransferQueue's own
  ``_pack_field_values`` (nested jagged tensors, ``NonTensorStack``), fields absent from a sample left out.
  :meth:`KVStore.install` puts it in place of ``transfer_queue``'s functions, which verl's agent loop
  worker, replay buffer and trainer all call through the module.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import torch
from tensordict import NonTensorData, NonTensorStack, TensorDict


class _Remote:
    """``handle.method.remote(...)`` for an in-process object (what a Ray actor handle offers)."""

    def __init__(self, fn: Any, awaitable: bool = True) -> None:
        self.fn, self.awaitable = fn, awaitable

    def remote(self, *args: Any, **kwargs: Any) -> Any:
        if not self.awaitable:
            return self.fn(*args, **kwargs)

        async def call() -> Any:
            return await self.fn(*args, **kwargs)

        return call()


class TokenServer:
    """A rollout replica: ``generate`` on a memrl LocalEngine, honouring verl's sampling keys."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine.load()
        self.global_steps = 0
        self.calls: list[dict[str, Any]] = []
        self.abort_calls: set[int] = set()  # call numbers answered "aborted" (a server that lost the request)
        self.generate = _Remote(self._generate)

    async def _generate(self, *, request_id: str, prompt_ids: list[int], sampling_params: dict[str, Any],
                        **_: Any) -> Any:  # fmt: skip
        from verl.workers.rollout.replica import TokenOutput

        from memrl.llm.base import SamplingParams
        from memrl.llm.tokens import TokenRequest

        p = dict(sampling_params)
        if len(self.calls) in self.abort_calls:
            self.calls.append(
                {"request_id": request_id, "params": p, "step": self.global_steps, "aborted": True}
            )
            return TokenOutput(token_ids=[], log_probs=[], stop_reason="aborted",
                               extra_fields={"global_steps": self.global_steps})  # fmt: skip
        sampling = SamplingParams(temperature=p["temperature"], top_p=p["top_p"], max_tokens=p["max_tokens"],
                                  stop=tuple(p.get("stop") or ()) or None)  # fmt: skip
        res = await self.engine.generate(TokenRequest(tuple(prompt_ids), sampling, None))
        self.calls.append({"request_id": request_id, "params": p, "step": self.global_steps})
        return TokenOutput(token_ids=res.completion_ids, log_probs=res.logprobs if p.get("logprobs") else None,
                           stop_reason="completed", extra_fields={"global_steps": self.global_steps})  # fmt: skip


class LoadBalancer:
    """verl's ``GlobalRequestLoadBalancer`` with one server; records the sticky request ids it saw."""

    def __init__(self, server: TokenServer) -> None:
        self.server = server
        self.request_ids: list[str] = []
        self.require_acquire_fields = _Remote(self._no_fields)
        self.require_release_fields = _Remote(self._no_fields)
        self.acquire_server = _Remote(self._acquire)
        self.release_server = _Remote(lambda **_: None, awaitable=False)  # fire and forget

    async def _no_fields(self) -> list[str]:
        return []

    async def _acquire(self, request_id: str, **_: Any) -> tuple[str, Any]:
        self.request_ids.append(request_id)
        return "server-0", self.server


def _values(field: Any, n: int) -> list[Any]:
    """Per-sample values of one field of a batch TensorDict."""
    if isinstance(field, NonTensorData):
        return [field.data] * n
    if isinstance(field, NonTensorStack):
        return list(field.tolist())
    if isinstance(field, torch.Tensor):
        return list(field.unbind(0))
    if isinstance(field, TensorDict):
        return [field[i] for i in range(n)]
    return [field[i] for i in range(n)]


class KVStore:
    """TransferQueue's key-value API, in process (see the module docstring)."""

    def __init__(self) -> None:
        self.tags: dict[str, dict[str, dict]] = defaultdict(dict)
        self.rows: dict[str, dict[str, dict]] = defaultdict(dict)

    def install(self, monkeypatch: Any) -> KVStore:
        import transfer_queue as tq

        for name in ("kv_batch_put", "kv_batch_get", "kv_list", "kv_clear"):
            monkeypatch.setattr(tq, name, getattr(self, name))
        monkeypatch.setattr(tq, "async_kv_put", self.async_kv_put)
        monkeypatch.setattr(tq, "async_kv_batch_put", self.async_kv_batch_put)
        monkeypatch.setattr(tq, "init", lambda *a, **k: None)
        return self

    def kv_batch_put(self, keys: list[str], partition_id: str, fields: TensorDict | None = None,
                     tags: list[dict] | None = None) -> Any:  # fmt: skip
        from transfer_queue import KVBatchMeta

        keys = list(keys)
        for i, key in enumerate(keys):
            self.tags[partition_id].setdefault(key, {}).update(tags[i] if tags else {})
        if fields is not None:
            for name in fields.keys():  # noqa: SIM118 (iterating a TensorDict walks its batch)
                for key, value in zip(keys, _values(fields.get(name), len(keys)), strict=True):
                    self.rows[partition_id].setdefault(key, {})[name] = value
        return KVBatchMeta(
            partition_id=partition_id, keys=keys, tags=[dict(self.tags[partition_id][k]) for k in keys]
        )

    async def async_kv_batch_put(self, **kwargs: Any) -> None:
        self.kv_batch_put(**kwargs)

    async def async_kv_put(self, key: str, partition_id: str, tag: dict | None = None, **_: Any) -> None:
        self.tags[partition_id].setdefault(key, {}).update(tag or {})

    def kv_batch_get(self, keys: list[str], partition_id: str, select_fields: list[str] | str | None = None):
        from transfer_queue.storage.managers.simple_storage_manager import AsyncSimpleStorageManager

        keys = list(keys)
        rows = [self.rows[partition_id][k] for k in keys]
        names = [select_fields] if isinstance(select_fields, str) else select_fields or list(rows[0])
        present = [n for n in names if all(n in r for r in rows)]
        packed = {n: AsyncSimpleStorageManager._pack_field_values([r[n] for r in rows]) for n in present}
        return TensorDict(packed, batch_size=len(keys))

    def kv_list(self, partition_id: str | None = None) -> dict:
        if partition_id is not None:
            return dict(self.tags[partition_id])
        return {p: dict(t) for p, t in self.tags.items()}

    def kv_clear(self, keys: list[str] | str, partition_id: str) -> None:
        for key in [keys] if isinstance(keys, str) else keys:
            self.tags[partition_id].pop(key, None)
            self.rows[partition_id].pop(key, None)
