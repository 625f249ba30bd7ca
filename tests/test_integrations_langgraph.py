"""memrl's LangGraph store (memrl.integrations.langgraph) against LangGraph's own ``InMemoryStore``.

One recorded sequence of puts, gets, searches (filters with operators, limit, offset, no query; queries,
compared as sets since scores differ), deletes and namespace listings runs on both stores; every result
must agree. Then what InMemoryStore cannot show: escaping of namespaces and keys, exact values, bad input,
TTL as memrl's expiry, the async side, and the memrl history behind the store. The boundary faked is the
embedder (memrl's deterministic hashing embedder; LangChain's deterministic fake for InMemoryStore).
"""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

pytest.importorskip("langgraph.store.memory")

from langchain_core.embeddings import DeterministicFakeEmbedding  # noqa: E402
from langgraph.store.base import GetOp, InvalidNamespaceError, PutOp  # noqa: E402
from langgraph.store.memory import InMemoryStore  # noqa: E402

from memrl.errors import ConfigError, ValidationError  # noqa: E402
from memrl.integrations.langgraph import MemrlStore  # noqa: E402
from memrl.integrations.langgraph.naming import decode_namespace, encode_namespace, item_id  # noqa: E402
from memrl.integrations.running import need  # noqa: E402
from memrl.memory import AsyncMemory, HashingEmbedder, Memory  # noqa: E402

FIELDS = ["text"]


@pytest.fixture
def memory(tmp_path):
    with Memory(str(tmp_path / "lg.db"), embedder=HashingEmbedder(64)) as m:
        yield m


def _items(result):
    if result is None or not isinstance(result, list):
        return None if result is None else (tuple(result.namespace), result.key, result.value)
    return [(tuple(r.namespace), r.key, r.value) if hasattr(r, "key") else r for r in result]


def sequence(store):
    """The recorded sequence: every read's result, in order (items as (namespace, key, value))."""
    out = []
    put = store.put

    put(
        ("docs", "ana"),
        "a1",
        {"text": "Ana moved to Lisbon", "year": 2023, "tags": ["move"], "meta": {"k": 1}},
    )
    put(("docs", "ana"), "a2", {"text": "Ana adopted a cat named Tom", "year": 2021, "status": "ok"})
    put(("docs", "bob"), "b1", {"text": "Bob plays the guitar", "year": 2019, "status": "ok"})
    put(("notes",), "n1", {"text": "buy milk", "year": 2024}, index=False)
    put(("docs", "ana", "deep"), "d1", {"text": "a deeper note about Lisbon", "year": 2022})
    put(("docs", "bob"), "b2", {"text": "Bob works as a nurse", "year": 2020, "status": "late"})
    out.append(_items(store.get(("docs", "ana"), "a1")))
    out.append(_items(store.get(("docs", "ana"), "missing")))
    out.append(_items(store.get(("docs", "bob"), "a1")))  # a key of another namespace
    out.append(_items(store.search(("docs",))))  # no query, no filter: everything under docs
    out.append(_items(store.search((), limit=3)))
    out.append(_items(store.search((), limit=2, offset=2)))
    out.append(_items(store.search(("docs",), filter={"status": "ok"})))
    out.append(_items(store.search(("docs",), filter={"year": {"$gte": 2020, "$lt": 2023}})))
    out.append(_items(store.search(("docs",), filter={"status": {"$ne": "ok"}})))
    out.append(_items(store.search(("docs",), filter={"meta": {"k": 1}, "tags": ["move"]})))
    out.append(_items(store.search(("docs",), filter={"year": {"$gt": 2000}}, limit=2, offset=1)))
    out.append(_items(store.search(("docs", "ana"))))  # prefix: ("docs","ana","deep") is inside it
    out.append(_items(store.search(("doc",))))  # a label prefix is not a namespace prefix
    put(("docs", "ana"), "a1", {"text": "Ana moved to Porto", "year": 2024})  # update: keeps its place
    out.append(_items(store.search(("docs", "ana"))))
    store.delete(("docs", "ana"), "a1")
    out.append(_items(store.get(("docs", "ana"), "a1")))
    put(("docs", "ana"), "a1", {"text": "Ana has two cats", "year": 2025})  # re-created: now after a2
    out.append(_items(store.search(("docs", "ana"))))
    out.append(_items(store.search(("docs",), limit=0)))
    out.append(_items(store.search(("docs",), offset=10)))
    # namespaces
    out.append(store.list_namespaces())
    out.append(store.list_namespaces(prefix=("docs",)))
    out.append(store.list_namespaces(prefix=("docs", "*", "deep")))
    out.append(store.list_namespaces(suffix=("bob",)))
    out.append(store.list_namespaces(max_depth=1))
    out.append(store.list_namespaces(prefix=("docs",), max_depth=2))
    out.append(store.list_namespaces(limit=2, offset=1))
    out.append(store.list_namespaces(prefix=("docs",), suffix=("*",), limit=1))
    # a batch: reads see the state before the batch's writes, and of two puts of a key the last wins
    out.append(_items(store.batch([
        PutOp(("docs", "bob"), "b1", {"text": "first"}),
        GetOp(("docs", "bob"), "b1"),
        PutOp(("docs", "bob"), "b1", {"text": "Bob sings", "year": 2019}),
    ])))  # fmt: skip
    out.append(_items(store.get(("docs", "bob"), "b1")))
    # queries: compared as sets of keys (scores and their order are the embedder's), limit covers all
    for prefix, flt in [(("docs",), None), ((), {"year": {"$lt": 2023}}), (("notes",), None)]:
        found = store.search(prefix, query="Lisbon", filter=flt, limit=50)
        out.append(sorted((tuple(r.namespace), r.key, r.score is None) for r in found))
    return out


def test_the_recorded_sequence_gives_inmemorystores_results(memory):
    reference = InMemoryStore(
        index={"dims": 64, "embed": DeterministicFakeEmbedding(size=64), "fields": FIELDS}
    )
    ours = MemrlStore(memory, index={"fields": FIELDS})
    expected, got = sequence(reference), sequence(ours)
    for i, (e, g) in enumerate(zip(expected, got, strict=True)):
        assert g == e, f"read {i} differs"
    # the sequence means something: pages, filters and the reorder after a delete all showed up
    assert [k for _, k, _ in got[4] + got[5]] == ["a1", "a2", "b1", "b1", "b2"] and len(got[6]) == 2
    assert [k for _, k, _ in got[13]] == ["a1", "a2", "d1"] and [k for _, k, _ in got[15]] == [
        "a2",
        "a1",
        "d1",
    ]


def test_a_namespace_emptied_by_deletes_is_no_longer_listed(memory):
    """The one deliberate difference: InMemoryStore keeps listing a namespace after its last item is
    deleted (and one a get looked into); memrl's store lists namespaces that hold an item."""
    reference, ours = InMemoryStore(), MemrlStore(memory)
    for store in (reference, ours):
        store.put(("a",), "k", {"v": 1})
        store.put(("b",), "k", {"v": 2})
        store.delete(("a",), "k")
        store.get(("c",), "k")
    assert reference.list_namespaces() == [("a",), ("b",), ("c",)]
    assert ours.list_namespaces() == [("b",)]


async def test_the_async_side_gives_the_same_results_as_the_blocking_one(tmp_path):
    aio = AsyncMemory(str(tmp_path / "a.db"), embedder=HashingEmbedder(64))
    store = MemrlStore(aio, index={"fields": FIELDS})
    await store.aput(("u", "1"), "k", {"text": "Ana likes tea", "n": 1})
    await store.aput(("u", "2"), "k", {"text": "Bob likes coffee", "n": 2})
    assert (await store.aget(("u", "1"), "k")).value == {"text": "Ana likes tea", "n": 1}
    assert [r.namespace for r in await store.asearch(("u",), filter={"n": {"$gt": 1}})] == [("u", "2")]
    hits = await store.asearch(("u",), query="coffee", limit=1)
    assert [(r.namespace, r.key) for r in hits] == [(("u", "2"), "k")] and hits[0].score > 0
    assert await store.alist_namespaces(prefix=("u",)) == [("u", "1"), ("u", "2")]
    await store.adelete(("u", "1"), "k")
    assert await store.aget(("u", "1"), "k") is None
    with pytest.raises(RuntimeError, match="async method"):
        store.get(("u", "2"), "k")  # blocking inside the loop would stall it: said, not hung
    store.close()
    await aio.close()


async def test_a_store_on_a_blocking_memory_serves_async_callers_on_the_memorys_loop(memory):
    store = MemrlStore(memory, index={"fields": FIELDS})
    await store.aput(("u",), "k", {"text": "from async code"})
    assert store.get(("u",), "k").value == {"text": "from async code"}  # the blocking side sees it
    store.put(("u",), "k2", {"text": "from blocking code"})
    assert [r.key for r in await store.asearch(("u",))] == ["k", "k2"]


def test_the_ttl_sweeper_deletes_expired_items_without_a_search(memory):
    store = MemrlStore(memory, ttl={"default_ttl": 0.5 / 60, "sweep_interval_minutes": 0.3 / 60})
    with pytest.raises(ValidationError, match="sweep_interval_minutes"):
        MemrlStore(memory).start_ttl_sweeper()
    store.put(("s",), "k", {"text": "brief"})
    ns = encode_namespace("langgraph", ("s",))
    store.start_ttl_sweeper()
    try:
        deadline = time.time() + 10
        while memory.history("k", namespace=ns)[-1].op != "EXPIRE" and time.time() < deadline:
            time.sleep(0.2)
    finally:
        assert store.stop_ttl_sweeper(timeout=5)
    assert memory.history("k", namespace=ns)[-1].op == "EXPIRE" and memory.count(namespace=ns) == 0


def test_namespaces_and_keys_are_escaped_reversibly_and_never_collide(memory):
    store = MemrlStore(memory)
    spaces = [("a/b", "c"), ("a", "b/c"), ("a%2Fb", "c"), ("x\ny",), ("é", "中文")]
    keys = ["k", "__core__", "~k", "k" * 300, "", "line\nbreak", "a/b.c"]
    for i, ns in enumerate(spaces):
        for j, key in enumerate(keys):
            store.put(ns, key, {"i": i, "j": j})
    for i, ns in enumerate(spaces):
        for j, key in enumerate(keys):
            item = store.get(ns, key)
            assert (item.namespace, item.key, item.value) == (ns, key, {"i": i, "j": j})
    assert sorted(store.list_namespaces()) == sorted(spaces)
    names = {n["name"] for n in memory.namespaces()}
    assert names == {encode_namespace("langgraph", ns) for ns in spaces}
    # the escaping keeps "." apart too (LangGraph refuses it in a label, memrl's names would not)
    for ns in [("a", "b.c"), ("a.b", "c"), ("a", "b", "c")]:
        assert decode_namespace("langgraph", encode_namespace("langgraph", ns)) == ns
    assert len({encode_namespace("r", ns) for ns in [("a", "b.c"), ("a.b", "c"), ("a", "b", "c")]}) == 3
    assert len({item_id(k) for k in keys}) == len(keys) and item_id("plain") == "plain"
    with pytest.raises(InvalidNamespaceError):
        store.batch([PutOp(("a.b",), "k", {"v": 1})])  # ops given to batch directly are checked too
    with pytest.raises(InvalidNamespaceError):
        store.put(("langgraph", "x"), "k", {"v": 1})
    with pytest.raises(ValidationError, match="memrl allows 200"):
        store.put(("x" * 250,), "k", {"v": 1})


def test_values_round_trip_exactly_and_bad_values_are_refused_with_a_reason(memory):
    store = MemrlStore(memory)
    value = {"f": 0.1 + 0.2, "big": 2**63 - 1, "neg": -(2**63), "t": True, "n": None, "s": "naïve ☕",
             "nested": {"list": [1, [2, {"x": []}]], "empty": {}}, "": "empty key", "1.0": 1.0}  # fmt: skip
    store.put(("v",), "k", value)
    got = store.get(("v",), "k").value
    assert got == value and repr(got) == repr(value) and list(got) == list(value)
    store.put(("v",), "empty", {})
    assert store.get(("v",), "empty").value == {}
    with pytest.raises(ValidationError, match="NUL"):
        store.put(("v",), "bad", {"s": "a\x00b"})
    with pytest.raises(ValidationError, match="64-bit"):
        store.put(("v",), "bad", {"n": 2**64})
    with pytest.raises(ValidationError, match="finite"):
        store.put(("v",), "bad", {"x": float("nan")})
    assert store.get(("v",), "bad") is None  # nothing of a refused put was stored
    with pytest.raises(ValidationError, match="embedder"):
        MemrlStore(memory, index={"dims": 8, "embed": lambda texts: [[0.0] * 8 for _ in texts]})
    with pytest.raises(ValidationError, match="offset"):
        store.search(("v",), offset=-1)


def test_a_put_is_an_undoable_memrl_update_and_a_delete_is_restorable(memory):
    store = MemrlStore(memory, index={"fields": FIELDS})
    store.put(("u",), "city", {"text": "Ana lives in Lisbon"})
    first = store.get(("u",), "city")
    store.put(("u",), "city", {"text": "Ana lives in Porto"})
    second = store.get(("u",), "city")
    assert second.created_at == first.created_at and second.updated_at > first.updated_at
    ns = encode_namespace("langgraph", ("u",))
    assert [e.op for e in memory.history("city", namespace=ns)] == ["ADD", "UPDATE"]
    assert memory.search("Porto", namespace=ns, mode="bm25")[0].item.id == "city"  # memrl's own search
    memory.undo("city", namespace=ns)
    assert store.get(("u",), "city").value == {"text": "Ana lives in Lisbon"}
    store.delete(("u",), "city")
    assert store.get(("u",), "city") is None
    memory.restore("city", namespace=ns)
    assert store.get(("u",), "city").value == {"text": "Ana lives in Lisbon"}


def test_ttl_is_memrls_expiry_and_reads_refresh_it(memory):
    store = MemrlStore(
        memory, index={"fields": FIELDS}, ttl={"default_ttl": 1.0 / 60, "refresh_on_read": True}
    )
    store.put(("t",), "short", {"text": "gone soon"})  # default_ttl: one second
    store.put(("t",), "kept", {"text": "stays"}, ttl=None)
    store.put(("t",), "fresh", {"text": "refreshed on read"}, ttl=2.0 / 60)
    ns = encode_namespace("langgraph", ("t",))
    short = memory.get("short", namespace=ns)
    assert short.metadata["expires_at"] == pytest.approx(time.time() + 1.0, abs=0.5)
    time.sleep(1.3)
    assert store.get(("t",), "fresh") is not None  # this read moves its expiry 2 s on
    assert store.get(("t",), "short") is None and store.get(("t",), "kept") is not None
    assert {r.key for r in store.search(("t",), query="gone soon stays")} == {"kept", "fresh"}
    assert memory.history("short", namespace=ns)[-1].op == "EXPIRE"  # memrl's sweep, restorable
    time.sleep(1.2)  # 2.5 s after its put: alive only because the read refreshed it
    assert store.get(("t",), "fresh", refresh_ttl=False) is not None
    assert store.sweep_ttl() == 0 and store.list_namespaces() == [("t",)]
    store.put(("gone",), "k", {"text": "x"}, ttl=0.5 / 60)
    assert ("gone",) in store.list_namespaces()
    time.sleep(0.7)
    assert store.list_namespaces() == [("t",)]  # its only item expired: listing swept it
    with pytest.raises(ValidationError, match="ttl"):
        store.put(("t",), "bad", {"text": "x"}, ttl=-1)


def test_a_missing_library_names_the_extra_to_install():
    with pytest.raises(ConfigError, match=r"pip install 'memrl\[langgraph\]'"):
        need("no_such_module_for_memrl", "langgraph", "memrl.integrations.langgraph")
    code = ("import sys; sys.modules['langgraph'] = None\n"
            "import memrl.integrations.langgraph as m\n"
            "try:\n    m.MemrlStore\nexcept Exception as e:\n    print(type(e).__name__, e)\n")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120).stdout
    assert out.startswith("ConfigError") and "pip install 'memrl[langgraph]'" in out


def scripted_chat(replies):
    """A LangChain chat model replaying ``replies`` (AIMessages, tool calls included); ``seen``: its inputs."""
    from langchain_core.language_models import BaseChatModel
    from langchain_core.outputs import ChatGeneration, ChatResult

    class Scripted(BaseChatModel):
        replies: list
        seen: list = []

        @property
        def _llm_type(self) -> str:
            return "scripted"

        def bind_tools(self, tools, **kwargs):
            return self

        def _generate(self, messages, stop=None, run_manager=None, **kwargs):
            self.seen.append(list(messages))
            return ChatResult(generations=[ChatGeneration(message=self.replies.pop(0))])

    return Scripted(replies=list(replies))


def test_a_langgraph_agent_with_langmems_tools_remembers_across_runs(memory):
    from langchain_core.messages import AIMessage, ToolMessage
    from langgraph.prebuilt import create_react_agent
    from langmem import create_manage_memory_tool, create_search_memory_tool

    store = MemrlStore(memory)
    ns = ("memories", "{langgraph_user_id}")
    tools = [create_manage_memory_tool(namespace=ns), create_search_memory_tool(namespace=ns)]
    config = {"configurable": {"langgraph_user_id": "ana", "thread_id": "1"}}
    model = scripted_chat([
        AIMessage("", tool_calls=[{"name": "manage_memory", "id": "c1",
                                   "args": {"action": "create", "content": "Ana drinks green tea every morning"}}]),
        AIMessage("I will remember that."),
        AIMessage("", tool_calls=[{"name": "search_memory", "id": "c2", "args": {"query": "what does Ana drink"}}]),
        AIMessage("Green tea."),
    ])  # fmt: skip
    agent = create_react_agent(model, tools, store=store)
    agent.invoke({"messages": [{"role": "user", "content": "I drink green tea every morning."}]}, config)
    (stored,) = store.search(("memories", "ana"))
    assert stored.value == {"content": "Ana drinks green tea every morning"}
    # the memory is a memrl item: in its namespace, with its history
    (item,) = memory.list(namespace="langgraph/memories/ana")
    assert "green tea" in item.content and memory.history(item.id, namespace=item.namespace)[0].op == "ADD"
    # a second run, another thread: the search tool finds it in the store
    config2 = {"configurable": {"langgraph_user_id": "ana", "thread_id": "2"}}
    out = agent.invoke({"messages": [{"role": "user", "content": "What do I drink?"}]}, config2)
    (found,) = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert "Ana drinks green tea every morning" in found.content and stored.key in found.content
    assert out["messages"][-1].content == "Green tea." and model.replies == []
    # another user's namespace holds nothing
    assert store.search(("memories", "bob")) == []
