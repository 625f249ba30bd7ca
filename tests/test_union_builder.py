"""The ``union`` builder: raw turns and a builder's notes in one namespace, labelled by origin, searched
and answered together. The notes' model and the answerer are scripted; building, store and search are real."""

from __future__ import annotations

import json

import pytest

from memrl.agents.base import create_builder
from memrl.agents.raw import RawConfig, session_items
from memrl.data import load_dataset
from memrl.errors import ConfigError
from memrl.eval.qa import QAEvaluation
from memrl.eval.qa.config import QAEvalConfig
from memrl.llm import ScriptedLLM
from memrl.memory import AsyncMemory

SAMPLE = load_dataset("sample")[0][0]
NOTE = "Lena - the name of Lena's dog is Biscuit, adopted in Leeds (note of session {n})"


def _notes_model() -> ScriptedLLM:
    """One semantic note and one dated episode a session; core and procedural write nothing new."""

    def reply(messages, tools, schema):
        system, last = messages[0]["content"], messages[-1]["content"]
        n = last.split("\nSession ", 1)[1].split(" ", 1)[0] if "\nSession " in last else "?"
        if "CORE memory" in system:
            return json.dumps({"operation": "APPEND", "content": f"Lena and Omar, session {n}."})
        if "SEMANTIC memory" in system:
            return json.dumps({"operations": [{"operation": "ADD", "memory": NOTE.format(n=n)}]})
        if "EPISODIC memory" in system:
            return json.dumps({"operations": [{"operation": "ADD", "memory": f"2024-03-0{n}: episode {n}"}]})
        return json.dumps({"operations": []})

    return ScriptedLLM(reply)


async def test_the_store_holds_turns_and_notes_labelled_and_a_search_returns_both(tmp_path):
    notes_llm = _notes_model()
    answerer = ScriptedLLM(lambda messages, tools, schema: "Biscuit")
    cfg = QAEvalConfig(dataset="sample", builder="union", builder_model="notes-model", embedder="hashing",
                       provider="scripted", output_dir=str(tmp_path / "u"), cache=False, top_k=10)  # fmt: skip
    summary = await QAEvaluation(cfg, llm=answerer, builder_llm=notes_llm, progress=False).run()
    raw_items = sum(len(session_items(s, RawConfig())) for s in SAMPLE.sessions)  # the raw builder's
    assert summary["n_answered"] == len(answerer.requests) == 10
    b = summary["build"]
    assert b["llm_calls"] == len(notes_llm.requests) == 4 * len(SAMPLE.sessions)
    # the cost of building, per session, beside the items it leaves (the scripted model counts words)
    assert b["llm_calls_per_session"] == 4 and b["completion_tokens_per_session"] > 0
    assert b["prompt_tokens_per_session"] == round(b["prompt_tokens"] / len(SAMPLE.sessions), 1)
    # The notes agents were shown their own notes only, never the raw turns stored beside them.
    episodic_prompts = [r.messages[-1]["content"] for r in notes_llm.requests
                        if "EPISODIC memory" in r.messages[0]["content"]]  # fmt: skip
    assert "episode 1" in episodic_prompts[1] and "D1:" not in episodic_prompts[1].split("\n\nSession ")[0]
    memory = AsyncMemory(str(cfg.out / "memory.db"), embedder="hashing")
    try:
        ns = f"{SAMPLE.id}@union"
        items = await memory.list(namespace=ns)
        origin = {i.id: i.metadata.get("origin") for i in items}
        assert sorted(set(origin.values())) == ["notes", "raw"]
        assert sum(o == "raw" for o in origin.values()) == raw_items > 0
        assert b["items"] == len(items)
        notes = sorted(i.content for i in items if origin[i.id] == "notes")
        assert notes == sorted(
            [NOTE.format(n=n) for n in (1, 2, 3)] + [f"2024-03-0{n}: episode {n}" for n in (1, 2, 3)]
        )
        assert "session 3" in await memory.core(namespace=ns)
        hits = await memory.search("What is the name of Lena's dog?", namespace=ns, top_k=10)
        assert {h.item.metadata["origin"] for h in hits} == {"raw", "notes"}
    finally:
        await memory.close()
    # The answerer read both kinds: a note and a turn in the prompt of the question about the dog.
    prompts = [r.messages[-1]["content"] for r in answerer.requests]
    assert any("(note of session" in p and "Lena: Big news: I adopted a dog" in p for p in prompts)


async def test_union_takes_the_notes_builders_options_and_refuses_an_unknown_notes_builder():
    b = create_builder("union", options=["notes=annotations", "max_operations=2"])
    assert b.notes_name == "annotations" and b.config.max_operations == 2
    m = AsyncMemory(":memory:", embedder="hashing")
    try:
        r = await b.build_session(m, "x", SAMPLE, SAMPLE.sessions[0])
        raw = len(session_items(SAMPLE.sessions[0], RawConfig()))
        assert r.stats["items_by_origin"] == {"notes": 4, "raw": raw}  # 2 episodes + 2 facts, the turns
        assert r.stats["items"] == await m.count(namespace="x") == raw + 4
    finally:
        await m.close()
    with pytest.raises(ConfigError, match="notes must be one of"):
        create_builder("union", options=["notes=raw"])


async def test_a_labelled_notes_agent_cannot_update_or_merge_a_raw_turn():
    """The notes agents write with ``origin=notes``: an UPDATE or MERGE naming a raw turn's id fails as an
    action the model can read, the turn is unchanged, and its own notes still can be edited."""
    from memrl.tools.membuilder import apply_actions

    memory = AsyncMemory(":memory:", embedder="hashing")
    try:
        turn = await memory.add(
            "Lena: my dog is Biscuit", namespace="u", type="episodic", metadata={"origin": "raw"}
        )
        note = await memory.add(
            "2024-03-01: Lena got a dog", namespace="u", type="episodic", metadata={"origin": "notes"}
        )
        other = await memory.add(
            "2024-03-02: Lena named it", namespace="u", type="episodic", metadata={"origin": "notes"}
        )
        out = {"operations": [
            {"operation": "UPDATE", "old_memory": turn.id, "new_memory": "Lena: my cat is Biscuit"},
            {"operation": "MERGE", "old_memories": [turn.id, note.id], "new_memory": "merged"},
            {"operation": "UPDATE", "old_memory": note.id, "new_memory": "2024-03-01: Lena adopted Biscuit"},
        ]}  # fmt: skip
        report = await apply_actions(memory, "u", "episodic", out, metadata={"origin": "notes"})
        assert [f["operation"] for f in report.failed] == ["UPDATE", "MERGE"]
        assert all("not one of this agent's notes memories" in f["error"] for f in report.failed)
        assert [a["operation"] for a in report.applied] == ["UPDATE"]
        # quoted by its text, a turn is not a candidate either: the closest note is, or nothing
        quoted = {
            "operations": [
                {"operation": "UPDATE", "old_memory": "Lena: my dog is Biscuit", "new_memory": "x"}
            ]
        }
        again = await apply_actions(memory, "u", "episodic", quoted, metadata={"origin": "notes"})
        assert [f["operation"] for f in again.failed] == ["UPDATE"] and not again.applied
        assert (await memory.get(turn.id, namespace="u")).content == "Lena: my dog is Biscuit"
        assert (await memory.get(note.id, namespace="u")).content == "2024-03-01: Lena adopted Biscuit"
        assert (await memory.get(other.id, namespace="u")).content == "2024-03-02: Lena named it"
    finally:
        await memory.close()
