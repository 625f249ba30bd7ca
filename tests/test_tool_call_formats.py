"""Tool calls in every format a supported chat template asks for, read by memrl's chat layer.

The templates are the real ones, shipped as text in tests/data (the hub cannot be reached here):
``Qwen/Qwen2.5-0.5B-Instruct``'s (Hermes ``<tool_call>`` blocks, several per turn) and
``meta-llama/Llama-3.2-1B-Instruct``'s (one JSON object with ``name`` and ``parameters``). They are put on a
small real tokenizer; the model is a scripted token engine (the boundary): it returns the tokens of the
text a model of that family writes, and everything above it (templating, tool prompt, parsing,
continuation on the sampled tokens) is memrl's real chat layer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memrl.llm.templated import TemplatedLLM
from memrl.llm.tokens import TokenEngine, TokenRequest, TokenResult, finish_reason, stop_token_ids
from memrl.llm.toolcalls import parse_tool_calls
from memrl.tools.memupdate import MEMUPDATE_TOOLS
from tests.tiny_lm import make_tiny_lm

DATA = Path(__file__).parent / "data"
TOOLS = MEMUPDATE_TOOLS.schemas
SEARCH = '{"name": "search_memory", "arguments": {"query": "Biscuit"}}'
DELETE = '{"name": "delete_memory", "arguments": {"memory_id": "O1:2", "reason": "duplicate"}}'


@pytest.fixture(scope="module")
def tokenizers(tmp_path_factory):
    """A real byte-level BPE tokenizer carrying each family's template and special tokens."""
    from transformers import AutoTokenizer

    path = make_tiny_lm(tmp_path_factory.mktemp("tiny"))
    qwen = AutoTokenizer.from_pretrained(path)
    qwen.chat_template = (DATA / "qwen2.5_chat_template.jinja").read_text()
    llama = AutoTokenizer.from_pretrained(path)
    llama.add_special_tokens({"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>",
                              "additional_special_tokens": ["<|start_header_id|>", "<|end_header_id|>"]})  # fmt: skip
    llama.chat_template = (DATA / "llama3.2_chat_template.jinja").read_text()
    return {"qwen": qwen, "llama": llama}


class ScriptedEngine(TokenEngine):
    """Returns the tokens of scripted replies, in order, then the family's end-of-turn token."""

    def __init__(self, tokenizer, replies: list[str]) -> None:
        self.tokenizer, self.replies = tokenizer, list(replies)
        self.stop_ids = stop_token_ids(tokenizer)
        self.prompts: list[list[int]] = []

    async def generate(self, request: TokenRequest) -> TokenResult:
        self.prompts.append(list(request.prompt_ids))
        ids = self.tokenizer(self.replies.pop(0), add_special_tokens=False)["input_ids"]
        ids = ids + [self.tokenizer.eos_token_id]
        return TokenResult(ids, [-0.5] * len(ids), finish_reason(ids, self.stop_ids, 512), 1.0)


# ---- the parser on its own ------------------------------------------------------------------------------
def test_hermes_blocks_several_per_turn_with_the_text_around_them_as_content():
    text = f"Let me look first.\n<tool_call>\n{SEARCH}\n</tool_call>\n<tool_call>\n{DELETE}\n</tool_call>"
    content, calls = parse_tool_calls(text, TOOLS, call_id="c")
    assert content == "Let me look first."
    assert [(c.id, c.name, c.parsed) for c in calls] == [
        ("c", "search_memory", {"query": "Biscuit"}),
        ("c_1", "delete_memory", {"memory_id": "O1:2", "reason": "duplicate"}),
    ]
    assert all(c.error is None for c in calls)


def test_a_bad_hermes_block_is_an_error_call_and_the_good_ones_are_kept():
    bad = '<tool_call>\n{"name": "search_memory", "arguments": {"query": }}\n</tool_call>'
    cut = '<tool_call>\n{"name": "delete_mem'  # opened, never closed: max_tokens ran out
    _, calls = parse_tool_calls(f"{bad}\n<tool_call>\n{SEARCH}\n</tool_call>\n{cut}", TOOLS)
    assert [c.error is None for c in calls] == [False, True, False]
    assert "not valid JSON" in calls[0].error and calls[1].parsed == {"query": "Biscuit"}
    assert "cut off" in calls[2].error  # reported to the model, not dropped


def test_llama3_json_plain_json_and_plain_text():
    content, (call,) = parse_tool_calls('{"name": "search_memory", "parameters": {"query": "dog"}}', TOOLS)
    assert (content, call.name, call.parsed, call.error) == ("", "search_memory", {"query": "dog"}, None)
    _, (tagged,) = parse_tool_calls(
        '<|python_tag|>{"name": "search_memory", "parameters": {"query": "x"}}', TOOLS
    )
    assert tagged.parsed == {"query": "x"}
    _, (plain,) = parse_tool_calls(SEARCH, TOOLS)
    assert plain.parsed == {"query": "Biscuit"}
    _, (unknown,) = parse_tool_calls('{"name": "rm_rf", "arguments": {}}', TOOLS)
    assert unknown.error == "unknown tool 'rm_rf'"
    _, (as_list,) = parse_tool_calls('{"name": "search_memory", "parameters": ["dog"]}', TOOLS)
    assert "must be a JSON object" in as_list.error
    assert parse_tool_calls("Biscuit is the dog.", TOOLS) is None


def test_memrls_parser_agrees_with_verls_hermes_parser_on_well_formed_replies(tokenizers):
    pytest.importorskip("verl")
    import asyncio

    from verl.experimental.agent_loop.tool_parser import ToolParser

    tok = tokenizers["qwen"]
    verl_parser = ToolParser.get_tool_parser("hermes", tok)
    for text in (
        f"<tool_call>\n{SEARCH}\n</tool_call>",
        f"ok <tool_call>{SEARCH}</tool_call><tool_call>{DELETE}</tool_call>",
    ):
        _, theirs = asyncio.run(
            verl_parser.extract_tool_calls(tok(text, add_special_tokens=False)["input_ids"])
        )
        _, ours = parse_tool_calls(text, TOOLS)
        assert [(c.name, json.loads(c.arguments)) for c in theirs] == [(c.name, c.parsed) for c in ours]


# ---- through the chat layer with the real templates ---------------------------------------------------
async def test_qwen25_template_prompts_hermes_and_a_two_call_turn_continues_on_the_sampled_tokens(tokenizers):
    tok = tokenizers["qwen"]
    reply = f"<tool_call>\n{SEARCH}\n</tool_call>\n<tool_call>\n{DELETE}\n</tool_call>"
    engine = ScriptedEngine(tok, [reply, "Done."])
    llm = TemplatedLLM(engine, "qwen2.5")
    messages = [{"role": "system", "content": "Edit the memory."}, {"role": "user", "content": "Clean up."}]
    first = await llm.chat(messages, tools=TOOLS)
    prompt = tok.decode(engine.prompts[0])
    assert "<tools>" in prompt and '"name": "merge_memory"' in prompt  # the template rendered the tools
    assert "within <tool_call></tool_call> XML tags" in prompt
    assert [c.name for c in first.tool_calls] == ["search_memory", "delete_memory"]
    assert first.finish_reason == "tool_calls" and first.text == ""
    messages += [first.to_message()] + [
        {"role": "tool", "tool_call_id": c.id, "content": f"result of {c.name}"} for c in first.tool_calls
    ]
    second = await llm.chat(messages, tools=TOOLS)
    assert second.text == "Done." and not second.tool_calls
    # the second prompt extends the first prompt and the exact sampled tokens: one sequence for verl
    sampled = engine.prompts[0] + first.completion_ids
    assert engine.prompts[1][: len(sampled)] == sampled
    assert "<tool_response>\nresult of delete_memory\n</tool_response>" in tok.decode(engine.prompts[1])


async def test_llama3_template_prompts_json_calls_and_continues_on_the_sampled_tokens(tokenizers):
    tok = tokenizers["llama"]
    engine = ScriptedEngine(
        tok, ['{"name": "search_memory", "parameters": {"query": "Biscuit"}}', "Biscuit."]
    )
    llm = TemplatedLLM(engine, "llama3")
    messages = [{"role": "user", "content": "Who is Biscuit?"}]
    first = await llm.chat(messages, tools=TOOLS)
    prompt = tok.decode(engine.prompts[0])
    assert 'Respond in the format {"name": function name, "parameters"' in prompt
    (call,) = first.tool_calls
    assert (call.name, call.parsed, call.error) == ("search_memory", {"query": "Biscuit"}, None)
    messages += [first.to_message(), {"role": "tool", "tool_call_id": call.id, "content": "Biscuit is a dog"}]
    second = await llm.chat(messages, tools=TOOLS)
    assert second.text == "Biscuit."
    sampled = engine.prompts[0] + first.completion_ids
    assert engine.prompts[1][: len(sampled)] == sampled
    # the template shows a tool result as JSON (a string is "iterable" to Jinja, so it goes through tojson)
    assert 'ipython<|end_header_id|>\n\n"Biscuit is a dog"<|eot_id|>' in tok.decode(engine.prompts[1])


async def test_a_call_this_llm_did_not_write_is_shown_in_the_templates_own_format(tokenizers):
    """History from elsewhere (an OpenAI-style transcript) is rendered by the template, not as raw text."""
    tok = tokenizers["qwen"]
    llm = TemplatedLLM(ScriptedEngine(tok, []), "qwen2.5")
    call = {
        "id": "x1",
        "type": "function",
        "function": {"name": "search_memory", "arguments": '{"query": "dog"}'},
    }
    text = llm.render([{"role": "user", "content": "q"}, {"role": "assistant", "content": "", "tool_calls": [call]},
                       {"role": "tool", "tool_call_id": "x1", "content": "r"}], TOOLS)  # fmt: skip
    assert '<tool_call>\n{"name": "search_memory", "arguments": {"query": "dog"}}\n</tool_call>' in text
