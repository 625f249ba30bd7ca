"""Write-time enrichment: the retrieval keys view through a real SQLite store (hashing embedder), the LLM
pass with a scripted LLM (good, malformed, empty and failed replies; resume after an interruption), and
``memrl eval retrieval --enrich``."""

from __future__ import annotations

import argparse
import asyncio
import json
from datetime import datetime

import pytest

from memrl.agents.enrich import EnrichConfig, enrich, parse_keys, prompt, units
from memrl.agents.raw import RawConfig, build
from memrl.cli.eval_cmd import config_from_args, register
from memrl.data.types import Conversation, Session, Turn
from memrl.errors import ConfigError, NotFoundError, ProviderError, ValidationError
from memrl.eval.retrieval.ablation import ablation_steps
from memrl.eval.retrieval.config import RetrievalConfig
from memrl.llm import ScriptedLLM
from memrl.llm.registry import PROVIDERS
from memrl.memory.embedders.providers import HashingEmbedder
from memrl.memory.facade.memory import AsyncMemory
from memrl.memory.store.base import NewItem

ITEMS = [
    ("a", "Alice said the move went well and the flat is bright"),
    ("b", "Bob adopted a greyhound puppy last spring"),
    ("c", "Carol practises the cello every evening"),
    ("d", "Dan repaired his bicycle chain on Sunday"),
]


async def _fill(m: AsyncMemory) -> None:
    await m.add_many([NewItem(content=text, id=i) for i, text in ITEMS])


async def _ids(m: AsyncMemory, query: str, **kw) -> list[str]:
    return [h.item.id for h in await m.search(query, top_k=4, **kw)]


async def test_an_item_is_found_by_a_word_only_in_its_keys(amem):
    await _fill(amem)
    assert await amem.set_keys({"a": "Lisbon, Portugal, relocation"}) == 1
    for mode in ("bm25", "hybrid"):
        assert (await _ids(amem, "Lisbon", mode=mode, keys=0.5))[0] == "a"
    assert "a" not in await _ids(amem, "Lisbon", mode="bm25")  # keys off (default): the word is nowhere
    assert await amem.get_keys() == {"a": "Lisbon, Portugal, relocation"}


async def test_weight_zero_is_the_search_without_keys(amem):
    await _fill(amem)
    queries = ["Lisbon greyhound", "cello evening", "bicycle Sunday Portugal", "bright flat"]
    before = {q: [(h.item.id, h.score) for h in await amem.search(q, top_k=4)] for q in queries}
    await amem.set_keys({"a": "Lisbon, Portugal", "d": "cycling, bike, repair, greyhound"})
    for q in queries:
        assert [(h.item.id, h.score) for h in await amem.search(q, top_k=4, keys=0.0)] == before[q]
    # and a positive weight does change a ranking the keys bear on
    assert [h.item.id for h in await amem.search("greyhound", top_k=4, keys=2.0)][0] == "d"


async def test_keys_survive_reopen_and_follow_the_item(db_path):
    m = AsyncMemory(db_path, embedder=HashingEmbedder(64), namespace="n")
    await _fill(m)
    await m.set_keys({"b": "dog, pet, adoption"})
    await m.close()
    m = AsyncMemory(db_path, embedder=HashingEmbedder(64), namespace="n")
    try:
        assert await m.get_keys(["b", "c"]) == {"b": "dog, pet, adoption"}
        assert (await _ids(m, "pet", mode="bm25", keys=0.5))[0] == "b"
        await m.clone("n", "copy")
        assert await m.get_keys(namespace="copy") == {"b": "dog, pet, adoption"}
        lines = await m.export_lines()
        assert {"kind": "keys", "id": "b", "keys": "dog, pet, adoption"} in lines
        await m.import_lines(lines, namespace="imported")
        assert await m.get_keys(namespace="imported") == {"b": "dog, pet, adoption"}
        with pytest.raises(ValidationError, match="keys"):
            await m.import_lines([*lines, {"kind": "keys", "id": "nope", "keys": "x"}], namespace="bad")
        await m.update("b", metadata={"k": 1})  # metadata only: the keys still describe the text
        assert await m.get_keys() == {"b": "dog, pet, adoption"}
        await m.update("b", content="Bob sold his car")  # a new text: its old keys are dropped
        assert await m.get_keys() == {}
        assert "b" not in await _ids(m, "pet", mode="bm25", keys=0.5)
        await m.set_keys({"c": "music"})
        await m.set_keys({"c": ""})  # empty text removes
        assert await m.get_keys() == {}
        with pytest.raises(NotFoundError, match="'zzz'"):
            await m.set_keys({"zzz": "x"})
    finally:
        await m.close()


def _conv() -> Conversation:
    turns = (
        Turn("D1:1", "Ann", "Hi Bob!", 1, 1),
        Turn("D1:2", "Bob", "I adopted a greyhound yesterday.", 1, 2),
        Turn("D1:3", "Ann", "Lovely, I started the cello.", 1, 3),
        Turn("D1:4", "Bob", "Nice, see you soon.", 1, 4),
    )
    turns2 = (Turn("D2:1", "Ann", "We moved house.", 2, 1), Turn("D2:2", "Bob", "Congrats!", 2, 2))
    sessions = (
        Session(1, datetime(2023, 5, 8), "8 May, 2023", turns),
        Session(2, datetime(2023, 6, 1), "1 June, 2023", turns2),
    )
    return Conversation("c1", ("Ann", "Bob"), sessions, (), source="sample")


def _reply(messages, tools, schema) -> str:
    """A rule-based fake model: keywords for most turns, one malformed and one empty reply."""
    msg = messages[-1]["content"].rsplit("Message: ", 1)[-1]
    if "greyhound" in msg:
        return "Bob, greyhound, dog, pet, adoption, dog, 7 May 2023"
    if "cello" in msg:
        return "This message is a long sentence that copies the turn instead of giving any keywords at all."
    if "Nice, see you" in msg:
        return "   "
    return "keyword, " + msg.split(":")[0]


class KeysLLM(ScriptedLLM):
    """The rule-based fake as a provider (``create_llm("test-keys")``), for the CLI test."""

    def __init__(self, model: str = "keys", **kw) -> None:
        super().__init__(_reply, model=model, **kw)


async def test_enrichment_pass_counts_and_stores(amem):
    await build(amem, "c1", _conv(), config=RawConfig())
    llm = ScriptedLLM(_reply)
    stats = await enrich(amem, "c1", llm, config=EnrichConfig(concurrency=2))
    # one call per turn (the turn view is asked; its context view shares the unit)
    assert (stats.items, stats.calls, stats.enriched, stats.malformed, stats.empty) == (6, 6, 4, 1, 1)
    keys = await amem.get_keys(namespace="c1")
    assert keys["D1:2"] == "Bob, greyhound, dog, pet, adoption, 7 May 2023"  # duplicates dropped
    assert set(keys) == {"D1:1", "D1:2", "D2:1", "D2:2"}
    # the prompt: the session date, the previous turn of the same session, the turn
    asked = llm.requests[1].messages[-1]["content"]
    assert asked == "Date: 8 May 2023\nPrevious: Ann: Hi Bob!\nMessage: Bob: I adopted a greyhound yesterday."
    assert "Previous: (none)" in llm.requests[4].messages[-1]["content"]  # first turn of session 2
    hits = await amem.search("pet", namespace="c1", mode="bm25", keys=0.5, collapse="unit")
    assert hits[0].item.metadata["unit"] == "D1:2"
    # a second pass asks only what has no keys yet (the malformed and empty ones), and changes nothing
    again = await enrich(amem, "c1", ScriptedLLM(_reply), config=EnrichConfig(concurrency=2))
    assert (again.done_before, again.calls, again.enriched) == (4, 2, 0)


async def test_new_only_keeps_keywords_the_text_lacks(amem):
    await build(amem, "c1", _conv(), config=RawConfig())

    def reply(messages, tools, schema):
        msg = messages[-1]["content"].rsplit("Message: ", 1)[-1]
        return "Ann, Bob, hi" if "Hi Bob" in msg else _reply(messages, tools, schema)

    stats = await enrich(amem, "c1", ScriptedLLM(reply), config=EnrichConfig(new_only=True))
    keys = await amem.get_keys(namespace="c1")
    assert keys["D1:2"] == "dog, pet, adoption, 7 May 2023"  # "Bob" and "greyhound" are in the turn
    assert keys["D2:2"] == "keyword"  # "Bob" is the speaker of the turn itself
    assert "D1:1" not in keys and (stats.nothing_new, stats.enriched) == (1, 3)


class StallingLLM(ScriptedLLM):
    """Answers the first ``n`` calls, then never replies (a pass killed mid-way)."""

    def __init__(self, n: int) -> None:
        super().__init__(_reply)
        self.n = n

    async def chat(self, *args, **kw):
        if len(self.requests) >= self.n:
            await asyncio.sleep(3600)
        return await super().chat(*args, **kw)


async def test_an_interrupted_pass_resumes_without_losing_written_keys(amem):
    await build(amem, "c1", _conv(), config=RawConfig())
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(enrich(amem, "c1", StallingLLM(3), config=EnrichConfig(concurrency=2)), 2.0)
    assert set(await amem.get_keys(namespace="c1")) == {"D1:1", "D1:2"}  # the first block was written
    llm = ScriptedLLM(_reply)
    stats = await enrich(amem, "c1", llm, config=EnrichConfig(concurrency=2))
    assert (stats.done_before, stats.calls) == (2, 4)
    assert "D1:1" not in {r.messages[-1]["content"].split("Message: ")[-1] for r in llm.requests}
    assert set(await amem.get_keys(namespace="c1")) == {"D1:1", "D1:2", "D2:1", "D2:2"}


async def test_failed_calls_are_counted_and_a_dead_server_stops_the_pass(amem):
    await build(amem, "c1", _conv(), config=RawConfig())
    llm = ScriptedLLM(["Ann, greeting", "Bob, dog", "Ann, cello"])  # then the script runs out: errors
    with pytest.raises(ProviderError, match="every call of a block failed"):
        await enrich(amem, "c1", llm, config=EnrichConfig(concurrency=2))
    assert set(await amem.get_keys(namespace="c1")) == {"D1:1", "D1:2", "D1:3"}
    stats = await enrich(amem, "c1", ScriptedLLM(["x, y"] * 3), config=EnrichConfig(concurrency=2))
    assert (stats.done_before, stats.calls, stats.enriched, stats.failed) == (3, 3, 3, 0)


def test_parse_keys():
    assert parse_keys("Keywords: Anna, Mount Tam,  hiking , hiking\n* dogs") == [
        "Anna",
        "Mount Tam",
        "hiking",
        "dogs",
    ]
    assert parse_keys("1. pottery 2. clay class") == ["pottery", "clay class"]
    assert parse_keys("(none)") == [] and parse_keys("") == []
    assert parse_keys("keyword, topics") == ["keyword", "topics"]  # a prefix needs its colon
    assert parse_keys("one two three four five six seven") == []  # a sentence, not a keyword
    assert len(parse_keys(", ".join(f"k{i}" for i in range(30)))) == EnrichConfig().max_keys


def test_units_pick_one_item_per_unit_and_the_previous_of_its_session():
    from memrl.memory.records.types import MemoryItem, MemoryType

    def item(i, unit, session):
        return MemoryItem(i, "n", MemoryType.EPISODIC, i, metadata={"unit": unit}, session=session)

    items = [
        item("t1+ctx", "t1", "1"),
        item("t1", "t1", "1"),
        item("t2+ctx", "t2", "1"),
        item("t3", "t3", "2"),
    ]
    got = [(it.id, prev.id if prev else None) for it, prev in units(items)]
    assert got == [("t1", None), ("t2+ctx", "t1"), ("t3", None)]
    msgs = prompt(items[1], None, EnrichConfig(context=False))
    assert msgs[-1]["content"] == "Message: t1" and msgs[0]["role"] == "system"


def _cli(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="memrl")
    register(parser.add_subparsers(dest="command"))
    return parser.parse_args(argv)


def test_cli_enrich_flag(capsys, monkeypatch, tmp_path):
    monkeypatch.setitem(PROVIDERS, "test-keys", "tests.test_enrich:KeysLLM")
    base = ["eval", "retrieval", "--dataset", "sample", "--embedder", "hashing", "--bootstrap", "20"]
    args = _cli(
        [*base, "--enrich", "test-keys", "--enrich-weight", "0.5", "--enrich-cache", str(tmp_path / "c.db")]
    )
    cfg = config_from_args(args)
    assert (cfg.enrich, cfg.enrich_weight, cfg.search_options()["keys"]) == ("test-keys", 0.5, 0.5)
    assert RetrievalConfig().search_options()["keys"] == 0.0  # off by default: search reads no keys
    assert args.func(args) == 0
    out = capsys.readouterr().out
    last = json.loads(out.strip().splitlines()[-1])
    e = last["enrich"]
    assert e["llm"] == "test-keys" and e["calls"] == e["items"] > 0 and e["enriched"] > 0
    assert e["enriched"] + e["empty"] + e["malformed"] + e["failed"] == e["calls"]
    assert "Write-time enrichment" in out
    # a second run is warm: every reply comes from the cache file
    assert args.func(args) == 0
    again = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["enrich"]
    assert again["cache_hits"] == e["calls"] and again["cache_misses"] == 0
    plain = _cli(base)
    assert plain.func(plain) == 0
    assert "enrich" not in json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def test_bad_enrich_settings_are_one_clear_error():
    with pytest.raises(ConfigError, match="enrich_weight"):
        RetrievalConfig(enrich="local", enrich_weight=-1)
    assert RetrievalConfig(enrich="none").enrich is None
    from memrl.agents.enrich import llm_from_spec

    with pytest.raises(ConfigError, match="unknown LLM provider"):
        llm_from_spec("nosuch:model")


def test_ablation_adds_one_enrichment_row():
    plain = ablation_steps(RetrievalConfig())
    steps = ablation_steps(RetrievalConfig(enrich="local"))
    assert len(steps) == len(plain) + 1 and "write-time enrichment" in steps[-1][0]
    assert steps[-1][1].enrich == "local" and all(cfg.enrich is None for _, cfg in steps[:-1])


def test_memory_enrich_and_search_keys_cli(capsys, monkeypatch, new_db):
    from memrl.cli.main import main

    monkeypatch.setitem(PROVIDERS, "test-keys", "tests.test_enrich:KeysLLM")
    common = ["--db", str(new_db()), "--namespace", "c1", "--embedder", "hashing"]
    main(["memory", "add", "Bob: I adopted a greyhound yesterday.", *common])
    main(["memory", "add", "Ann: Lovely, I started the cello.", *common])
    capsys.readouterr()
    assert main(["memory", "enrich", "--provider", "test-keys", *common, "--json"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert (stats["calls"], stats["enriched"], stats["malformed"]) == (2, 1, 1)
    main(["memory", "search", "pet", "--mode", "bm25", "--keys", "0.5", *common, "--json"])
    assert [h["content"] for h in json.loads(capsys.readouterr().out)] == [
        "Bob: I adopted a greyhound yesterday."
    ]
    main(["memory", "search", "pet", "--mode", "bm25", *common, "--json"])
    assert json.loads(capsys.readouterr().out) == []
