"""The token-level protocol: one chat layer (TemplatedLLM) over any TokenEngine, and multi-turn
continuation (each turn's prompt extends the previous prompt + the sampled tokens)."""

from __future__ import annotations

import pytest

from memrl.llm.base import SamplingParams
from memrl.llm.local import LocalEngine, LocalLLM
from memrl.llm.templated import TemplatedLLM
from memrl.llm.tokens import TokenEngine, TokenRequest, TokenResult, finish_reason
from tests.tiny_lm import make_tiny_lm

TOOLS = [{"type": "function", "function": {"name": "lookup", "description": "look a word up",
          "parameters": {"type": "object", "properties": {"word": {"type": "string"}}, "required": ["word"]}}}]  # fmt: skip


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return str(make_tiny_lm(tmp_path_factory.mktemp("tiny")))


class RecordingEngine(TokenEngine):
    """A token engine that delegates to a real LocalEngine and records what the chat layer sent."""

    def __init__(self, inner: LocalEngine) -> None:
        self.inner = inner.load()
        self.tokenizer, self.stop_ids = self.inner.tokenizer, self.inner.stop_ids
        self.requests: list[TokenRequest] = []

    async def generate(self, request: TokenRequest) -> TokenResult:
        self.requests.append(request)
        return await self.inner.generate(request)


async def test_the_same_chat_layer_runs_on_another_engine_and_records_constraint_and_temperature(tiny):
    engine = RecordingEngine(LocalEngine(tiny))
    llm = TemplatedLLM(engine, "tiny")
    sampling = SamplingParams(temperature=0.7, seed=3, max_tokens=40)
    reply = await llm.chat([{"role": "user", "content": "Ana?"}], tools=TOOLS, tool_choice="required",
                           sampling=sampling)  # fmt: skip
    sent = engine.requests[-1]
    assert list(sent.prompt_ids) == reply.prompt_ids == llm.prompt_ids([{"role": "user", "content": "Ana?"}],
                                                                       TOOLS, "required")  # fmt: skip
    assert sent.constraint == {"tools": TOOLS, "tool_choice": "required"} == reply.constraint
    assert reply.temperature == 0.7 and len(reply.logprobs) == len(reply.completion_ids)
    assert reply.raw["text"].startswith('{"name": "lookup", "arguments": {')  # the grammar held
    # the local back-end is the same layer on its own engine: same prompt ids, same reply when seeded
    local = LocalLLM(tiny)
    again = await local.chat([{"role": "user", "content": "Ana?"}], tools=TOOLS, tool_choice="required",
                             sampling=sampling)  # fmt: skip
    assert again.prompt_ids == reply.prompt_ids and again.completion_ids == reply.completion_ids


async def test_a_continued_conversation_extends_the_sampled_tokens_exactly(tiny):
    llm = LocalLLM(tiny)
    third_msgs = [{"role": "user", "content": "Look up Ana."}]
    a = await llm.chat(third_msgs, tools=TOOLS, tool_choice="auto", sampling=SamplingParams(max_tokens=12))
    b_msgs = [*third_msgs, a.to_message(), {"role": "user", "content": "And Lena?"}]
    b = await llm.chat(b_msgs, tools=TOOLS, tool_choice="auto", sampling=SamplingParams(max_tokens=6))
    # another tool_choice renders another system prompt: no continuation, the whole prompt afresh
    c = await llm.chat(b_msgs, tools=TOOLS, tool_choice="none", sampling=SamplingParams(max_tokens=2))
    assert c.prompt_ids == llm.prompt_ids(b_msgs, TOOLS, "none")
    head = a.prompt_ids + a.completion_ids
    assert b.prompt_ids[: len(head)] == head and len(b.prompt_ids) > len(head)
    tail = llm.tokenizer.decode(b.prompt_ids[len(head) :])
    assert "And Lena?" in tail and tail.rstrip().endswith("assistant")


def test_finish_reason_is_length_only_when_the_budget_ran_out_without_a_stop_token():
    stops = frozenset({7})
    assert finish_reason([1, 2, 7], stops, 3) == "stop"
    assert finish_reason([1, 2, 3], stops, 3) == "length"
    assert finish_reason([1, 2], stops, 3) == "stop"  # ended by a stop string or a grammar
