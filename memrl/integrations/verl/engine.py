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
        self.request_id = request_id  # verl's sticky session: every turn of an episode on one server
        self.constraints = constraints
        self.context_length = context_length
        self.calls = 0

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
        out = await self.server_manager.generate(
            self.request_id, prompt_ids=list(request.prompt_ids), sampling_params=params
        )
        if getattr(out, "stop_reason", None) == "aborted":
            raise LLMProviderError("verl rollout server aborted the request (weights being updated?)")
        ids = list(out.token_ids)
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
    """A memrl LLM whose calls go to verl's rollout servers (one per episode: ``request_id`` is sticky)."""
    from memrl.llm.templated import TemplatedLLM

    engine = ServerManagerEngine(
        server_manager, tokenizer, sampling_params, request_id=request_id, constraints=constraints,
        context_length=context_length,
    )  # fmt: skip
    return TemplatedLLM(engine, model, chat_template_kwargs=chat_template_kwargs)
