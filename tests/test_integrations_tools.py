"""memrl's memory tools in LangChain and in the OpenAI Agents SDK, driven by agents over real HTTP.

The boundary faked is the model: memrl's scripted LLM behind memrl's OpenAI-compatible server on loopback
(``memrl serve llm``'s server), called by LangChain's ``ChatOpenAI`` and by the Agents SDK's
``OpenAIChatCompletionsModel`` with the openai client. The tools, the store and the agents are real: the
agent calls the tools, the store changes, and what the tool answered reaches the model's next request.
"""

from __future__ import annotations

import json

import pytest

pytest.importorskip("langchain_core.tools")

from memrl.agents.jobs import job_writer  # noqa: E402
from memrl.errors import ValidationError  # noqa: E402
from memrl.integrations.toolset import MEMORY_TOOLS, bind  # noqa: E402
from memrl.llm import LLMServer, ScriptedLLM  # noqa: E402
from memrl.memory import HashingEmbedder, Memory  # noqa: E402
from memrl.tools.jobs import JOB_TOOLS  # noqa: E402


@pytest.fixture
def memory(tmp_path):
    with Memory(str(tmp_path / "tools.db"), embedder=HashingEmbedder(64), writer=job_writer()) as m:
        yield m


@pytest.fixture
def scripted():
    return ScriptedLLM([])


@pytest.fixture
def server(scripted):
    with LLMServer(scripted) as s:
        yield s


def _call(name, **arguments):
    return {"tool_calls": [{"id": f"call_{name}", "name": name, "arguments": arguments}]}


def _tool_messages(request):
    return [m["content"] for m in request["messages"] if m.get("role") == "tool"]


def test_the_tools_are_memrls_own_with_their_schemas_and_jobs_only_with_a_writer(tmp_path, memory):
    from memrl.integrations.langchain import memory_tools

    tools = memory_tools(memory, "alice")
    by_name = {t.name: t for t in (*MEMORY_TOOLS, *JOB_TOOLS.tools)}
    assert [t.name for t in tools] == [t.name for t in (*MEMORY_TOOLS, *JOB_TOOLS.tools)]
    for t in tools:  # one schema per operation: the very object the REST API and MCP server derive from
        assert t.args_schema is by_name[t.name].parameters and t.description == by_name[t.name].description
    with Memory(str(tmp_path / "plain.db"), embedder=HashingEmbedder(64)) as plain:
        assert "remember" not in {t.name for t in memory_tools(plain, "alice")}
        with pytest.raises(ValidationError, match="writer"):
            bind(plain, "alice", names=["remember"])
    with pytest.raises(ValidationError, match="namespace"):
        memory_tools(memory, "bad\nname")
    # a bad call is an error text for the model, and changes nothing
    add = next(t for t in tools if t.name == "add_memory")
    text = add.invoke({"content": "x", "type": "sideways"})
    assert text.startswith("Error in add_memory") and memory.count(namespace="alice") == 0


def test_a_langchain_agent_over_http_adds_then_finds_a_memory(memory, server, scripted):
    from langchain.agents import create_agent
    from langchain_openai import ChatOpenAI

    from memrl.integrations.langchain import memory_retriever, memory_tools

    model = ChatOpenAI(
        model="scripted", base_url=server.base_url, api_key="test", temperature=0, max_retries=0
    )
    agent = create_agent(model, memory_tools(memory, "alice", names=["add_memory", "search_memories"]))
    scripted.add(_call("add_memory", content="Alice moved to Lisbon in May 2023", type="episodic"))
    scripted.add("Noted.")
    out = agent.invoke({"messages": [{"role": "user", "content": "I moved to Lisbon in May 2023."}]})
    assert out["messages"][-1].content == "Noted."
    (item,) = memory.list(namespace="alice")
    assert (item.content, item.type.value) == ("Alice moved to Lisbon in May 2023", "episodic")
    assert _tool_messages(server.requests[1]) == [f"Created memory {item.id}."]
    assert [t["function"]["name"] for t in server.requests[0]["tools"]] == ["add_memory", "search_memories"]

    scripted.add(_call("search_memories", query="where does Alice live", top_k=3))
    scripted.add("In Lisbon.")
    out = agent.invoke({"messages": [{"role": "user", "content": "Where do I live?"}]})
    (answer,) = _tool_messages(server.requests[3])
    assert "Alice moved to Lisbon in May 2023" in answer and item.id in answer
    assert out["messages"][-2].artifact[0]["id"] == item.id  # the structured hits ride along

    docs = memory_retriever(memory, "alice", top_k=2, mode="bm25").invoke("Lisbon")
    assert [(d.page_content, d.id, d.metadata["type"]) for d in docs] == [(item.content, item.id, "episodic")]
    with pytest.raises(ValidationError, match="mode"):
        memory_retriever(memory, "alice", mode="fuzzy")


async def test_an_agents_sdk_agent_over_http_remembers_a_conversation_and_searches_it(
    memory, server, scripted
):
    pytest.importorskip("agents")
    from agents import Agent, OpenAIChatCompletionsModel, RunConfig, Runner, set_tracing_disabled
    from openai import AsyncOpenAI

    from memrl.integrations.openai_agents import memory_tools

    set_tracing_disabled(True)  # no trace export (no network)
    client = AsyncOpenAI(base_url=server.base_url, api_key="test", max_retries=0)
    agent = Agent(
        name="assistant", instructions="Use your memory.",
        tools=memory_tools(memory, "bob", names=["remember", "search_memories", "delete_memory"]),
        model=OpenAIChatCompletionsModel(model="scripted", openai_client=client),
    )  # fmt: skip
    turns = [{"role": "user", "name": "Bob", "content": "I adopted a cat named Tom"}]
    scripted.add(_call("remember", messages=turns, wait_seconds=30))
    scripted.add(_call("delete_memory", memory_id="no-such-id"))  # a bad call: the error goes back as text
    scripted.add("Done.")
    result = await Runner.run(agent, "Remember what I said.", run_config=RunConfig(tracing_disabled=True))
    assert result.final_output == "Done."
    items = memory.list(namespace="bob")  # the raw agent stored the turn as said (and its context unit)
    assert [i.id for i in items] == ["S1:1", "S1:1+ctx"] and all("cat named Tom" in i.content for i in items)
    item = items[0]
    job_text, error_text = _tool_messages(server.requests[2])
    assert ": succeeded; added 2." in job_text
    assert error_text.startswith("Error in delete_memory") and "no-such-id" in error_text

    scripted.add(_call("search_memories", query="Bob's cat"))
    scripted.add("Tom.")
    result = await Runner.run(agent, "What is my cat called?", run_config=RunConfig(tracing_disabled=True))
    (found,) = _tool_messages(server.requests[4])
    assert "Tom" in found and item.id in found and result.final_output == "Tom."
    sent = json.dumps(server.requests[3]["tools"])
    assert '"remember"' in sent and '"search_memories"' in sent


async def test_the_langchain_tools_and_retriever_have_an_async_side(memory):
    from memrl.integrations.langchain import memory_retriever, memory_tools

    add, search = memory_tools(memory, "carol", names=["add_memory", "search_memories"])
    text = await add.ainvoke({"content": "Carol speaks Portuguese", "metadata": {"lang": "pt"}})
    assert text.startswith("Created memory")
    assert "Carol speaks Portuguese" in await search.ainvoke({"query": "Portuguese", "mode": "bm25"})
    docs = await memory_retriever(memory, "carol", filters={"lang": "pt"}).ainvoke("Portuguese")
    assert [d.page_content for d in docs] == ["Carol speaks Portuguese"] and docs[0].metadata["metadata"] == {
        "lang": "pt"
    }
    assert await memory_retriever(memory, "carol", filters={"lang": "en"}).ainvoke("Portuguese") == []


@pytest.mark.parametrize(
    ("hidden", "module", "extra"),
    [("langchain_core", "langchain", "langchain"), ("agents", "openai_agents", "openai-agents")],
)
def test_a_missing_framework_names_the_extra_to_install(hidden, module, extra):
    import subprocess
    import sys

    code = (f"import sys; sys.modules[{hidden!r}] = None\n"
            f"try:\n    import memrl.integrations.{module}\nexcept Exception as e:\n    print(type(e).__name__, e)\n")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120).stdout
    assert out.startswith("ConfigError") and f"pip install 'memrl[{extra}]'" in out
