"""memrl's chat layer on verl's rollout servers: a :class:`~memrl.llm.tokens.TokenEngine` over
``server_manager.generate``, so memrl's agents run unchanged inside a verl agent loop.

``verl_llm(server_manager, tokenizer, sampling_params)`` returns a
:class:`~memrl.llm.templated.TemplatedLLM` whose every call is one ``server_manager.generate(request_id,
prompt_ids=..., sampling_params=...)`` (verl 0.9: ``LLMServerClient.generate`` -> ``TokenOutput`` with
``token_ids``, ``log_probs``, ``stop_reason``). What is sent:

* **sampling**: verl's own rollout parameters (``temperature``, ``top_p``, ``top_k``, ``logprobs``... as
  verl hands them to ``AgentLoopBase.run``), never the agent's: verl's actor recomputes log-probs at the
  rollout temperature, so that is the temperature the tokens must come from (recorded on each reply).
  Per call, memrl adds ``max_tokens`` (verl honours it) and ``stop`` strings.
* **constraint** (``constraints=``): ``"none"`` (default) sends none: the model samples freely and
  memrl parses what it wrote (a malformed JSON answer or tool call is the policy's own error, as in
  MemBuilder's and MemUpdate's original training). ``"sglang"`` adds ``ebnf=<grammar>`` to the sampling
  params, which SGLang's sampler enforces; ``"vllm"`` adds ``structured_outputs=StructuredOutputsParams(
  grammar=...)`` (vLLM builds ``SamplingParams(**sampling_params)``; needs vllm importable in the agent
  loop worker). The grammar is memrl's own (:mod:`memrl.llm.grammar`: compact JSON of the schema, or a
  tool call / plain text), written out as EBNF by xgrammar, the default grammar back-end of both
  servers, so the rollout is constrained exactly as memrl's local back-end is. **Caveat**: verl's actor
  recomputes log-probabilities without any grammar mask (``_scale_logits_by_temperature`` then a plain
  softmax), so with a constraint the rollout and the trained distribution differ wherever the mask cut
  tokens off; vLLM's reported ``log_probs`` follow its ``logprobs_mode`` (verl's default
  ``processed_logprobs``). That is why ``"none"`` is the default.
* **request ids**: one per conversation, not per episode: a call whose prompt extends an earlier call's
  prompt + completion (a multi-turn tool episode) reuses that call's id, so verl's load balancer keeps
  the conversation on one server (prefix cache); a new conversation (MemAgent's next chunk, MemBuilder's
  four agents and its answer calls, which run concurrently) gets its own id, so concurrent calls never
  share one (verl passes it to vLLM unchanged under ``rollout.full_determinism``,
  ``LLMServerClient._vllm_request_id``) and spread over the servers.
* **what the server reports**: ``TokenOutput.extra_fields`` carry the weight version each call ran on
  (``min_global_steps``/``max_global_steps``, set by ``LLMServerClient.generate``); verl's v1 trainer
  reads them from every output (``agent_loop_tq.py`` puts them in the sample's tags,
  ``trainer_base._compute_metrics`` makes them ints). :meth:`ServerManagerEngine.server_fields` gives
  the episode's span (the lowest ``min``, the highest ``max``) for the loop's outputs.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from memrl.errors import ConfigError
from memrl.llm.base import LLMProviderError
from memrl.llm.tokens import TokenEngine, TokenRequest, TokenResult, finish_reason, stop_token_ids

Constraints = Literal["none", "sglang", "vllm"]
#: verl sampling keys memrl never overrides (verl's actor assumes them).
VERL_KEYS = ("temperature", "top_p", "top_k", "repetition_penalty", "logprobs")


def constraint_ebnf(constraint: dict[str, Any]) -> str:
    """The EBNF (xgrammar's dialect, accepted by SGLang's ``ebnf`` and vLLM's ``grammar``) of a constraint
    record: the same grammar memrl's local back-end compiles for it."""
    import xgrammar as xgr

    from memrl.llm.grammar import TEXT_REGEX, tool_call_schema

    if "grammar" in constraint:
        return str(constraint["grammar"])
    if "json_schema" in constraint:
        grammar = xgr.Grammar.from_json_schema(json.dumps(constraint["json_schema"]), any_whitespace=False)
    elif "tools" in constraint:
        call = xgr.Grammar.from_json_schema(
            json.dumps(tool_call_schema(constraint["tools"])), any_whitespace=False
        )
        if constraint.get("tool_choice", "auto") == "required":
            grammar = call
        else:
            grammar = xgr.Grammar.union(call, xgr.Grammar.from_regex(TEXT_REGEX))
    else:
        raise ConfigError(f"unknown constraint record with keys {sorted(constraint)}")
    return str(grammar)


def constraint_params(constraint: dict[str, Any], server: Constraints) -> dict[str, Any]:
    """The sampling-param entries that make ``server`` enforce ``constraint``."""
    ebnf = constraint_ebnf(constraint)
    if server == "sglang":
        return {"ebnf": ebnf}
    if server == "vllm":
        try:
            from vllm.sampling_params import StructuredOutputsParams
        except ImportError as e:  # pragma: no cover - only on GPU machines with vLLM
            raise ConfigError(
                "constraints='vllm' needs vllm importable in the agent loop worker (vllm>=0.10.2 for "
                "StructuredOutputsParams); install vLLM there or use constraints='none'"
            ) from e
        return {"structured_outputs": StructuredOutputsParams(grammar=ebnf)}
    raise ConfigError(f"constraints must be 'none', 'sglang' or 'vllm', got {server!r}")


class ServerManagerEngine(TokenEngine):
    """Token generation through a verl ``server_manager`` (see the module docstring)."""

    def __init__(
        self,
        server_manager: Any,
        tokenizer: Any,
        sampling_params: dict[str, Any],
        *,
        request_id: str,
        constraints: Constraints = "none",
        context_length: int | None = None,
    ) -> None:
        if constraints not in ("none", "sglang", "vllm"):
            raise ConfigError(f"constraints must be 'none', 'sglang' or 'vllm', got {constraints!r}")
        self.server_manager = server_manager
        self.tokenizer = tokenizer
        self.stop_ids = stop_token_ids(tokenizer)
        self.base = {k: sampling_params[k] for k in VERL_KEYS if k in sampling_params}
        self.request_id = request_id  # prefix of this episode's request ids (one per conversation)
        self.constraints = constraints
        self.context_length = context_length
        self.calls = 0
        self.threads: list[tuple[str, list[int]]] = []  # (request id, tokens so far) per conversation
        self.min_global_steps: int | None = None
        self.max_global_steps: int | None = None
        self.num_preempted = 0

    def thread_id(self, prompt_ids: list[int]) -> tuple[int, str]:
        """The conversation ``prompt_ids`` continues (index, request id), or a new one."""
        for i in range(len(self.threads) - 1, -1, -1):
            rid, tokens = self.threads[i]
            if len(prompt_ids) >= len(tokens) and prompt_ids[: len(tokens)] == tokens:
                return i, rid
        self.threads.append((f"{self.request_id}-{len(self.threads)}", []))
        return len(self.threads) - 1, self.threads[-1][0]

    def record(self, extra_fields: dict[str, Any] | None) -> None:
        """Keep the weight versions (and preemptions) a server reported for one call."""
        fields = extra_fields or {}
        low = fields.get("min_global_steps", fields.get("global_steps"))
        high = fields.get("max_global_steps", fields.get("global_steps"))
        if low is not None:
            self.min_global_steps = (
                int(low) if self.min_global_steps is None else min(self.min_global_steps, int(low))
            )
        if high is not None:
            self.max_global_steps = (
                int(high) if self.max_global_steps is None else max(self.max_global_steps, int(high))
            )

    def server_fields(self) -> dict[str, Any]:
        """The ``extra_fields`` verl's trainer reads from every output, for this episode's calls."""
        return {"min_global_steps": self.min_global_steps, "max_global_steps": self.max_global_steps}

    async def generate(self, request: TokenRequest) -> TokenResult:
        params = dict(self.base)
        params["max_tokens"] = request.sampling.max_tokens
        if request.sampling.stop:
            params["stop"] = list(request.sampling.stop)
        sent = None
        if request.constraint is not None and self.constraints != "none":
            params.update(constraint_params(request.constraint, self.constraints))
            sent = request.constraint
        self.calls += 1
        prompt = list(request.prompt_ids)
        thread, rid = self.thread_id(prompt)
        out = await self.server_manager.generate(rid, prompt_ids=prompt, sampling_params=params)
        if getattr(out, "stop_reason", None) in ("aborted", "abort"):
            raise LLMProviderError("verl rollout server aborted the request (weights being updated?)")
        self.record(getattr(out, "extra_fields", None))
        if getattr(out, "num_preempted", None):
            self.num_preempted += int(out.num_preempted)
        ids = list(out.token_ids)
        self.threads[thread] = (rid, prompt + ids)
        logprobs = None if out.log_probs is None else list(out.log_probs)
        if logprobs is not None and len(logprobs) != len(ids):
            raise LLMProviderError(f"rollout server returned {len(ids)} tokens but {len(logprobs)} log-probs")
        return TokenResult(
            completion_ids=ids,
            logprobs=logprobs,
            finish_reason=finish_reason(ids, self.stop_ids, request.sampling.max_tokens),
            temperature=float(self.base.get("temperature", 1.0)),
            constraint=sent,
        )


def verl_llm(
    server_manager: Any,
    tokenizer: Any,
    sampling_params: dict[str, Any],
    *,
    request_id: str,
    constraints: Constraints = "none",
    model: str = "verl-policy",
    chat_template_kwargs: dict[str, Any] | None = None,
    context_length: int | None = None,
) -> Any:
    """A memrl LLM whose calls go to verl's rollout servers (``request_id`` prefixes the request ids of
    its conversations); its engine is ``llm.engine``."""
    from memrl.llm.templated import TemplatedLLM

    engine = ServerManagerEngine(
        server_manager, tokenizer, sampling_params, request_id=request_id, constraints=constraints,
        context_length=context_length,
    )  # fmt: skip
    return TemplatedLLM(engine, model, chat_template_kwargs=chat_template_kwargs)
