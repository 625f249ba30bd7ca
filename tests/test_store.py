"""The store on a real SQLite file: items, namespaces, history, undo, core memory, clone, limits."""

from __future__ import annotations

import pytest

from memrl.errors import ConflictError, NotFoundError, StoreError, ValidationError
from memrl.memory.embedders.providers import HashingEmbedder
from memrl.memory.facade.blocking import Memory
from memrl.memory.facade.memory import AsyncMemory
from memrl.memory.records.types import MemoryType
from memrl.memory.store.base import CORE_ID, NewItem


async def test_add_get_list_count(amem: AsyncMemory):
    a = await amem.add(
        "Alice moved to Lisbon", type="episodic", metadata={"date": "2023-05-08"}, evidence=["D1:3"]
    )
    b = await amem.add("Alice likes green tea")
    assert a.id != b.id and len(a.id) == 12
    got = await amem.get(a.id)
    assert got.content == "Alice moved to Lisbon"
    assert got.type is MemoryType.EPISODIC
    assert got.metadata == {"date": "2023-05-08"} and got.evidence == ("D1:3",)
    assert [i.id for i in await amem.list()] == [a.id, b.id]
    assert [i.id for i in await amem.list(types=["semantic"])] == [b.id]
    assert await amem.count() == 2 and await amem.count(types=["episodic"]) == 1


async def test_namespaces_isolate(amem: AsyncMemory):
    a = await amem.add("secret of alice")
    await amem.add("secret of bob", namespace="bob")
    assert [i.content for i in await amem.list(namespace="bob")] == ["secret of bob"]
    with pytest.raises(NotFoundError):
        await amem.get(a.id, namespace="bob")
    for mode in ("hybrid", "dense", "bm25"):
        assert [h.item.content for h in await amem.search("secret", namespace="bob", mode=mode)] == [
            "secret of bob"
        ]
        assert [h.item.content for h in await amem.search("secret", mode=mode)] == ["secret of alice"]
    assert {n["name"]: n["items"] for n in await amem.namespaces()} == {"alice": 1, "bob": 1}
    # no write reaches across: another namespace's id is unknown to every call, and nothing changes
    before = [(i.content, i.deleted) for i in await amem.list(include_deleted=True)], await amem.history()
    for call in (
        amem.update(a.id, "stolen", namespace="bob"), amem.delete(a.id, namespace="bob"),
        amem.restore(a.id, namespace="bob"), amem.history(a.id, namespace="bob"),
        amem.undo(a.id, namespace="bob"), amem.merge([a.id, a.id + "x"], "m", namespace="bob"),
    ):  # fmt: skip
        with pytest.raises(NotFoundError):
            await call
    assert (
        [(i.content, i.deleted) for i in await amem.list(include_deleted=True)],
        await amem.history(),
    ) == before


async def test_user_id_is_namespace_alias(amem: AsyncMemory):
    await amem.add("x", user_id="carol")
    assert await amem.count(namespace="carol") == 1
    with pytest.raises(ValidationError):
        await amem.count(namespace="carol", user_id="dave")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"content": ""}, "empty"),
        ({"content": 42}, "must be a string"),
        ({"content": "x" * 10_001}, "more than the limit"),
        ({"content": "ok", "type": "core"}, "core memory is one text block"),
        ({"content": "ok", "type": "opinion"}, "unknown memory type"),
        ({"content": "ok", "metadata": ["not", "a", "dict"]}, "metadata must be a JSON object"),
        ({"content": "ok", "metadata": {"when": object()}}, "not JSON-serialisable"),
    ],
)
async def test_bad_input_rejected_and_nothing_written(amem: AsyncMemory, kwargs, message):
    with pytest.raises(ValidationError, match=message):
        await amem.add(**kwargs)
    assert await amem.count() == 0
    assert await amem.history() == []


async def test_batch_insert_is_atomic(amem: AsyncMemory):
    await amem.add("first", id="fixed-id")
    with pytest.raises(ValidationError, match="already exists"):
        await amem.add_many([NewItem("second"), NewItem("dup", id="fixed-id")])
    assert [i.content for i in await amem.list()] == ["first"]


async def test_a_large_batch_keeps_its_order_history_and_vectors(amem: AsyncMemory):
    """2,500 items in one add_many (past the back-ends' statement chunks of 200, 1,000 and 2,000 rows, and
    with a repeated text whose vector is cached once): listed in item order, one ADD entry each in that
    order, and each findable by dense search."""
    texts = [f"note {i} about topic {i % 37} and thing {i * 7919 % 10007}" for i in range(2500)]
    texts[2400] = texts[5]  # the same content twice: one cached vector, two items
    # sessions on the first 1,000 only: a statement chunk whose sessions are all None (NULLs) too
    items = await amem.add_many(
        [NewItem(t, id=f"n{i}", session=f"s{i // 100}" if i < 1000 else None) for i, t in enumerate(texts)]
    )
    assert [(await amem.get(f"n{k}")).session for k in (0, 999, 1000, 2499)] == ["s0", "s9", None, None]
    assert [i.id for i in items] == [f"n{i}" for i in range(2500)]
    assert [i.id for i in await amem.list()] == [f"n{i}" for i in range(2500)]
    adds = [h for h in await amem.history() if h.op == "ADD"]
    assert [h.memory_id for h in adds] == [f"n{i}" for i in range(2500)]
    for i in (0, 999, 1000, 1999, 2000, 2499):
        hits = await amem.search(texts[i], top_k=3, mode="dense")
        assert f"n{i}" in [h.item.id for h in hits]
    hits = await amem.search(texts[5], top_k=2, mode="dense")
    assert {h.item.id for h in hits} == {"n5", "n2400"}


async def test_unknown_ids(amem: AsyncMemory):
    for call in (amem.get("nope"), amem.update("nope", "x"), amem.delete("nope"), amem.history("nope")):
        with pytest.raises(NotFoundError, match="nope"):
            await call
    with pytest.raises(ValidationError, match="memory id must be a string"):
        await amem.get(123)


async def test_update_keeps_history_and_undo_restores(amem: AsyncMemory):
    a = await amem.add("Alice lives in Lisbon")
    await amem.update(a.id, "Alice lives in Porto")
    await amem.update(a.id, "Alice lives in Faro", metadata={"source": "s3"})
    hist = await amem.history(a.id)
    assert [(h.op, h.old_content, h.new_content) for h in hist] == [
        ("ADD", None, "Alice lives in Lisbon"),
        ("UPDATE", "Alice lives in Lisbon", "Alice lives in Porto"),
        ("UPDATE", "Alice lives in Porto", "Alice lives in Faro"),
    ]
    undone = await amem.undo(a.id)
    assert [u.new_content for u in undone] == ["Alice lives in Faro"]
    item = await amem.get(a.id)
    assert item.content == "Alice lives in Porto" and item.metadata == {}
    await amem.undo(a.id)  # walks further back
    assert (await amem.get(a.id)).content == "Alice lives in Lisbon"
    await amem.undo(a.id)  # undoing the creation deletes (softly)
    with pytest.raises(NotFoundError, match="was deleted"):
        await amem.get(a.id)
    with pytest.raises(NotFoundError, match="nothing to undo"):
        await amem.undo(a.id)
    ops = [h.op for h in await amem.history(a.id)]
    assert ops.count("UNDO") == 3


async def test_delete_is_recoverable(amem: AsyncMemory):
    a = await amem.add("Alice has a cat named Tom")
    await amem.delete(a.id, reason="duplicate")
    assert await amem.count() == 0
    assert await amem.search("cat Tom") == []
    deleted = await amem.get(a.id, include_deleted=True)
    assert deleted.deleted and deleted.metadata["delete_reason"] == "duplicate"
    await amem.restore(a.id)
    assert [h.item.id for h in await amem.search("cat Tom")] == [a.id]
    await amem.delete(a.id)
    await amem.undo()  # namespace-level undo takes the latest change
    assert (await amem.get(a.id)).content == "Alice has a cat named Tom"


async def test_merge_and_split_undo_as_one_batch(amem: AsyncMemory):
    a = await amem.add("Alice likes tea", evidence=["D1:1"])
    b = await amem.add("Alice likes hiking", evidence=["D2:4"])
    merged = await amem.merge([a.id, b.id], "Alice likes tea and hiking")
    assert merged.id == a.id and merged.evidence == ("D1:1", "D2:4")
    assert merged.metadata["merged_from"] == [a.id, b.id]
    assert [i.content for i in await amem.list()] == ["Alice likes tea and hiking"]
    undone = await amem.undo(b.id)  # any member of the batch undoes all of it
    assert {u.memory_id for u in undone} == {a.id, b.id}
    assert sorted(i.content for i in await amem.list()) == ["Alice likes hiking", "Alice likes tea"]

    parts = await amem.split(a.id, ["Alice likes tea.", "She drinks it daily."])
    assert parts[0].id == a.id and parts[1].metadata["split_from"] == a.id
    assert await amem.count() == 3
    await amem.undo(a.id)
    assert sorted(i.content for i in await amem.list()) == ["Alice likes hiking", "Alice likes tea"]


async def test_undo_refuses_when_a_batch_member_changed_later(amem: AsyncMemory):
    a = await amem.add("one fact")
    b = await amem.add("another fact")
    await amem.merge([a.id, b.id], "both facts")
    await amem.update(a.id, "both facts, edited")
    with pytest.raises(ConflictError, match="changed again later"):
        await amem.undo(b.id)
    assert (await amem.get(a.id)).content == "both facts, edited"  # nothing half-undone


async def test_merge_needs_two_live_ids(amem: AsyncMemory):
    a = await amem.add("x")
    with pytest.raises(ValidationError):
        await amem.merge([a.id, a.id])
    with pytest.raises(NotFoundError):
        await amem.merge([a.id, "ghost"])
    assert (await amem.get(a.id)).content == "x"


async def test_core_memory_limit_history_and_undo(db_path):
    m = AsyncMemory(db_path, embedder=HashingEmbedder(32), namespace="u", core_limit=50)
    await m.core_append("Name: Alice.")
    await m.core_append("Lives in Lisbon.")
    assert await m.core() == "Name: Alice.\nLives in Lisbon."
    await m.core_replace("Lisbon", "Porto")
    assert await m.core() == "Name: Alice.\nLives in Porto."
    with pytest.raises(ValidationError, match="old_text does not occur"):
        await m.core_replace("Madrid", "Rome")
    with pytest.raises(ValidationError, match="more than its limit of 50"):
        await m.core_append("x" * 40)
    assert await m.core() == "Name: Alice.\nLives in Porto."
    assert [h.op for h in await m.history(CORE_ID)] == ["CORE_APPEND", "CORE_APPEND", "CORE_REPLACE"]
    await m.undo(CORE_ID)
    assert await m.core() == "Name: Alice.\nLives in Lisbon."
    await m.core_rewrite("Alice (Lisbon).")
    assert await m.core() == "Alice (Lisbon)." and await m.core(namespace="other") == ""
    await m.close()


async def test_clone_is_independent(amem: AsyncMemory):
    a = await amem.add("Alice lives in Lisbon")
    await amem.core_append("Alice, 34")
    n = await amem.clone("alice", "episode-1")
    assert n == 1
    assert (await amem.get(a.id, namespace="episode-1")).content == "Alice lives in Lisbon"
    assert await amem.core(namespace="episode-1") == "Alice, 34"
    assert await amem.history(namespace="episode-1") == []
    await amem.update(a.id, "Alice lives in Porto", namespace="episode-1")
    assert (await amem.get(a.id)).content == "Alice lives in Lisbon"
    hits = await amem.search("Porto", namespace="episode-1", mode="dense")
    assert hits[0].item.content == "Alice lives in Porto"
    with pytest.raises(ValidationError, match="already exists"):
        await amem.clone("alice", "episode-1")
    assert await amem.clone("alice", "episode-1", overwrite=True) == 1
    assert (await amem.get(a.id, namespace="episode-1")).content == "Alice lives in Lisbon"
    with pytest.raises(NotFoundError):
        await amem.clone("nobody", "x")


async def test_reset_drops_namespace(amem: AsyncMemory):
    await amem.add("a")
    await amem.add("b", namespace="keep")
    assert await amem.reset() == 1
    assert await amem.count() == 0 and await amem.history() == []
    assert await amem.search("a", mode="dense") == []
    assert await amem.count(namespace="keep") == 1


def test_sync_facade_persists_across_reopen(db_path):
    with Memory(db_path, embedder="hashing", namespace="n") as m:
        item = m.add("persisted fact about Lisbon")
        m.update(item.id, "persisted fact about Porto")
    with Memory(db_path, embedder="hashing", namespace="n") as m:
        assert m.get(item.id).content == "persisted fact about Porto"
        assert [h.op for h in m.history(item.id)] == ["ADD", "UPDATE"]
        assert m.search("Porto")[0].item.id == item.id
    with pytest.raises(RuntimeError, match="closed"):
        m.get(item.id)


async def test_sync_facade_works_inside_a_running_loop(db_path):
    # Jupyter-style: a running event loop in the caller's thread must not break the sync API.
    with Memory(db_path, embedder="hashing") as m:
        m.add("inside a loop")
        assert m.count() == 1


async def test_rollback_reverts_everything_after_a_point(amem: AsyncMemory):
    keep = await amem.add("kept fact")
    await amem.core_append("core v1")
    mark = amem.store.last_seq("alice")
    a = await amem.add("partial session fact")
    await amem.update(keep.id, "kept fact, edited")
    b = await amem.add("another partial fact")
    await amem.merge([a.id, b.id], "merged partial")
    await amem.core_append("core v2")
    assert amem.store.rollback("alice", mark) == 6
    assert [i.content for i in await amem.list()] == ["kept fact"]
    assert await amem.core() == "core v1"
    assert amem.store.rollback("alice", amem.store.last_seq("alice")) == 0
    hits = await amem.search("partial", mode="bm25")
    assert hits == []


async def test_rollback_across_undos_restores_the_state_at_the_point(amem: AsyncMemory):
    """Undos after the point (of changes made before or after it) do not fool a rollback: each item gets
    back the content it had right after the point."""
    item = await amem.add("v1")
    await amem.update(item.id, "v2")
    await amem.core_append("core A")
    mark = amem.store.last_seq("alice")  # state here: item v2, core "core A"
    await amem.undo(item.id)  # back to v1 (undoes a change made BEFORE the point)
    await amem.update(item.id, "v3")
    await amem.undo(item.id)  # v3 undone: v1
    await amem.core_append("core B")
    await amem.undo(namespace="alice")  # undo the core change
    await amem.core_append("core C")
    extra = await amem.add("added later")
    await amem.delete(extra.id)
    amem.store.rollback("alice", mark)
    assert (await amem.get(item.id)).content == "v2"
    assert await amem.core() == "core A"
    assert [i.content for i in await amem.list()] == ["v2"]
    assert [i.content for i in await amem.list(include_deleted=True)] == ["v2", "added later"]
    # the changes after the point are undone for good: undo now reverts the update made before the point
    await amem.undo(item.id)
    assert (await amem.get(item.id)).content == "v1"


async def test_the_id_of_a_deleted_memory_can_be_added_again(amem: AsyncMemory):
    await amem.add("first version", id="D1:3")
    with pytest.raises(ValidationError, match="already exists"):
        await amem.add("clash", id="D1:3")
    await amem.delete("D1:3")
    again = await amem.add("second version", id="D1:3")
    assert again.content == "second version" and (await amem.get("D1:3")).content == "second version"
    assert [(h.op, h.new_content) for h in await amem.history("D1:3")][-1] == ("ADD", "second version")
    await amem.undo("D1:3")  # back to the deleted first version
    assert (await amem.get("D1:3", include_deleted=True)).deleted


async def test_merge_refuses_when_a_source_changes_while_it_embeds(amem: AsyncMemory):
    a = await amem.add("Alice likes tea")
    b = await amem.add("Alice likes hiking")
    real = amem.index.embed

    async def embed_while_another_writer_edits(texts, ns):
        amem.store.update("alice", b.id, content="Alice likes climbing", actor="other")
        return await real(texts, ns)

    amem.index.embed = embed_while_another_writer_edits
    with pytest.raises(StoreError, match="changed by another writer"):
        await amem.merge([a.id, b.id], "Alice likes tea and hiking")
    amem.index.embed = real
    assert sorted(i.content for i in await amem.list()) == ["Alice likes climbing", "Alice likes tea"]


async def test_dropped_namespaces_are_not_listed(amem: AsyncMemory):
    await amem.add("x", namespace="episode-1")
    await amem.add("y")
    assert [n["name"] for n in await amem.namespaces()] == ["alice", "episode-1"]
    await amem.reset(namespace="episode-1")
    assert [n["name"] for n in await amem.namespaces()] == ["alice"]


async def test_generated_ids_repeat_run_to_run_and_never_collide(new_db):
    """Ids are shown to models: the same writes must give the same ids in every run (reproducible
    prompts), while the same content twice, or again after a delete, still gets a fresh id."""

    async def writes(path):
        m = AsyncMemory(path, embedder=HashingEmbedder(32))
        a = await m.add("Ann adopted a greyhound", namespace="conv-1")
        twins = await m.add_many(["Bob likes tea", "Bob likes tea"], namespace="conv-1")
        await m.delete(a.id, namespace="conv-1")
        again = await m.add("Ann adopted a greyhound", namespace="conv-1")
        other = await m.add("Ann adopted a greyhound", namespace="conv-2")
        (given,) = await m.add_many([NewItem("explicit", id="D1:3")], namespace="conv-1")
        ids = [a.id, *(t.id for t in twins), again.id, other.id, given.id]
        await m.close()
        return ids

    first, second = await writes(new_db()), await writes(new_db())
    assert first == second  # another store, same writes: same ids
    a, t1, t2, again, other, given = first
    assert len({a, t1, t2, again}) == 4 and given == "D1:3"
    assert all(len(i) == 12 and int(i, 16) >= 0 for i in (a, t1, t2, again, other))
    assert other != a  # the namespace is part of what the id is derived from
