"""A transformers model on this machine (CPU or GPU): batched generation, token ids and logprobs for RL,
and structured output by constrained decoding (xgrammar, the grammar engine of vLLM and SGLang).

The default model is the offline SmolLM2-135M-Instruct (see :mod:`memrl.llm.hf_models` for what ``model``
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
(compare with ``python -m memrl.llm.bench --threads 1`` and ``--threads 2``).

Chat templates that cannot render ``tools`` (SmolLM2's) get the tool list and the call format in the
system prompt; assistant tool calls in the history are shown as the JSON text the model itself emits.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import threading
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from memrl.errors import MemrlError, ValidationError
from memrl.llm.base import LLM, ChatResponse, LLMProviderError, Message, SamplingParams, ToolChoice, Usage
from memrl.llm.grammar import (
    GrammarBook,
    constraint_of,
    parse_tool_call,
    render_tool_call,
    tool_instructions,
)
from memrl.llm.hf_models import DEFAULT_MODEL, ensure_local_model, load_model

STOP_TOKENS = ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<end_of_turn>", "<|end|>")


@dataclass
class _Job:
    messages: list[Message]
    tools: list[dict[str, Any]] | None = None
    json_schema: dict[str, Any] | None = None
    sampling: SamplingParams = field(default_factory=SamplingParams)
    tool_choice: ToolChoice = "auto"
    future: asyncio.Future[ChatResponse] | None = None
    grammar: str | None = None

    @property
    def constraint(self) -> dict[str, Any] | None:
        return constraint_of(self.json_schema, self.tools, self.tool_choice, self.grammar)


def _text(content: Any) -> str:
    if isinstance(content, list):  # OpenAI multi-part content: keep the text parts
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return "" if content is None else str(content)


class LocalLLM(LLM):
    """A local causal LM with batched, optionally grammar-constrained decoding."""

    provider = "local"
    supports_grammar = True

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
        super().__init__(model or DEFAULT_MODEL, max_concurrency=1024)  # batching, not a semaphore, limits
        self.device, self.dtype = device, dtype
        self.max_batch_size = max_batch_size
        self.cache_dir = cache_dir
        self.batch_wait = batch_wait
        self.threads = threads  # torch threads, process-wide; 1 is far faster when other jobs share the CPU
        self.path: str | None = None  # the folder (or hub id) actually loaded
        self._spec = model
        self._hf: Any = None
        self._tok: Any = None
        self._grammars: GrammarBook | None = None
        self.stop_ids: set[int] = set()
        self._lock = threading.RLock()  # one load, one generation at a time (they share the cores)

    # ---- loading ---------------------------------------------------------------------------------
    def load(self) -> LocalLLM:
        with self._lock:
            if self._hf is None:
                if self.threads:
                    import torch

                    torch.set_num_threads(self.threads)
                self.path = ensure_local_model(self._spec, self.cache_dir)
                model, tok = load_model(self.path, device=self.device, dtype=self.dtype)
                vocab = tok.get_vocab()
                stops = {t for t in (tok.eos_token_id,) if t is not None}
                eos = getattr(model.generation_config, "eos_token_id", None)
                stops |= set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
                stops |= {vocab[t] for t in STOP_TOKENS if t in vocab}
                self.stop_ids = stops
                vocab_size = int(model.config.get_text_config().vocab_size)
                self._grammars = GrammarBook(tok, vocab_size, sorted(stops))
                self._hf, self._tok = model, tok
        return self

    @property
    def hf_model(self) -> Any:
        return self.load()._hf

    @property
    def tokenizer(self) -> Any:
        return self.load()._tok

    # ---- prompts ---------------------------------------------------------------------------------
    def prompt_ids(
        self, messages: list[Message], tools: list[dict[str, Any]] | None = None, tool_choice: str = "auto"
    ) -> list[int]:
        """Token ids of the chat-templated prompt, ending with the assistant header."""
        tok = self.tokenizer
        msgs = []
        for m in messages:
            content = _text(m.get("content"))
            calls = [render_tool_call(c.get("function", c)["name"], c.get("function", c).get("arguments"))
                     for c in m.get("tool_calls") or []]  # fmt: skip
            content = "\n".join(([content] if content else []) + calls)
            msgs.append({"role": m["role"], "content": content})
        template_tools = None
        if tools and tool_choice != "none":
            if "tools" in str(tok.chat_template or ""):
                template_tools = tools
            else:
                block = tool_instructions(tools, tool_choice)
                if msgs and msgs[0]["role"] == "system":
                    msgs[0] = {"role": "system", "content": msgs[0]["content"] + "\n\n" + block}
                else:
                    msgs.insert(0, {"role": "system", "content": block})
        text = tok.apply_chat_template(msgs, tools=template_tools, add_generation_prompt=True, tokenize=False)
        return tok(text, add_special_tokens=False)["input_ids"]

    @property
    def grammars(self) -> GrammarBook:
        """The grammar compiler of this model's tokenizer (trainers replay recorded constraints with it)."""
        self.load()
        assert self._grammars is not None
        return self._grammars

    def _matcher(self, job: _Job) -> Any:
        constraint = job.constraint
        return None if constraint is None else self.grammars.matcher(self.grammars.for_constraint(constraint))

    # ---- generation (sync core) ------------------------------------------------------------------
    def _run(self, jobs: list[_Job], sampling: SamplingParams) -> list[ChatResponse | Exception]:
        from memrl.llm.decoding import generate

        with self._lock:  # tokenizer and model are used by one thread at a time
            return self._run_locked(jobs, sampling, generate)

    def _run_locked(self, jobs: list[_Job], sampling: SamplingParams, generate: Any) -> list[Any]:
        self.load()
        context = int(getattr(self._hf.config.get_text_config(), "max_position_embeddings", 0) or 0)
        results: list[ChatResponse | Exception | None] = [None] * len(jobs)
        prepared = []
        for i, job in enumerate(jobs):
            try:
                ids = self.prompt_ids(job.messages, job.tools, job.tool_choice)
                if context and len(ids) + sampling.max_tokens > context:
                    raise ValidationError(
                        f"prompt ({len(ids)} tokens) + max_tokens ({sampling.max_tokens}) exceeds the "
                        f"model's context of {context} tokens"
                    )
                prepared.append((i, ids, self._matcher(job)))
            except Exception as e:  # a bad schema or an overlong prompt fails its own request only
                results[i] = e if isinstance(e, MemrlError) else LLMProviderError(f"{type(e).__name__}: {e}")
        prepared.sort(key=lambda p: len(p[1]))  # similar lengths together: less padding
        for start in range(0, len(prepared), self.max_batch_size):
            chunk = prepared[start : start + self.max_batch_size]
            try:
                gens = generate(
                    self._hf,
                    self._tok,
                    [p[1] for p in chunk],
                    sampling=sampling,
                    matchers=[p[2] for p in chunk],
                    stop_ids=self.stop_ids,
                    pad_id=self._tok.pad_token_id,
                )
            except Exception as e:  # torch / xgrammar failures reach callers as provider errors
                err = (
                    e
                    if isinstance(e, MemrlError)
                    else LLMProviderError(f"local generation failed: {type(e).__name__}: {e}")
                )
                for i, _, _ in chunk:
                    results[i] = err
                continue
            for (i, _, _), gen in zip(chunk, gens, strict=True):
                results[i] = self._response(gen, jobs[i])
        return results  # type: ignore[return-value]

    def _response(self, gen: Any, job: _Job) -> ChatResponse:
        text, calls, finish = gen.text, [], gen.finish_reason
        if job.tools and job.tool_choice != "none":
            # A deterministic id (a hash of prompt and completion): replays hit the disk cache turn after turn.
            digest = hashlib.sha256(json.dumps([gen.prompt_ids, gen.completion_ids]).encode()).hexdigest()
            call = parse_tool_call(gen.text, job.tools, call_id=f"call_{digest[:16]}")
            if call is not None:
                text, calls = "", [call]
                finish = "tool_calls" if finish == "stop" else finish
        return ChatResponse(
            text=text,
            tool_calls=calls,
            usage=Usage(len(gen.prompt_ids), len(gen.completion_ids)),
            finish_reason=finish,
            prompt_ids=gen.prompt_ids,
            completion_ids=gen.completion_ids,
            logprobs=gen.logprobs,
            raw={"text": gen.text},
            constraint=job.constraint,
            temperature=job.sampling.temperature,
        )

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
        jobs = [_Job(m, tools, json_schema, sampling or SamplingParams(), tool_choice, grammar=grammar)
                for m in conversations]  # fmt: skip
        results = self._run(jobs, sampling or SamplingParams())
        for r in results:
            if isinstance(r, Exception):
                raise r
        return results  # type: ignore[return-value]

    # ---- async: concurrent calls become batches ----------------------------------------------------
    async def _chat(
        self,
        messages: list[Message],
        *,
        tools: list[dict[str, Any]] | None,
        json_schema: dict[str, Any] | None,
        sampling: SamplingParams,
        tool_choice: ToolChoice,
        grammar: str | None = None,
    ) -> ChatResponse:
        loop = asyncio.get_running_loop()
        state = self._loop_state.setdefault(loop, {})
        queue: asyncio.Queue[_Job] = state.setdefault("queue", asyncio.Queue())
        job = _Job(messages, tools, json_schema, sampling, tool_choice, loop.create_future(), grammar)
        queue.put_nowait(job)
        # The worker lives only while there is work (no task left pending at exit). No await between
        # its last empty() check and its end, so a job put here is always seen by a live worker.
        worker = state.get("worker")
        if worker is None or worker.done():
            state["worker"] = loop.create_task(self._worker(queue))
        assert job.future is not None
        return await job.future

    async def _worker(self, queue: asyncio.Queue[_Job]) -> None:
        while not queue.empty():
            jobs = [queue.get_nowait()]
            await asyncio.sleep(self.batch_wait)  # let callers started together join this batch
            while not queue.empty():
                jobs.append(queue.get_nowait())
            groups: dict[SamplingParams, list[_Job]] = defaultdict(list)
            for job in jobs:
                if job.future is not None and not job.future.cancelled():
                    groups[job.sampling].append(job)
            for sampling, group in groups.items():
                try:
                    results: list[Any] = await asyncio.to_thread(self._run, group, sampling)
                except Exception as e:  # pragma: no cover - _run reports failures per job
                    results = [e] * len(group)
                for job, result in zip(group, results, strict=True):
                    if job.future is None or job.future.done():
                        continue
                    if isinstance(result, Exception):
                        job.future.set_exception(result)
                    else:
                        job.future.set_result(result)

    async def aclose(self) -> None:
        state = self._loop_state.get(asyncio.get_running_loop(), {})
        worker = state.pop("worker", None)
        state.pop("queue", None)
        if worker is not None:
            worker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await worker
