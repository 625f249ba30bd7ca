"""Search's per-namespace caches of units (the rescorer's layout, the terms behind the session stage and
spreading) follow every write (of this process or another) and are kept per the keys the units were read
with: a search that
collapses by another key must not reuse the units of the search before it (it did: the session stage then
added nothing). On a real SQLite store with a deterministic embedder (item ids are content hashes, the same
in two stores), a search gives the same hits and scores whichever search ran before it."""

from __future__ import annotations

from memrl.memory.embedders.providers import HashingEmbedder
from memrl.memory.facade.memory import AsyncMemory
from memrl.memory.store.base import NewItem

TURNS = [
    ("Ann: we hiked the ridge at dawn", "t1"),
    ("Bob: the view from the ridge was worth the climb", "t2"),
    ("Ann: next time we bring a stove for coffee", "t3"),
    ("Bob: my boots gave me blisters on the way down", "t4"),
    ("Ann: try wool socks, they help with blisters", "t5"),
]


async def _store(path) -> AsyncMemory:
    m = AsyncMemory(path, embedder=HashingEmbedder(64))
    items = []
    for text, unit in TURNS:  # two views per turn: the turn, and the turn with its neighbour
        items.append(NewItem(text, "episodic", {"unit": unit, "session": 1}, session="1"))
        items.append(NewItem(text + " (context)", "episodic", {"unit": unit, "session": 1}, session="1"))
    await m.add_many(items)
    return m


async def _ids(m: AsyncMemory, collapse):
    hits = await m.search("blisters from boots on the ridge", mode="hybrid", top_k=6, collapse=collapse,
                          window=0.5, date_fit=0.0)  # fmt: skip
    return [(h.item.id, round(h.score, 6)) for h in hits]


async def test_a_search_does_not_reuse_the_units_of_another_collapse_key(tmp_path):
    for n, (first, then) in enumerate(((None, "unit"), ("unit", None))):
        fresh = await _store(tmp_path / f"fresh{n}.db")
        expected = await _ids(fresh, then)  # on a store that has served no other search
        await fresh.close()
        m = await _store(tmp_path / f"m{n}.db")
        await _ids(m, first)  # caches units read with the other key
        got = await _ids(m, then)
        await m.close()
        assert len(expected) == (5 if then == "unit" else 6) and got == expected, (first, then)


def _turn(tid: str, session: int, text: str) -> NewItem:
    return NewItem(f"Ann: {text}", "episodic", {"unit": tid, "speaker": "Ann", "date": f"2023-05-0{session}",
                   "text": f"Ann: {text}"}, evidence=(tid,), session=str(session), id=tid)  # fmt: skip


async def test_a_long_lived_process_ranks_as_a_fresh_one_after_every_write(tmp_path):
    """The rescorer's units (window neighbours, date spans) follow every write, this process's or another's:
    after adds by another process, an add, an update that moves a turn to another session and a delete,
    a search in a process that has searched all along gives the hits and scores of a process opened
    afterwards (before, the units were read once per namespace generation: the window view missed new
    turns and scored moved ones by their old neighbours)."""
    db = tmp_path / "m.db"
    q = "When did Ann see the lighthouse by the lake?"

    async def hits(m: AsyncMemory) -> list[tuple[str, float]]:
        return [(h.item.id, round(h.score, 6)) for h in await m.search(q, namespace="n", top_k=6)]

    async def fresh() -> list[tuple[str, float]]:
        m = AsyncMemory(db, embedder=HashingEmbedder(64))
        try:
            return await hits(m)
        finally:
            await m.close()

    live = AsyncMemory(db, embedder=HashingEmbedder(64))
    await live.add_many(
        [
            _turn(f"D{s}:{k}", s, f"day {s} remark {k} about the lake and boats")
            for s in (1, 2)
            for k in range(1, 6)
        ],
        namespace="n",
    )
    await hits(live)  # the units are read now
    other = AsyncMemory(db, embedder=HashingEmbedder(64))
    await other.add_many([_turn("D2:6", 2, "yesterday we saw the lighthouse"),
                          _turn("D2:7", 2, "it was by the lake, lovely")], namespace="n")  # fmt: skip
    await other.close()
    steps = [await hits(live) == await fresh()]
    await live.add_many([_turn("D3:1", 3, "the lighthouse keeper waved at us")], namespace="n")
    steps.append(await hits(live) == await fresh())
    meta = {"unit": "D2:7", "speaker": "Ann", "date": "2023-05-03", "text": "Ann: it was by the lake, lovely"}
    live.store.update("n", "D2:7", session="3", metadata=meta)  # the turn moves to session 3
    steps.append(await hits(live) == await fresh())
    await live.delete("D2:6", namespace="n")
    steps.append(await hits(live) == await fresh())
    assert "D2:7" in [i for i, _ in await hits(live)]
    await live.close()
    assert steps == [True, True, True, True]
