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


def test_build_with_adrpo_rewards_and_trajectories(tmp_path, capsys, monkeypatch):
    from memrl.data import load_dataset
    from tests.test_membuilder_agent import rule

    conv = load_dataset("sample")[0][0]
    # the answerer knows the answers of what sessions 1 and 2 said, but the dog's name; not what session 3 says
    gold = {q.question: q.answer for q in conv.questions if max(q.evidence_sessions) <= 2}
    agents = rule()

    def reply(messages, tools, schema):
        text = messages[-1]["content"]
        if "Gold answer:" in text:  # an LLM judge (--judge-model) that finds every answer wrong
            return json.dumps({"reasoning": "r", "label": "WRONG"})
        if text.endswith("Answer:"):
            q = text.split("Question")[-1].split(": ", 1)[1].split("\nAnswer:")[0]
            return "a cat" if "dog" in q else gold.get(q, "a cat")
        return agents(messages, tools, schema)

    _use(monkeypatch, reply)
    out = tmp_path / "traj.jsonl"
    code = main(["build", "--dataset", "sample", "--db", str(tmp_path / "m.db"), "--embedder", "hashing",
                 "--provider", "scripted", "--adrpo", "--sessions", "2", "--trajectories", str(out), "--json"])  # fmt: skip
    summary = json.loads(capsys.readouterr().out)
    assert code == 0 and [a["session"] for a in summary["adrpo"]] == [1, 2]
    # the rule writes the same three items each session: session 2's repeats are refused
    assert (summary["agent_calls"], summary["parsed"], summary["actions_applied"]) == (8, 8, 5)
    s1, s2 = summary["adrpo"]
    assert (s1["n_correct"], len(s1["questions"]), s1["n_failed"]) == (4, 5, 0)  # the dog question is wrong
    # decoys (one conversation: its later questions) take back what is answered without the session: of
    # session 1's 4 decoys, the answerer knows session 2's question, so 4 - 1 x 5/4 of 5 are paid
    assert len(s1["decoys"]) == 4 and s1["n_decoys_correct"] == 1 and s1["chance"] == 1.25
    assert s1["rewards"] == {"core": 0.55, "episodic": 0.55, "semantic": 0.55, "procedural": 0.55}
    # session 2 completes one question only: right, it earns 1 / 5 (the original's fixed 5 questions)
    assert (s2["n_correct"], len(s2["questions"]), s2["n_decoys_correct"]) == (1, 1, 0)
    assert set(s2["rewards"].values()) == {0.2}
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 8 and {r["reward"] for r in rows} == {0.55, 0.2}
    assert all(r["info"]["advantage_weight"] in (1.0, 4.0) and r["steps"] for r in rows)
    assert all(q["f1"] in (0.0, 1.0) for q in s1["questions"])  # no judge model: official F1 >= 0.5 decides

    code = main(["build", "--dataset", "sample", "--db", str(tmp_path / "j.db"), "--embedder", "hashing",
                 "--provider", "scripted", "--adrpo", "--sessions", "1", "--judge-model", "judge", "--json"])  # fmt: skip
    (s1,) = json.loads(capsys.readouterr().out)["adrpo"]
    assert code == 0 and s1["n_correct"] == 0 and set(s1["rewards"].values()) == {0.0}

    assert main(["build", "--dataset", "sample", "--builder", "raw", "--adrpo", "--provider", "scripted",
                 "--db", str(tmp_path / "n.db")]) == 1  # fmt: skip
    assert "--adrpo rewards MemBuilder" in capsys.readouterr().err


def test_eval_answers_from_a_store_memrl_build_made(tmp_path, capsys, monkeypatch):
    from memrl.data import load_dataset

    gold = {q.question: q.answer for q in load_dataset("sample")[0][0].questions}
    _use(
        monkeypatch,
        lambda m, t, s: gold[m[-1]["content"].split("Question")[-1].split(": ", 1)[1].split("\n")[0]],
    )
    db = str(tmp_path / "m.db")
    common = ["--dataset", "sample", "--db", db, "--embedder", "hashing", "--provider", "scripted"]
    assert main(["build", "--builder", "raw", *common, "--json"]) == 0  # namespace: the conversation id
    capsys.readouterr()
    code = main(["eval", "--dataset", "sample", "--mode", "answer", "--db-path", db, "--builder", "raw",
                 "--embedder", "hashing", "--provider", "scripted", "--namespace-format", "{conv}",
                 "--output-dir", str(tmp_path / "run"), "--no-cache"])  # fmt: skip
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert code == 0 and summary["n_answered"] == 10 and summary["f1"] == 1.0
    rows = [json.loads(line) for line in (tmp_path / "run" / "predictions.jsonl").read_text().splitlines()]
    assert all(len(r["retrieved_ids"]) == 10 for r in rows)  # it searched the store `memrl build` filled
