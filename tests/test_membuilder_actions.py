"""MemBuilder's JSON actions applied to a real store: UPDATE and MERGE replace (with history), bad answers
change nothing, bad single actions are recorded as failed."""

from __future__ import annotations

import json

import pytest

from memrl.llm.parsing import extract_json
from memrl.memory.facade.memory import AsyncMemory
from memrl.memory.store.base import CORE_ID
from memrl.tools.membuilder import action_schema, apply_actions, parse_actions


async def test_core_actions(amem: AsyncMemory):
    r = await apply_actions(
        amem, "u", "core", '{"operation": "APPEND", "content": "Caroline: 30s, counselor-to-be."}'
    )
    assert r.parsed and len(r.applied) == 1
    r = await apply_actions(
        amem, "u", "core", {"operation": "REPLACE", "old_text": "counselor-to-be", "new_text": "counselor"}
    )
    assert await amem.core(namespace="u") == "Caroline: 30s, counselor."
    r = await apply_actions(
        amem, "u", "core", {"operation": "REPLACE", "old_text": "painter", "new_text": "x"}
    )
    assert r.parsed and r.failed and "does not occur" in r.failed[0]["error"]
    r = await apply_actions(
        amem, "u", "core", '```json\n{"operation": "REWRITE", "content": "Caroline."}\n```'
    )
    assert r.applied and await amem.core(namespace="u") == "Caroline."
    assert [h.actor for h in await amem.history(CORE_ID, namespace="u")] == ["membuilder"] * 3


async def test_add_update_merge_replace_old_items(amem: AsyncMemory):
    ns = "u"
    out = {
        "operations": [
            {"operation": "ADD", "memory": "2023-05-08: Caroline went to a support group | Details: LGBTQ"},
            {"operation": "ADD", "memory": "2023-05-09: Caroline called her mum | Details: about adoption"},
            {"operation": "ADD", "memory": "2023-05-10: Caroline called her mum again | Details: adoption"},
        ]
    }
    r = await apply_actions(amem, ns, "episodic", json.dumps(out), session="1", evidence=("D1:2",),
                            metadata={"date": "2023-05-08"})  # fmt: skip
    assert len(r.applied) == 3 and not r.failed
    items = await amem.list(namespace=ns)
    assert all(
        i.session == "1" and i.evidence == ("D1:2",) and i.metadata["date"] == "2023-05-08" for i in items
    )

    # UPDATE by (slightly misquoted) text: the old item is replaced in place, not duplicated.
    upd = {"operations": [{"operation": "UPDATE",
                           "old_memory": "2023-05-08: Caroline went to a support group | Details: LGBTQ.",
                           "new_memory": "2023-05-08: Caroline went to an LGBTQ support group | Details: felt accepted"}]}  # fmt: skip
    r = await apply_actions(amem, ns, "episodic", upd, evidence=("D2:1",))
    assert len(r.applied) == 1, r.failed
    assert await amem.count(namespace=ns) == 3
    updated = await amem.get(items[0].id, namespace=ns)
    assert updated.content.endswith("felt accepted") and updated.evidence == ("D1:2", "D2:1")
    assert (await amem.history(items[0].id, namespace=ns))[-1].old_content == items[0].content

    # MERGE by id and by text: one item remains, the others are deleted (recoverable).
    merge = {"operations": [{"operation": "MERGE", "old_memories": [items[1].id, items[2].content],
                             "new_memory": "2023-05-09/10: Caroline called her mum twice about adoption"}]}  # fmt: skip
    r = await apply_actions(amem, ns, "episodic", merge, evidence=("D3:1",))
    assert len(r.applied) == 1, r.failed
    merged = await amem.get(items[1].id, namespace=ns)
    assert merged.evidence == ("D1:2", "D3:1")  # the sources' evidence and this session's
    contents = sorted(i.content for i in await amem.list(namespace=ns))
    assert contents == sorted(
        [updated.content, "2023-05-09/10: Caroline called her mum twice about adoption"]
    )
    assert (await amem.get(items[2].id, namespace=ns, include_deleted=True)).deleted


async def test_a_memory_already_stored_is_not_added_again(amem: AsyncMemory):
    """The SFT student, asked for up to 10 operations, repeated one item six times in a session: repeats
    add nothing and crowd the reader's top 10, so an ADD of a live memory of the same type is refused."""
    fact = "Caroline - She went to a LGBTQ support group yesterday and found it powerful."
    out = {
        "operations": [{"operation": "ADD", "memory": fact}] * 3
        + [{"operation": "ADD", "memory": "Melanie paints."}]
    }
    r = await apply_actions(amem, "u", "semantic", json.dumps(out))
    assert len(r.applied) == 2 and len(r.failed) == 2
    first = r.applied[0]["item_id"]
    assert all(f"already stored, as [{first}]" in f["error"] for f in r.failed)
    assert sorted(i.content for i in await amem.list(namespace="u")) == [fact, "Melanie paints."]
    # the same text is a new memory of another type, in another namespace, or once the old one is deleted
    r = await apply_actions(
        amem, "u", "episodic", json.dumps({"operations": [{"operation": "ADD", "memory": fact}]})
    )
    assert r.applied and not r.failed
    r = await apply_actions(
        amem, "v", "semantic", json.dumps({"operations": [{"operation": "ADD", "memory": fact}]})
    )
    assert r.applied and not r.failed
    await amem.delete(first, namespace="u")
    r = await apply_actions(
        amem, "u", "semantic", json.dumps({"operations": [{"operation": "ADD", "memory": fact}]})
    )
    assert r.applied and not r.failed


async def test_unknown_old_memory_is_recorded_as_failed_and_others_apply(amem: AsyncMemory):
    out = {"operations": [
        {"operation": "UPDATE", "old_memory": "Something nobody ever said", "new_memory": "x"},
        {"operation": "ADD", "memory": "Melanie - Hobby: pottery"},
        {"operation": "SKIP", "reason": "nothing else"},
    ]}  # fmt: skip
    r = await apply_actions(amem, "u", "semantic", out)
    assert [a["operation"] for a in r.applied] == ["ADD", "SKIP"]
    assert r.failed[0]["operation"] == "UPDATE" and "no semantic memory matches" in r.failed[0]["error"]
    assert [i.content for i in await amem.list(namespace="u")] == ["Melanie - Hobby: pottery"]


@pytest.mark.parametrize(
    ("mtype", "output", "reason"),
    [
        ("procedural", '{"operations": [{"operation": "SKIP"}]}', "does not match any of the expected tags"),
        ("semantic", '{"operations": [{"operation": "MERGE", "old_memories": ["a", "b"], "new_memory": "c"}]}',
         "does not match"),
        ("episodic", "I think we should add that Caroline likes tea.", "no JSON object found"),
        ("episodic", '{"operations": [{"operation": "ADD"}]}', "Field required"),
        ("episodic", '{"operations": [{"operation": "ADD", "memory": "x", "extra": 1}]}', "Extra inputs"),
        ("core", '{"operation": "APPEND", "content": ""}', "at least 1 character"),
        ("core", '{"operations": []}', "operation"),
    ],
)  # fmt: skip
async def test_bad_answers_change_nothing(amem: AsyncMemory, mtype, output, reason):
    r = await apply_actions(amem, "u", mtype, output)
    assert not r.parsed and reason in r.parse_error, r.parse_error
    assert r.applied == [] and await amem.count(namespace="u") == 0 and await amem.core(namespace="u") == ""


def test_schemas_match_the_allowed_operations():
    def ops(schema):
        items = schema["properties"]["operations"]["items"]["anyOf"]
        return [i["properties"]["operation"]["const"] for i in items]

    assert ops(action_schema("episodic")) == ["ADD", "UPDATE", "MERGE"]
    assert ops(action_schema("semantic")) == ["ADD", "UPDATE", "SKIP"]
    assert ops(action_schema("procedural")) == ["ADD", "UPDATE"]
    core = [a["properties"]["operation"]["const"] for a in action_schema("core")["anyOf"]]
    assert core == ["APPEND", "REPLACE", "REWRITE", "SKIP"]  # SKIP offered only with core_skip


def test_extract_json_variants():
    assert extract_json('{"a": 1}') == {"a": 1}
    assert extract_json('Sure!\n```json\n{"a": 2}\n```') == {"a": 2}
    assert extract_json('Here: {"a": {"b": 3}} done') == {"a": {"b": 3}}
    with pytest.raises(ValueError):
        extract_json("no json")
    assert [a.operation for a in parse_actions("semantic", {"operations": []})] == []
