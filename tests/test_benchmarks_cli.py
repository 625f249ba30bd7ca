"""Every benchmark end to end through the real CLI, on small files in the published formats: MemAgent's
RULER-HotpotQA length sweep (built from a HotpotQA file, and MemAgent's eval files read as they are),
HotpotQA over its own ten paragraphs, PerLTQA's memories, retrieval on every data set with evidence, and
``--data-path`` as a file or a folder for every data set.

The model is scripted (the boundary); builders, readers, store, search, metrics and reports are real.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import memrl.llm.scripted as scripted
from memrl.cli.main import main
from memrl.data import load_conversations, load_dataset, save_ruler_hotpotqa
from memrl.llm import ScriptedLLM
from tests.hotpot_fixture import code_in, write_hotpot
from tests.test_data_longmemeval import _entry
from tests.test_data_perltqa import _memory, _qa

_original_init = ScriptedLLM.__init__


def _no_nan(text: str) -> dict:
    def refuse(name: str) -> None:
        raise AssertionError(f"{name} is not valid JSON")

    return json.loads(text, parse_constant=refuse)


def reader(messages, tools, schema):
    """MemAgent's two prompts answered by reading: keep the code when a section states it, box it at the end."""
    prompt = messages[-1]["content"]
    thing = re.search(r"code of (Thing \d+)", prompt)[1]
    if "Next section:" in prompt:
        memory = prompt.split("Your memory so far:\n", 1)[1].split("\n\nNext section", 1)[0]
        code = code_in(prompt.split("Next section:", 1)[1], thing)
        return f"The code of {thing} is {code}." if code else memory
    return "\\boxed{" + (code_in(prompt, thing) or "unknown") + "}"


def answerer(messages, tools, schema):
    """Answers from the retrieved passages in the prompt, or says it cannot."""
    prompt = messages[-1]["content"]
    thing = re.search(r"code of (Thing \d+)\?", prompt)
    if thing:
        return code_in(prompt, thing[1]) or "Not mentioned"
    m = re.search(r"Question: (.*)\nAnswer:", prompt)
    return {"Where did they go?": "The Grand Canyon.", "How old is he?": "28"}.get(
        m[1] if m else "", "Not mentioned"
    )


@pytest.fixture
def scripted_as(monkeypatch):
    def use(fn):
        monkeypatch.setattr(
            scripted.ScriptedLLM, "__init__", lambda self, responses=(), **kw: _original_init(self, fn, **kw)
        )

    return use


def _run(argv, capsys) -> dict:
    code = main(argv)
    out = capsys.readouterr().out.strip().splitlines()
    assert code == 0
    return _no_nan(out[-1])


EVAL = ["eval", "--provider", "scripted", "--embedder", "hashing", "--no-cache", "--json"]


def test_ruler_hotpotqa_length_sweep_with_memagent(tmp_path, capsys, scripted_as):
    write_hotpot(tmp_path / "data")
    scripted_as(reader)
    out = tmp_path / "run"
    s = _run([*EVAL, "--dataset", "ruler-hotpotqa", "--data-path", str(tmp_path / "data"), "--lengths", "600,1.2k",
              "--builder", "memagent", "--builder-option", "chunk_tokens=200", "--questions", "4",
              "--output-dir", str(out)], capsys)  # fmt: skip
    assert s["n_questions"] == 8 and s["n_answered"] == 8 and s["accuracy"] == 1.0 and s["sub_em"] == 1.0
    table = {r["category"]: r for r in s["length_table"]}
    assert list(table) == ["600", "1.2k", "overall"]  # by length, shortest first
    assert (
        table["600"]["n"] == 4 and table["1.2k"]["tokens_per_question"] > table["600"]["tokens_per_question"]
    )
    assert all(r["ci_low"] <= r["accuracy"] <= r["ci_high"] for r in s["length_table"])
    report = (out / "report.md").read_text()
    assert "## Accuracy by context length" in report and "| 1.2k | 4 | 100.0 |" in report
    rows = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]
    assert {r["question_id"] for r in rows} >= {"hq000@600", "hq000@1.2k"}
    # without --lengths: MemAgent's first length, 7k
    assert {c.questions[0].category for c in load_conversations("ruler-hotpotqa", tmp_path / "data")[0]} == {
        "7k"
    }
    # the same build is deterministic: a second run gives the same contexts
    again = load_conversations("ruler-hotpotqa", tmp_path / "data", lengths=["600"], questions=4)[0]
    first = load_conversations("ruler-hotpotqa", tmp_path / "data", lengths=["600"], questions=4)[0]
    assert [c.metadata["context"] for c in again] == [c.metadata["context"] for c in first]


def test_ruler_hotpotqa_answered_from_a_store_and_memagents_files_as_they_are(tmp_path, capsys, scripted_as):
    write_hotpot(tmp_path / "data")
    scripted_as(answerer)
    s = _run([*EVAL, "--dataset", "ruler-hotpotqa", "--data-path", str(tmp_path / "data"), "--lengths", "800",
              "--builder", "raw", "--questions", "3", "--output-dir", str(tmp_path / "raw")], capsys)  # fmt: skip
    assert s["n_answered"] == 3 and s["accuracy"] == 1.0
    assert 0 < s["evidence_recall"] <= 1  # gold documents found by their sentences
    # MemAgent's published records {context, input, answers}: no num_docs, no ids, no gold titles
    built = load_dataset("ruler-hotpotqa", tmp_path / "data", lengths=["800"], num_questions=3)[0]
    folder = tmp_path / "memagent"
    save_ruler_hotpotqa([], folder / "unused.json")
    records = [{"context": c.metadata["context"], "input": c.questions[0].question,
                "answers": list(c.questions[0].answers)} for c in built]  # fmt: skip
    (folder / "eval_50.json").write_text(json.dumps(records))
    scripted_as(reader)
    s = _run([*EVAL, "--dataset", "ruler-hotpotqa", "--data-path", str(folder), "--builder", "memagent",
              "--output-dir", str(tmp_path / "files")], capsys)  # fmt: skip
    assert s["n_answered"] == 3 and s["accuracy"] == 1.0
    assert [r["category"] for r in s["length_table"]][-1] == "overall"


def test_hotpotqa_each_question_over_its_own_ten_paragraphs(tmp_path, capsys, scripted_as):
    path = write_hotpot(tmp_path)
    scripted_as(answerer)
    s = _run([*EVAL, "--dataset", "hotpotqa", "--data-path", str(path), "--questions", "4",
              "--output-dir", str(tmp_path / "run")], capsys)  # fmt: skip
    assert s["n_answered"] == 4 and s["accuracy"] == 1.0 and s["build"]["sessions"] == 40
    assert {r["category"] for r in s["length_table"]} == {"bridge", "comparison", "overall"}


def _perltqa(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "perltqa_en_v2.json").write_text(json.dumps(_qa()))
    (folder / "perltmem_en_v2.json").write_text(json.dumps(_memory()))
    return folder


def test_perltqa_raw_answers_from_its_memories_and_recall_counts_memory_ids(tmp_path, capsys, scripted_as):
    convs, _ = load_conversations("perltqa", _perltqa(tmp_path / "perltqa"))
    wang = next(c for c in convs if c.id == "Wang Xiaoming")
    kinds = {m.id: (m.type, m.kind) for m in wang.memories}
    assert kinds["1_0_0"] == ("episodic", "event") and kinds["1_0"] == ("semantic", "social_relationship")
    assert kinds["profile:Age"] == ("semantic", "profile")
    assert next(m for m in wang.memories if m.id == "1_0_0").date.year == 2022
    scripted_as(answerer)
    out = tmp_path / "run"
    s = _run([*EVAL, "--dataset", "perltqa", "--data-path", str(tmp_path / "perltqa"), "--conv-id", "Wang Xiaoming",
              "--output-dir", str(out)], capsys)  # fmt: skip
    assert s["build"]["memories"] == len(wang.memories) and s["build"]["sessions"] == len(wang.sessions)
    rows = {r["question"]: r for r in map(json.loads, (out / "predictions.jsonl").read_text().splitlines())}
    event = rows["Where did they go?"]  # answered from the event memory, which holds the answer
    assert event["f1"] == 1.0 and event["evidence_recall"] == 1.0 and "1_0_0" in event["retrieved_evidence"]
    assert rows["How old is he?"]["evidence_recall"] == 1.0  # the profile field, by its id
    assert rows["When will they camp?"]["evidence_recall"] == 1.0  # the dialogue, by any of its turns


def test_membuilder_reads_only_perltqas_dialogues(tmp_path):
    from memrl.agents.base import create_builder

    convs, _ = load_conversations("perltqa", _perltqa(tmp_path / "perltqa"))
    builder = create_builder("membuilder", llm=ScriptedLLM([]))
    import asyncio

    assert asyncio.run(builder.build_memories(None, "ns", convs[0])) is None  # dialogues are its sessions


def _lme(folder: Path) -> Path:
    path = folder / "longmemeval" / "longmemeval_oracle.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps([_entry("q1"), _entry("q2", question_type="multi-session")]))
    return path


@pytest.mark.parametrize("name", ["perltqa", "longmemeval", "hotpotqa", "ruler-hotpotqa", "sample"])
def test_retrieval_on_every_data_set_with_evidence(name, tmp_path, capsys):
    _perltqa(tmp_path / "perltqa")
    _lme(tmp_path)
    write_hotpot(tmp_path)
    argv = ["eval", "retrieval", "--dataset", name, "--embedder", "hashing", "--json", "--data-path", str(tmp_path),
            "--output-dir", str(tmp_path / "out")]  # fmt: skip
    if name == "ruler-hotpotqa":
        argv += ["--lengths", "700"]
    s = _run(argv, capsys)
    assert s["dataset"] == name and s["n_with_evidence"] > 0
    hybrid = s["modes"]["hybrid"]
    assert hybrid["by_category"]["overall"]["n"] == s["n_with_evidence"]
    assert all(0 <= v <= 1 for v in hybrid["recall_at_k"].values() if v is not None)
    assert hybrid["recall_at_k"]["20"] > 0
    for key in ("ndcg_at_k", "session_ndcg_at_k", "recall_all_at_k", "session_recall_all_at_k"):
        assert all(0 <= v <= 1 for v in hybrid[key].values() if v is not None)
    assert hybrid["ndcg_at_k"]["20"] > 0 and hybrid["recall_all_at_k"]["20"] <= hybrid["recall_at_k"]["20"]
    _no_nan((tmp_path / "out" / "summary.json").read_text())
    if name == "perltqa":
        assert {"profile", "social_relationship", "events", "dialogues"} <= set(hybrid["by_category"])


def test_retrieval_refuses_a_data_set_without_evidence(tmp_path, capsys):
    path = tmp_path / "eval_50.json"
    path.write_text(json.dumps([{"context": "Document 1:\nA\nIt rains.", "input": "Q?", "answers": ["x"]}]))
    code = main(["eval", "retrieval", "--dataset", "ruler-hotpotqa", "--data-path", str(path), "--json"])
    err = capsys.readouterr().err
    assert code != 0 and "has evidence" in err


@pytest.mark.parametrize(
    ("name", "files"),
    [
        ("locomo", ["locomo/locomo10.json"]),
        ("longmemeval", ["longmemeval/longmemeval_oracle.json"]),
        ("perltqa", ["perltqa/perltqa_en_v2.json", "perltqa/perltmem_en_v2.json"]),
        ("hotpotqa", ["hotpotqa/hotpot_dev_distractor_v1.json"]),
        ("ruler-locomo", ["locomo/locomo10.json"]),
    ],
)
def test_data_path_is_a_file_or_a_folder_for_every_data_set(name, files, tmp_path):
    from memrl.data import sample_conversation_path

    sample = sample_conversation_path().read_text()
    _perltqa(tmp_path / "perltqa")
    _lme(tmp_path)
    write_hotpot(tmp_path)
    (tmp_path / "locomo").mkdir()
    (tmp_path / "locomo" / "locomo10.json").write_text(sample)
    kw = {"lengths": ["2k"]} if name.startswith("ruler") else {}
    by_root = load_conversations(name, tmp_path, **kw)[0]
    by_folder = load_conversations(name, tmp_path / Path(files[0]).parent, **kw)[0]
    by_file = load_conversations(name, tmp_path / files[0], **kw)[0]
    assert by_root and [c.id for c in by_root] == [c.id for c in by_folder] == [c.id for c in by_file]


def test_ruler_hotpotqa_answered_from_a_membuilder_store(tmp_path, capsys, scripted_as):
    """MemBuilder reads each document as a session (four agents per document), then answers from its store."""
    from tests.test_membuilder_agent import rule

    write_hotpot(tmp_path / "data", n_questions=2)
    agents = rule()

    def reply(messages, tools, schema):
        return (
            answerer(messages, tools, schema)
            if messages[-1]["content"].endswith("Answer:")
            else agents(messages, tools, schema)
        )

    scripted_as(reply)
    s = _run([*EVAL, "--dataset", "ruler-hotpotqa", "--data-path", str(tmp_path / "data"), "--lengths", "300",
              "--builder", "membuilder", "--questions", "1", "--output-dir", str(tmp_path / "mb")], capsys)  # fmt: skip
    assert (
        s["n_answered"] == 1
        and s["build"]["sessions"] >= 2
        and s["build"]["llm_calls"] == 4 * s["build"]["sessions"]
    )
    assert s["length_table"][0]["category"] == "300"
