"""A transformers model on this machine (CPU or GPU): batched generation, token ids and logprobs for RL,
and structured output by constrained decoding (xgrammar, the grammar engine of vLLM and SGLang).

Two layers: :class:`LocalEngine` is the token engine (:mod:`memrl.llm.tokens`: prompt ids + sampling +
constraint -> completion ids, log-probs, finish reason), and :class:`LocalLLM` is memrl's shared chat
layer (:class:`~memrl.llm.templated.TemplatedLLM`: chat template, tool prompting, tool-call parsing) on
top of it, the same layer verl's rollout servers run under (:mod:`memrl.integrations.verl.engine`).

The default model is the offline SmolLM2-135M-Instruct (see :mod:`memrl.llm.local.hf_models` for what ``model``
may be and how the GGUF file is converted once and cached). Concurrent ``chat`` calls on one event loop are
gathered into batches of up to ``max_batch_size`` (left-padded; shortest prompts together), so
``asyncio.gather`` over many episodes runs them batched::

    llm = LocalLLM()                                             # loads lazily, on the first call
    r = await llm.chat(msgs, json_schema={"type": "object", ...})      # always parses
    r = await llm.chat(msgs, tools=[...], tool_choice="required")      # r.tool_calls[0].name in tools
    r.prompt_ids, r.completion_ids, r.logprobs                         # for the RL trainers
    llm.generate_sync([msgs1, msgs2], sampling=SamplingParams(max_tokens=64))   # no asyncio

On a CPU shared with other busy processes pass ``threads=1`` (process-wide ``torch.set_num_threads``):
torch threads that compete with other jobs for the same cores can run several times slower than one
(compare with ``python -m bench.decode --threads 1`` and ``--threads 2``).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import weakref
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from memrl.errors import MemrlError
from memrl.llm.base import ChatResponse, LLMProviderError, Message, SamplingParams, ToolChoice
from memrl.llm.grammar import GrammarBook
from memrl.llm.local.adapters import is_adapter_folder, load_merged
from memrl.llm.local.hf_models import DEFAULT_MODEL, ensure_local_model, load_model
from memrl.llm.templated import TemplatedLLM
from memrl.llm.tokens import STOP_TOKENS, TokenEngine, TokenRequest, TokenResult, stop_token_ids

__all__ = ["STOP_TOKENS", "LocalEngine", "LocalLLM"]


@dataclass
class _Job:
    request: TokenRequest
    future: asyncio.Future[TokenResult]


class LocalEngine(TokenEngine):
    """Batched, optionally grammar-constrained token generation with a local transformers model."""

    def __init__(
        self,
        model: str | None = None,
        *,
        device: str = "cpu",
        dtype: str = "float32",
        max_batch_size: int = 8,
        cache_dir: str | None = None,
        batch_wait: float = 0.0,
        threads: int | None = None,
    ) -> None:
        self.spec = model
        self.device, self.dtype = device, dtype
        self.max_batch_size = max_batch_size
        self.cache_dir = cache_dir
        self.batch_wait = batch_wait
        self.threads = threads  # torch threads, process-wide; 1 is far faster when other jobs share the CPU
        # prompts run in bfloat16 (decoding.generate's prefill_bf16): for evaluations, never for RL rollouts
        self.prefill_bf16 = False
        self.path: str | None = None  # the folder (or hub id) actually loaded
        self.hf: Any = None
        self.grammars: GrammarBook | None = None
        self.lock = threading.RLock()  # one load, one generation at a time (they share the cores)
        self._loops: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, Any]] = (
            weakref.WeakKeyDictionary()
        )

    def load(self) -> LocalEngine:
        with self.lock:
            if self.hf is None:
                if self.threads:
                    import torch

                    torch.set_num_threads(self.threads)
                self.path = ensure_local_model(self.spec, self.cache_dir)
                if is_adapter_folder(self.path):  # a trained LoRA adapter: its base model, merged
                    model, tok = load_merged(
                        self.path, device=self.device, dtype=self.dtype, cache_dir=self.cache_dir
                    )
                else:
                    model, tok = load_model(self.path, device=self.device, dtype=self.dtype)
                self.stop_ids = stop_token_ids(tok, model.generation_config)
                text = model.config.get_text_config()
                self.grammars = GrammarBook(tok, int(text.vocab_size), sorted(self.stop_ids))
                self.context_length = int(getattr(text, "max_position_embeddings", 0) or 0) or None
                self.hf, self.tokenizer = model, tok
        return self

    # ---- generation (sync core) ------------------------------------------------------------------
    def run(self, requests: list[TokenRequest]) -> list[TokenResult | Exception]:
        """Complete ``requests`` (batched by sampling parameters); a failure is returned in its place."""
        from memrl.llm.decoding import generate

        self.load()
        results: list[TokenResult | Exception | None] = [None] * len(requests)
        groups: dict[SamplingParams, list[int]] = defaultdict(list)
        for i, r in enumerate(requests):
            groups[r.sampling].append(i)
        with self.lock:  # tokenizer and model are used by one thread at a time
            for sampling, members in groups.items():
                prepared = []
                for i in members:
                    try:
                        c = requests[i].constraint
                        assert self.grammars is not None
                        matcher = (
                            None if c is None else self.grammars.matcher(self.grammars.for_constraint(c))
                        )
                        prepared.append((i, list(requests[i].prompt_ids), matcher))
                    except Exception as e:  # a bad schema fails its own request only
                        results[i] = (
                            e if isinstance(e, MemrlError) else LLMProviderError(f"{type(e).__name__}: {e}")
                        )
                prepared.sort(key=lambda p: len(p[1]))  # similar lengths together: less padding
                for start in range(0, len(prepared), self.max_batch_size):
                    chunk = prepared[start : start + self.max_batch_size]
                    try:
                        gens = generate(self.hf, self.tokenizer, [p[1] for p in chunk], sampling=sampling,
                                        matchers=[p[2] for p in chunk], stop_ids=set(self.stop_ids),
                                        pad_id=self.tokenizer.pad_token_id, prefill_bf16=self.prefill_bf16)  # fmt: skip
                    except Exception as e:  # torch / xgrammar failures reach callers as provider errors
                        err = e if isinstance(e, MemrlError) else LLMProviderError(
                            f"local generation failed: {type(e).__name__}: {e}")  # fmt: skip
                        for i, _, _ in chunk:
                            results[i] = err
                        continue
                    for (i, _, _), gen in zip(chunk, gens, strict=True):
                        results[i] = TokenResult(gen.completion_ids, gen.logprobs, gen.finish_reason,
                                                 sampling.temperature, requests[i].constraint)  # fmt: skip
        return results  # type: ignore[return-value]

    # ---- async: concurrent calls become batches ----------------------------------------------------
    async def generate(self, request: TokenRequest) -> TokenResult:
        loop = asyncio.get_running_loop()
        state = self._loops.setdefault(loop, {})
        queue: asyncio.Queue[_Job] = state.setdefault("queue", asyncio.Queue())
        job = _Job(request, loop.create_future())
        queue.put_nowait(job)
        # The worker lives only while there is work (no task left pending at exit). No await between
        # its last empty() check and its end, so a job put here is always seen by a live worker.
        worker = state.get("worker")
        if worker is None or worker.done():
            state["worker"] = loop.create_task(self._worker(queue))
        return await job.future

    async def _worker(self, queue: asyncio.Queue[_Job]) -> None:
        while not queue.empty():
            jobs = [queue.get_nowait()]
            await asyncio.sleep(self.batch_wait)  # let callers started together join this batch
            while not queue.empty():
                jobs.append(queue.get_nowait())
            jobs = [j for j in jobs if not j.future.cancelled()]
            try:
                results: list[Any] = await asyncio.to_thread(self.run, [j.request for j in jobs])
            except Exception as e:  # pragma: no cover - run reports failures per request
                results = [e] * len(jobs)
            for job, result in zip(jobs, results, strict=True):
                if job.future.done():
                    continue
                if isinstance(result, Exception):
                    job.future.set_exception(result)
                else:
                    job.future.set_result(result)

    async def aclose(self) -> None:
        state = self._loops.get(asyncio.get_running_loop(), {})
        worker = state.pop("worker", None)
        state.pop("queue", None)
        if worker is not None:
            worker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await worker


class LocalLLM(TemplatedLLM):
    """A local causal LM with batched, optionally grammar-constrained decoding (see the module docstring)."""

    provider = "local"

    def __init__(
        self,
        model: str | None = None,
        *,
        device: str = "cpu",
        dtype: str = "float32",
        max_batch_size: int = 8,
        cache_dir: str | None = None,
        batch_wait: float = 0.0,
        threads: int | None = None,
    ) -> None:
        engine = LocalEngine(model, device=device, dtype=dtype, max_batch_size=max_batch_size,
                             cache_dir=cache_dir, batch_wait=batch_wait, threads=threads)  # fmt: skip
        super().__init__(engine, model or DEFAULT_MODEL)  # batching, not a semaphore, limits

    engine: LocalEngine

    def load(self) -> LocalLLM:
        self.engine.load()
        return self

    @property
    def path(self) -> str | None:
        return self.engine.path

    @property
    def spec(self) -> str | None:
        """The model as it was asked for (None: the offline default), before conversion to a folder."""
        return self.engine.spec

    @property
    def hf_model(self) -> Any:
        return self.engine.load().hf

    @property
    def grammars(self) -> GrammarBook:
        """The grammar compiler of this model's tokenizer (trainers replay recorded constraints with it)."""
        grammars = self.engine.load().grammars
        assert grammars is not None
        return grammars

    @property
    def _lock(self) -> threading.RLock:
        """Held while generating; trainers hold it while they change the weights."""
        return self.engine.lock

    def generate_sync(
        self,
        conversations: list[list[Message]],
        *,
        tools: list[dict[str, Any]] | None = None,
        json_schema: dict[str, Any] | None = None,
        sampling: SamplingParams | None = None,
        tool_choice: ToolChoice = "auto",
        grammar: str | None = None,
    ) -> list[ChatResponse]:
        """Batched replies without asyncio (for trainers). Raises the first failure."""
        self.load()
        requests = [self.checked_request(m, tools, json_schema, sampling, tool_choice, grammar)
                    for m in conversations]  # fmt: skip
        prompts = [self.request_ids(r) for r in requests]
        for _, ids in prompts:
            self.check_context(ids, requests[0].sampling.max_tokens)
        results = self.engine.run([TokenRequest(tuple(ids), r.sampling, r.constraint)
                                   for r, (_, ids) in zip(requests, prompts, strict=True)])  # fmt: skip
        replies = []
        for r, (text, ids), res in zip(requests, prompts, results, strict=True):
            if isinstance(res, Exception):
                raise res
            reply = self.reply(r, ids, res)
            self._remember(r, reply, text)
            replies.append(reply)
        return replies
