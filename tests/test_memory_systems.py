"""Other memory systems through the same harness, end to end over real HTTP: mem0 (``mem0ai``, infer on and
off), LangMem (``langmem``) and memrl's raw builder behind the same ``MemorySystem`` interface, each
ingesting the bundled sample conversation and retrieving for its questions; the harness's answerer (the
same scripted one for all) answers from what each retrieved. The systems' own LLM and embedder calls go to
memrl's OpenAI-compatible server in front of a scripted model and the deterministic hashing embedder (the
boundary): the scripted model writes one fact per turn it is shown, the way an extraction model would.
The cost columns count exactly the requests the server received, and ``memrl eval compare`` pairs the
runs."""

from __future__ import annotations

import importlib.util
import json
import re

import pytest

from memrl.data import load_dataset
from memrl.eval.qa import QAEvaluation
from memrl.eval.qa.config import QAEvalConfig
from memrl.llm import ScriptedLLM
from memrl.llm.server import LLMServer
from memrl.memory.embedders import create_embedder

SAMPLE = load_dataset("sample")[0][0]
TURNS = [(t.speaker, t.text) for s in SAMPLE.sessions for t in s.turns]
NOT_THERE = "Not mentioned in the conversation"


def turns_in(text: str) -> list[str]:
    return [f"{who}: {said}" for who, said in TURNS if said in text]


def system_model(messages, tools, schema):
    """The systems' own LLM: mem0's extraction (JSON) and LangMem's extractor (tool calls)."""
    shown = "\n".join(str(m.get("content")) for m in messages)
    facts = turns_in(shown)
    if tools:  # LangMem / trustcall: one Memory tool call per fact, in parallel
        return {"tool_calls": [{"name": "Memory", "arguments": {"content": f}} for f in facts]}
    return json.dumps({"memory": [{"text": f} for f in facts]})


def answerer(messages, tools, schema):
    """The harness's answerer: the gold answer when a retrieved memory holds an evidence turn."""
    user = messages[-1]["content"]
    question = re.search(r"Question(?: \(asked on [^)]*\))?: (.*)\nAnswer:", user).group(1)
    q = next(q for q in SAMPLE.questions if q.question == question)
    memories = user.split("\n\n")[0]
    evidence = [t.text for s in SAMPLE.sessions for t in s.turns if t.id in q.evidence]
    return q.answer if any(e in memories for e in evidence) else NOT_THERE


@pytest.fixture
def endpoint():
    embedder = create_embedder("hashing:64")
    with LLMServer(ScriptedLLM(system_model), model_name="gpt-4o-mini", embed=embedder.embed) as server:
        yield server


async def run(tmp_path, server, system: str) -> dict:
    cfg = QAEvalConfig(dataset="sample", system=system, system_base_url=server.base_url, system_model="gpt-4o-mini",
                       system_embed_model="text-embedding-3-small", system_embed_dims=64, embedder="hashing",
                       provider="scripted", output_dir=str(tmp_path / system.replace(":", "-")), cache=False)  # fmt: skip
    chats, embeds = server.num_requests, len(server.embedding_requests)
    summary = await QAEvaluation(cfg, llm=ScriptedLLM(answerer), progress=False).run()
    summary["_requests"] = (server.num_requests - chats, len(server.embedding_requests) - embeds)
    return summary


def check_costs(summary: dict) -> None:
    """The cost columns add up to what the server received."""
    c = summary["cost"]
    chats, embeds = summary["_requests"]
    assert c["ingest"]["llm_calls"] + c["search"]["llm_calls"] == chats
    assert c["ingest"]["embed_calls"] + c["search"]["embed_calls"] == embeds
    assert c["answerer"]["llm_calls"] == summary["n_answered"] == len(SAMPLE.questions)
    assert c["ingest"]["seconds"] > 0 and c["answerer"]["prompt_tokens"] > 0


async def test_mem0_with_and_without_inference(tmp_path, endpoint):
    if importlib.util.find_spec("mem0") is None:  # not imported here: the adapter imports it, telemetry off
        pytest.skip("the mem0 extra: pip install 'memrl[mem0]'")
    on = await run(tmp_path, endpoint, "mem0")
    check_costs(on)
    sessions = len(SAMPLE.sessions)
    assert on["cost"]["ingest"]["llm_calls"] == sessions  # mem0 v3: one extraction call per add
    assert on["cost"]["ingest"]["prompt_tokens"] > 0 and on["cost"]["ingest"]["completion_tokens"] > 0
    assert on["cost"]["search"]["llm_calls"] == 0 and on["cost"]["search"]["embed_calls"] == len(
        SAMPLE.questions
    )
    off = await run(tmp_path, endpoint, "mem0-raw")
    check_costs(off)
    assert off["cost"]["ingest"]["llm_calls"] == 0  # infer=False: no LLM on the write path
    assert off["cost"]["ingest"]["embed_calls"] == len(TURNS)  # one embedding per stored message
    for s in (on, off):
        assert s["system"] in ("mem0", "mem0-raw") and s["n_answer_failures"] == 0 and s["f1"] > 0
        assert s["build"]["failures"] == 0
    rows = [json.loads(line) for line in (tmp_path / "mem0-raw" / "predictions.jsonl").open()]
    assert all(r["memories"] for r in rows) and all(r["search_embed_calls"] == 1 for r in rows)
    assert "## Cost" in (tmp_path / "mem0" / "report.md").read_text()


async def test_langmem_and_memrl_behind_the_same_interface_then_compare(tmp_path, endpoint, capsys):
    if importlib.util.find_spec("langmem") is None:
        pytest.skip("the langmem extra: pip install 'memrl[langmem]'")
    lm = await run(tmp_path, endpoint, "langmem")
    check_costs(lm)
    assert (
        lm["cost"]["ingest"]["llm_calls"] >= len(SAMPLE.sessions) and lm["cost"]["ingest"]["embed_calls"] > 0
    )
    assert lm["n_answer_failures"] == 0 and lm["build"]["failures"] == 0 and lm["f1"] > 0
    raw = await run(tmp_path, endpoint, "memrl:raw")
    check_costs(raw)
    assert (
        raw["_requests"] == (0, 0) and raw["cost"]["ingest"]["llm_calls"] == 0
    )  # memrl's raw builder: no LLM
    assert raw["f1"] > 0
    from memrl.cli.main import main

    assert main(["eval", "compare", str(tmp_path / "memrl-raw"), str(tmp_path / "langmem"), "--metric", "f1",
                 "--json"]) == 0  # fmt: skip
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    overall = result["comparisons"][0]["metrics"]["f1"]["overall"]
    assert overall["n"] == len(SAMPLE.questions) and overall["base"] == pytest.approx(raw["f1"])
    assert overall["other"] == pytest.approx(lm["f1"])


def test_embeddings_endpoint_and_meter_count_what_passes(endpoint):
    """The deterministic embedder behind /v1/embeddings (the openai SDK asks base64 by default) and the
    metering proxy's counts, with the SDK as a system would use it."""
    import numpy as np
    from openai import OpenAI

    from memrl.eval.systems.meter import Meter

    texts = ["Lena adopted a dog", "Omar bakes bread"]
    with Meter(endpoint.base_url) as meter:
        client = OpenAI(base_url=meter.base_url, api_key="k")
        got = client.embeddings.create(model="e", input=texts)  # base64 on the wire
        floats = client.embeddings.create(model="e", input=texts, encoding_format="float")
        reply = client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "Lena: hi there"}]
        )
        counts = meter.snapshot()
    want = create_embedder("hashing:64").embed(texts)
    assert np.allclose([d.embedding for d in got.data], want, atol=1e-6)
    assert np.allclose([d.embedding for d in floats.data], want, atol=1e-6)
    assert counts.embed_calls == 2 and counts.llm_calls == 1 and counts.errors == 0
    assert (
        counts.prompt_tokens == reply.usage.prompt_tokens
        and counts.completion_tokens == reply.usage.completion_tokens
    )


def test_a_call_the_upstream_never_received_is_an_error_not_a_call(endpoint):
    """The meter counts what the endpoint received: a request it could not forward (the upstream down) is a
    502 and an error; the client's retry that gets through is the one call."""
    import socket

    from openai import OpenAI

    from memrl.eval.systems.meter import Meter

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}/v1"
    with Meter(dead, timeout=5) as meter:
        client = OpenAI(base_url=meter.base_url, api_key="k", max_retries=0)
        with pytest.raises(Exception, match="502|upstream"):
            client.embeddings.create(model="e", input=["x"])
        assert (meter.snapshot().embed_calls, meter.snapshot().errors) == (0, 1)
    before = len(endpoint.embedding_requests)
    with Meter(endpoint.base_url) as meter:
        OpenAI(base_url=meter.base_url, api_key="k").embeddings.create(model="e", input=["x"])
        counts = meter.snapshot()
    assert counts.embed_calls == len(endpoint.embedding_requests) - before == 1 and counts.errors == 0
