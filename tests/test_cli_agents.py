"""``memrl build`` / ``update`` / ``read`` end to end, with the model faked at its boundary (scripted)."""

from __future__ import annotations

import json

import memrl.llm.scripted as scripted
from memrl.cli.main import main
from memrl.llm import ScriptedLLM


def _use(monkeypatch, reply):
    original = ScriptedLLM.__init__

    def init(self, responses=(), **kw):
        original(self, reply, **kw)

    monkeypatch.setattr(scripted.ScriptedLLM, "__init__", init)


def test_build_raw_then_update_with_a_question(tmp_path, capsys, monkeypatch):
    db = str(tmp_path / "m.db")
    common = ["--dataset", "sample", "--db", db, "--embedder", "hashing", "--provider", "scripted", "--json"]
    assert main(["build", "--builder", "raw", *common]) == 0
    built = json.loads(capsys.readouterr().out)
    assert built["sessions"] == 3 and built["items"]["episodic"] > 30 and built["failures"] == []

    def agent(messages, tools, schema):  # one search, then stop
        if any(m["role"] == "tool" for m in messages):
            return "Done."
        return {"tool_calls": [{"name": "search_memory", "arguments": {"query": "Biscuit"}}]}

    _use(monkeypatch, agent)
    assert main(["update", *common, "--question", "What is the name of Lena's dog?"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["llm_calls"] == 2 and result["calls_by_tool"] == {"search_memory": 1}
    assert result["stop_reason"] == "answered" and result["failures"] == []


def test_read_a_document(tmp_path, capsys, monkeypatch):
    doc = tmp_path / "doc.txt"
    doc.write_text("The lighthouse keeper was named Ana.\n" * 5)
    _use(
        monkeypatch, lambda m, t, s: "Ana keeps it" if "Next section" in m[-1]["content"] else "\\boxed{Ana}"
    )
    code = main(["read", "--document", str(doc), "--question", "Who kept the lighthouse?", "--provider", "scripted",
                 "--chunk-tokens", "20", "--json"])  # fmt: skip
    out = json.loads(capsys.readouterr().out)
    assert (
        code == 0 and out["answer"] == "Ana" and out["chunks_read"] >= 2 and out["memory"] == "Ana keeps it"
    )


def test_provider_failures_are_shown_and_exit_1(tmp_path, capsys, monkeypatch):
    doc = tmp_path / "doc.txt"
    doc.write_text("The lighthouse keeper was named Ana.\n" * 5)
    _use(monkeypatch, [])  # the script is exhausted at the first call: a provider error
    code = main(
        ["read", "--document", str(doc), "--question", "Who kept it?", "--provider", "scripted", "--json"]
    )
    out = json.loads(capsys.readouterr().out)
    assert code == 1 and out["answer"] is None and "ScriptExhaustedError" in out["failure"]

    db = str(tmp_path / "m.db")
    common = ["--dataset", "sample", "--db", db, "--embedder", "hashing", "--provider", "scripted", "--json"]
    assert main(["build", "--builder", "raw", *common]) == 0
    capsys.readouterr()
    code = main(["update", *common])
    out = json.loads(capsys.readouterr().out)
    assert code == 1 and out["stop_reason"] == "failure" and out["failures"][0]["kind"] == "provider"
