"""Search's per-namespace caches of units (the rescorer's layout, the terms behind the session stage and
spreading) are kept per namespace generation *and* the keys the units were read with: a search that
collapses by another key must not reuse the units of the search before it (it did: the session stage then
added nothing). On a real SQLite store with a deterministic embedder (item ids are content hashes, the same
in two stores), a search gives the same hits and scores whichever search ran before it."""

from __future__ import annotations

from memrl.memory.embedders import HashingEmbedder
from memrl.memory.facade import AsyncMemory
from memrl.memory.store import NewItem

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
