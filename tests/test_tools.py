"""MemUpdate's six tools on a real store: derived schemas, happy paths, and bad calls that change nothing."""

from __future__ import annotations

import json
import random

import pytest

from memrl.memory.facade.memory import AsyncMemory
from memrl.tools.base import Tool, tool
from memrl.tools.memupdate import MEMUPDATE_TOOLS, MemoryContext
from memrl.tools.splitting import by_date, by_sentence, by_speaker, limit_parts


@pytest.fixture
async def ctx(amem: AsyncMemory):
    for t, c in [
        ("episodic", "2023-05-08: Caroline attended an LGBTQ support group."),
        ("semantic", "Caroline wants to become a counselor."),
        ("semantic", "Melanie paints landscapes. Melanie also does pottery."),
        ("episodic", "Caroline: I love the lake.\nMelanie: Me too!\nMelanie: Let's go camping."),
    ]:
        await amem.add(c, type=t)
    return MemoryContext(amem, "alice", actor="test-agent", rng=random.Random(1))


async def snapshot(m: AsyncMemory):
    items = await m.list(include_deleted=True)
    return [(i.id, i.content, i.deleted, i.type.value) for i in items], len(await m.history())


def test_schemas_are_derived_from_signatures():
    schemas = {s["function"]["name"]: s["function"] for s in MEMUPDATE_TOOLS.schemas}
    assert list(schemas) == [
        "search_memory", "manage_memory", "delete_memory", "sample_memory", "merge_memory", "split_memory",
    ]  # fmt: skip
    search = schemas["search_memory"]["parameters"]
    assert search["required"] == ["query"]
    assert search["properties"]["top_k"] == {
        "default": 5, "description": "How many memories to return (1-50).", "maximum": 50, "minimum": 1,
        "type": "integer",
    }  # fmt: skip
    assert search["properties"]["memory_type"]["enum"] == ["episodic", "semantic", "procedural"]
    assert search["additionalProperties"] is False
    merge = schemas["merge_memory"]["parameters"]["properties"]["memory_ids"]
    assert (merge["minItems"], merge["maxItems"], merge["items"]) == (
        2,
        5,
        {"maxLength": 64, "minLength": 1, "type": "string"},
    )
    # every free-text argument is bounded, so constrained decoding can always finish a call
    for fn in schemas.values():
        for prop in fn["parameters"]["properties"].values():
            if prop.get("type") == "string" and "enum" not in prop:
                assert "maxLength" in prop, fn["name"]
    assert set(schemas["manage_memory"]["parameters"]["required"]) == {"operation", "content"}
    assert "$defs" not in json.dumps(schemas) and "$ref" not in json.dumps(schemas)
    for fn in schemas.values():
        assert fn["description"] and all(
            p.get("description") for p in fn["parameters"]["properties"].values()
        )


def test_tool_definition_errors_are_caught_early():
    async def undocumented(ctx, x: int) -> str:
        """Does something.

        Args:
            y: not x.
        """
        return ""

    with pytest.raises(TypeError, match="argument 'x' is not documented"):
        Tool(undocumented)

    async def no_doc(ctx) -> str:
        return ""

    with pytest.raises(TypeError, match="needs a docstring"):
        tool(no_doc)


async def test_search_memory(ctx):
    r = await MEMUPDATE_TOOLS.call(ctx, "search_memory", '{"query": "Caroline counselor", "top_k": 2}')
    assert r.ok and r.content.count("\n") == 1
    assert "Caroline wants to become a counselor." in r.content.splitlines()[0]
    r = await MEMUPDATE_TOOLS.call(ctx, "search_memory", {"query": "Caroline", "memory_type": "episodic"})
    assert r.ok and "(semantic" not in r.content and "(episodic" in r.content
    r = await MEMUPDATE_TOOLS.call(ctx, "search_memory", {"query": "xylophone", "similarity_threshold": 0.99})
    assert r.ok and r.content == "No memories matched the query." and r.data == []


async def test_manage_memory_create_and_update(ctx):
    r = await MEMUPDATE_TOOLS.call(
        ctx,
        "manage_memory",
        {"operation": "create", "content": "Melanie has two kids.", "memory_type": "semantic"},
    )
    assert r.ok
    new_id = r.data["id"]
    item = await ctx.memory.get(new_id, namespace="alice")
    assert item.content == "Melanie has two kids." and item.type.value == "semantic"
    await ctx.memory.update(new_id, namespace="alice", metadata={"source": "D1:2"})
    r = await MEMUPDATE_TOOLS.call(
        ctx,
        "manage_memory",
        {
            "operation": "update",
            "memory_id": new_id,
            "content": "Melanie has three kids.",
            "metadata": {"by": "x"},
        },
    )
    updated = await ctx.memory.get(new_id, namespace="alice")
    assert r.ok and updated.content == "Melanie has three kids."
    assert updated.type.value == "semantic"  # an update keeps the type it was not asked to change
    assert updated.metadata == {"source": "D1:2", "by": "x"}  # and adds metadata to what was there
    history = await ctx.memory.history(new_id, namespace="alice")
    assert [h.actor for h in history] == ["test-agent", None, "test-agent"]
    assert history[-1].old_content == "Melanie has two kids."


async def test_delete_memory(ctx):
    target = (await ctx.memory.list(namespace="alice"))[1]
    r = await MEMUPDATE_TOOLS.call(ctx, "delete_memory", {"memory_id": target.id, "reason": "outdated"})
    assert r.ok and await ctx.memory.count(namespace="alice") == 3
    gone = await ctx.memory.get(target.id, namespace="alice", include_deleted=True)
    assert gone.deleted and gone.metadata["delete_reason"] == "outdated"


async def test_sample_memory_strategies(ctx):
    items = await ctx.memory.list(namespace="alice")
    r = await MEMUPDATE_TOOLS.call(ctx, "sample_memory", {"k": 2, "strategy": "random"})
    assert r.ok and len(r.data) == 2 and set(r.data) <= {i.id for i in items}
    await ctx.memory.update(items[0].id, "2023-05-08: Caroline went to a support group.", namespace="alice")
    r = await MEMUPDATE_TOOLS.call(ctx, "sample_memory", {"k": 1, "strategy": "recent"})
    assert r.data == [items[0].id]
    r = await MEMUPDATE_TOOLS.call(ctx, "sample_memory", {"k": 3, "strategy": "diverse"})
    assert len(set(r.data)) == 3
    r = await MEMUPDATE_TOOLS.call(ctx, "sample_memory", {"k": 10, "memory_type": "semantic"})
    assert len(r.data) == 2
    empty = MemoryContext(ctx.memory, "nobody")
    r = await MEMUPDATE_TOOLS.call(empty, "sample_memory", {})
    assert r.ok and r.content == "The memory is empty."


async def test_merge_memory_with_and_without_content(ctx):
    items = await ctx.memory.list(namespace="alice")
    r = await MEMUPDATE_TOOLS.call(
        ctx, "merge_memory",
        {"memory_ids": [items[0].id, items[1].id], "content": "Caroline: support group, wants to counsel.",
         "strategy": "summarize"},
    )  # fmt: skip
    assert r.ok
    merged = await ctx.memory.get(r.data["id"], namespace="alice")
    assert merged.content == "Caroline: support group, wants to counsel."
    assert merged.metadata["merge_strategy"] == "summarize"
    assert await ctx.memory.count(namespace="alice") == 3
    r = await MEMUPDATE_TOOLS.call(ctx, "merge_memory", {"memory_ids": [items[2].id, items[3].id]})
    assert r.ok and "concatenated" in r.content
    merged = await ctx.memory.get(r.data["id"], namespace="alice")
    assert merged.content == items[2].content + "\n" + items[3].content


async def test_split_memory_by_criteria_and_by_parts(ctx):
    items = await ctx.memory.list(namespace="alice")
    r = await MEMUPDATE_TOOLS.call(ctx, "split_memory", {"memory_id": items[2].id})
    assert r.ok and len(r.data["ids"]) == 2
    texts = [(await ctx.memory.get(i, namespace="alice")).content for i in r.data["ids"]]
    assert texts == ["Melanie paints landscapes.", "Melanie also does pottery."]
    r = await MEMUPDATE_TOOLS.call(
        ctx, "split_memory", {"memory_id": items[3].id, "split_criteria": "speaker"}
    )
    texts = [(await ctx.memory.get(i, namespace="alice")).content for i in r.data["ids"]]
    assert texts == ["Caroline: I love the lake.", "Melanie: Me too!\nMelanie: Let's go camping."]
    parts = ["Caroline wants to become", "a counselor."]  # the model's own cut, keeping every word
    r = await MEMUPDATE_TOOLS.call(ctx, "split_memory", {"memory_id": items[1].id, "parts": parts})
    assert r.ok and (await ctx.memory.get(r.data["ids"][1], namespace="alice")).content == "a counselor."


async def test_a_split_that_drops_words_or_a_merge_over_the_item_cap_is_refused(ctx):
    """A split or merge moves text between memories; it never loses it nor makes a memory longer than
    one may be (a blind merge of many memories must not make each retrieved memory carry more text)."""
    items = await ctx.memory.list(namespace="alice")
    before = await snapshot(ctx.memory)
    r = await MEMUPDATE_TOOLS.call(
        ctx,
        "split_memory",
        {"memory_id": items[1].id, "parts": ["Caroline wants to counsel.", "She studies."]},
    )
    assert not r.ok and "leave out words" in r.content and "become" in r.content
    assert "manage_memory" in r.content  # says what to use instead
    long = [await ctx.memory.add("fact " * 180, namespace="alice") for _ in range(3)]  # 900 chars each
    before = await snapshot(ctx.memory)
    r = await MEMUPDATE_TOOLS.call(ctx, "merge_memory", {"memory_ids": [m.id for m in long]})
    assert not r.ok and "2000-character limit" in r.content and "2702 characters" in r.content
    assert await snapshot(ctx.memory) == before
    r = await MEMUPDATE_TOOLS.call(ctx, "merge_memory", {"memory_ids": [m.id for m in long[:2]]})
    assert r.ok  # two of them fit: 1,801 characters


async def test_split_that_cannot_split_changes_nothing(ctx):
    items = await ctx.memory.list(namespace="alice")
    before = await snapshot(ctx.memory)
    r = await MEMUPDATE_TOOLS.call(ctx, "split_memory", {"memory_id": items[1].id, "split_criteria": "date"})
    assert not r.ok and "only one date part" in r.content
    assert await snapshot(ctx.memory) == before


@pytest.mark.parametrize(
    ("name", "args", "expect"),
    [
        ("search_memory", "{not json", "not valid JSON"),
        ("search_memory", "[1, 2]", "must be a JSON object"),
        ("search_memory", {}, "argument 'query': Field required"),
        ("search_memory", {"query": "x", "top_k": 500}, "argument 'top_k'"),
        ("search_memory", {"query": "x", "top_k": "many"}, "argument 'top_k'"),
        ("search_memory", {"query": "x", "memory_type": "core"}, "argument 'memory_type'"),
        ("search_memory", {"query": "x", "colour": "red"}, "argument 'colour': unknown argument"),
        ("manage_memory", {"operation": "update", "content": "x"}, "needs memory_id"),
        (
            "manage_memory",
            {"operation": "create", "content": "x", "memory_id": "abc"},
            "do not pass memory_id",
        ),
        ("manage_memory", {"operation": "upsert", "content": "x"}, "argument 'operation'"),
        ("manage_memory", {"operation": "create", "content": ""}, "argument 'content'"),
        ("manage_memory", {"operation": "create", "content": "x" * 20_000}, "at most 2000 characters"),
        (
            "manage_memory",
            {"operation": "update", "content": "x", "memory_id": "ghost"},
            "'ghost' does not exist",
        ),
        ("delete_memory", {"memory_id": "ghost"}, "'ghost' does not exist"),
        ("delete_memory", {"memory_id": 12}, "argument 'memory_id'"),
        ("merge_memory", {"memory_ids": ["only-one"]}, "argument 'memory_ids'"),
        ("merge_memory", {"memory_ids": ["a", "b", "c", "d", "e", "f"]}, "argument 'memory_ids'"),
        ("split_memory", {"memory_id": "ghost"}, "'ghost' does not exist"),
        ("sample_memory", {"strategy": "oldest"}, "argument 'strategy'"),
        ("forget_everything", {}, "no tool named 'forget_everything'"),
    ],
)
async def test_bad_calls_return_readable_errors_and_change_nothing(ctx, name, args, expect):
    before = await snapshot(ctx.memory)
    r = await MEMUPDATE_TOOLS.call(ctx, name, args)
    assert not r.ok and r.error
    assert expect in r.content, r.content
    assert r.content.startswith("Error")
    assert await snapshot(ctx.memory) == before


async def test_merge_with_one_unknown_id_changes_nothing(ctx):
    items = await ctx.memory.list(namespace="alice")
    before = await snapshot(ctx.memory)
    r = await MEMUPDATE_TOOLS.call(
        ctx, "merge_memory", {"memory_ids": [items[0].id, "ghost"], "content": "x"}
    )
    assert not r.ok and "ghost" in r.content
    assert await snapshot(ctx.memory) == before


def test_splitters():
    assert by_sentence("One. Two! Three? four") == ["One.", "Two!", "Three? four"]
    assert by_speaker("A: hi\nA: there\nB: yo\n\nA: bye") == ["A: hi\nA: there", "B: yo", "A: bye"]
    text = "On 8 May 2023 Caroline went out. On 2023-06-10 she camped. May 20, 2023: a party"
    assert by_date(text) == [
        "On 8 May 2023 Caroline went out.",
        "On 2023-06-10 she camped.",
        "May 20, 2023: a party",
    ]
    assert by_date("no dates here") == ["no dates here"]
    assert limit_parts(["a", "b", "c", "d", "e"], 2) == ["a b c", "d e"]
    assert limit_parts(["a", "b"], 5) == ["a", "b"]
