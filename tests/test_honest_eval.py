"""Honest figures from the CLI on a small LoCoMo file and audit file the test writes: ``--gold corrected``
(both figures; a WRONG_CITATION note never becomes the gold answer), conversation-cluster intervals, the
official mode beside memrl's, category 5 on its own line, ``verdicts.jsonl``, ``--builder full`` (whole
conversation, truncation counted), ``memrl eval compare`` and ``memrl eval retrieval --gold corrected``.
The models are scripted (the provider boundary): one rule answers with the original gold answer and, as
the mem0 judge, accepts an answer equal to the gold answer it is shown."""

from __future__ import annotations

import json
import re

import pytest

import memrl.llm.scripted as scripted
from memrl.cli.main import main
from memrl.errors import ProviderError
from memrl.llm import ScriptedLLM

CONVS = {
    "conv-a": (("Ana", "Ben"), [
        ("1:56 pm on 8 May, 2023", [("Ana", "I adopted a dog named Rex yesterday."),
                                     ("Ben", "Congrats! I started pottery classes."),
                                     ("Ana", "I work as a nurse in Porto.")]),
        ("3:10 pm on 20 May, 2023", [("Ben", "I made two bowls and a cup in pottery."),
                                      ("Ana", "Rex learned to sit."), ("Ben", "I visited Lisbon last week.")]),
    ], [
        ("What is the name of Ana's dog?", "Rex", ["D1:1"], 4),
        ("What did Ben make in pottery?", "bowls, cup", ["D1:2"], 1),
        ("Where does Ana work?", "Lisbon", ["D1:3"], 4),
        ("What is Ben's cat called?", None, ["D2:1"], 5),
    ]),
    "conv-b": (("Cy", "Di"), [
        ("9:00 am on 1 June, 2023", [("Cy", "I ran a marathon in Berlin."), ("Di", "I bake sourdough every Sunday.")]),
        ("9:00 am on 20 June, 2023", [("Cy", "My sister moved to Oslo."), ("Di", "I bought a red bike today.")]),
    ], [
        ("Where did Cy run a marathon?", "Berlin", ["D1:1"], 4),
        ("What does Di bake?", "sourdough", ["D1:2"], 4),
        ("When did Di buy a bike?", "20 June 2023", ["D2:2"], 2),
    ]),
}  # fmt: skip
AUDIT = [
    {"question_id": "locomo_0_qa1", "question": "What did Ben make in pottery?", "golden_answer": "bowls, cup",
     "category": 1, "error_type": "WRONG_CITATION", "cited_evidence": ["D1:2"], "correct_evidence": ["D2:1"],
     "reasoning": "...", "correct_answer": "bowls, cup (answer is correct, citation is wrong)"},
    {"question_id": "locomo_0_qa2", "question": "Where does Ana work?", "golden_answer": "Lisbon", "category": 4,
     "error_type": "HALLUCINATION", "cited_evidence": ["D1:3"], "correct_evidence": ["D1:3"],
     "reasoning": "...", "correct_answer": "Porto"},
]  # fmt: skip
GOLD = {q: a for _, _, qas in CONVS.values() for q, a, _, _ in qas}
FAILS = "When did Di buy a bike?"  # the answerer's provider fails on this one


def write_files(tmp_path):
    data = []
    for sid, (speakers, sessions, qas) in CONVS.items():
        conv = {"speaker_a": speakers[0], "speaker_b": speakers[1]}
        for n, (date, turns) in enumerate(sessions, 1):
            conv[f"session_{n}_date_time"] = date
            conv[f"session_{n}"] = [
                {"speaker": s, "dia_id": f"D{n}:{j}", "text": t} for j, (s, t) in enumerate(turns, 1)
            ]
        qa = [{"question": q, "evidence": e, "category": c, **({"answer": a} if a else {"adversarial_answer": "Tom"})}
              for q, a, e, c in qas]  # fmt: skip
        data.append({"sample_id": sid, "conversation": conv, "qa": qa})
    (tmp_path / "locomo10.json").write_text(json.dumps(data))
    (tmp_path / "errors.json").write_text(json.dumps(AUDIT))
    return str(tmp_path / "locomo10.json"), str(tmp_path / "errors.json")


def rule(messages, tools, schema):
    text = messages[-1]["content"]
    if "Your task is to label an answer" in text:  # the mem0 judge
        real = text.split("Now it's time for the real question:")[1]
        gold = real.split("\nGold answer: ")[1].split("\n")[0]
        answer = real.split("\nGenerated answer: ")[1].split("\n")[0]
        return json.dumps({"label": "CORRECT" if gold.lower() == answer.lower() else "WRONG"})
    question = re.search(r"Question(?: \(asked on [^)]*\))?: (.*)\nAnswer:", text).group(1)
    if question == FAILS:
        raise ProviderError("HTTP 500 after retries")
    return GOLD[question] or "Not mentioned in the conversation"


@pytest.fixture
def scripted_rule(monkeypatch):
    original = ScriptedLLM.__init__
    seen: list = []

    def init(self, responses=(), **kw):
        original(self, rule, **kw)
        seen.append(self)

    monkeypatch.setattr(scripted.ScriptedLLM, "__init__", init)
    return seen


def run_cli(capsys, *argv) -> dict:
    assert main(list(argv)) == 0
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def test_corrected_gold_cluster_intervals_official_mode_and_category_5(tmp_path, capsys, scripted_rule):
    locomo, errors = write_files(tmp_path)
    s = run_cli(capsys, "eval", "--dataset", "locomo", "--data-path", locomo, "--gold", "corrected", "--audit-path",
                errors, "--include-adversarial", "--embedder", "hashing", "--provider", "scripted", "--judge",
                "mem0", "--judge-model", "j", "--output-dir", str(tmp_path / "raw"), "--no-cache")  # fmt: skip
    assert s["n_questions"] == 7 and s["n_answer_failures"] == 1
    # category 5 is its own line, never in overall: 5 answered category 1-4 questions, all equal to the gold
    table = s["f1_by_category"]
    assert [r["category"] for r in table][-2:] == ["overall", "adversarial"]
    assert table[-2]["n"] == 5 and table[-1]["n"] == 1 and s["adversarial"]["n"] == 1
    assert s["f1"] == pytest.approx(1.0) and s["f1_official"] == pytest.approx(
        5 / 6
    )  # the failure is 0 there
    assert s["judge_accuracy"] == 1.0 and s["judge_accuracy_official"] == pytest.approx(5 / 6)
    assert len(s["f1_ci_cluster"]) == 2 and len(s["judge_accuracy_ci_cluster"]) == 2
    assert all(r["cluster_low"] is not None for r in table if r["n"])
    c = s[
        "corrected"
    ]  # against the corrected key: "Lisbon" is now wrong; the citation note is not a gold answer
    assert c["n_corrected"] == 2 and c["n_answers_changed"] == 1
    assert c["f1"]["mean"] == pytest.approx(4 / 5) and c["judge_accuracy"]["mean"] == pytest.approx(4 / 5)
    verdicts = {v["question_id"]: v for v in map(json.loads, (tmp_path / "raw" / "verdicts.jsonl").open())}
    assert (
        len(verdicts) == 7 and verdicts["conv-b:q2"]["prediction"] is None and verdicts["conv-b:q2"]["error"]
    )
    assert verdicts["conv-a:q1"]["corrected"]["answers"] == ["bowls, cup"]
    assert (
        verdicts["conv-a:q1"]["corrected"]["evidence"] == ["D2:1"]
        and verdicts["conv-a:q1"]["corrected"]["f1"] == 1.0
    )
    assert verdicts["conv-a:q2"]["corrected"]["judge"] is False and verdicts["conv-a:q2"]["judge"] is True
    report = (tmp_path / "raw" / "report.md").read_text()
    assert "over conversations" in report and "Category 5 (adversarial, on its own" in report
    assert "Against the corrected gold" in report and "official mode" in report


def test_full_context_builder_and_a_paired_comparison(tmp_path, capsys, scripted_rule):
    locomo, _ = write_files(tmp_path)
    common = ["--dataset", "locomo", "--data-path", locomo, "--provider", "scripted", "--no-cache"]
    whole = run_cli(capsys, "eval", *common, "--builder", "full", "--output-dir", str(tmp_path / "full"))
    prompt = scripted_rule[-1].requests[0].messages[-1]["content"]
    assert all(t in prompt for t in ("I adopted a dog named Rex yesterday.", "Rex learned to sit.")) or all(
        t in prompt for t in ("I ran a marathon in Berlin.", "I bought a red bike today."))  # fmt: skip
    assert (
        "Session 2 (3:10 pm on 20 May, 2023):" in prompt or "Session 2 (9:00 am on 20 June, 2023):" in prompt
    )
    assert whole["full_context"]["n_whole"] == 6 and whole["full_context"]["n_truncated"] == 0
    cut = run_cli(capsys, "eval", *common, "--builder", "full", "--builder-option", "context_window=150",
                  "tokenizer=whitespace", "--output-dir", str(tmp_path / "cut"))  # fmt: skip
    f = cut["full_context"]
    assert f["window"] == 150 and f["n_truncated"] == 6 and f["turns_dropped_mean"] > 0
    skip = run_cli(capsys, "eval", *common, "--builder", "full", "--builder-option", "context_window=150",
                   "tokenizer=whitespace", "overflow=skip", "--output-dir", str(tmp_path / "skip"))  # fmt: skip
    assert skip["n_answered"] == 0 and skip["full_context"]["n_skipped"] == 6 and skip["f1_official"] == 0.0
    # the raw builder over the same questions: compare pairs on question ids, by conversation
    run_cli(capsys, "eval", *common, "--embedder", "hashing", "--output-dir", str(tmp_path / "raw"))
    cmp = run_cli(capsys, "eval", "compare", str(tmp_path / "raw"), str(tmp_path / "skip"), "--metric", "f1",
                  "--mode", "official")  # fmt: skip
    overall = cmp["comparisons"][0]["metrics"]["f1"]["overall"]
    assert overall["n"] == 6 and overall["base"] == pytest.approx(5 / 6) and overall["other"] == 0.0
    assert (
        overall["diff"] == pytest.approx(-5 / 6) and overall["ci_high"] < 0 and overall["conversations"] == 2
    )
    assert main(["eval", "compare", str(tmp_path / "raw"), str(tmp_path / "full")]) == 0
    assert "Paired comparison" in capsys.readouterr().out


def test_retrieval_recall_with_both_evidence_sets(tmp_path, capsys):
    locomo, errors = write_files(tmp_path)
    out = tmp_path / "retrieval"
    head = run_cli(capsys, "eval", "retrieval", "--dataset", "locomo", "--data-path", locomo, "--gold", "corrected",
                   "--audit-path", errors, "--embedder", "hashing", "--modes", "bm25", "--k", "1,5",
                   "--embed-cache", "none", "--output-dir", str(out), "--json")  # fmt: skip
    c = head["corrected"]
    assert c["n_corrected"] == 2 and set(c["modes"]["bm25"]["recall_at_k"]) == {"1", "5"}
    assert c["n_evidence_changed"] == 1  # q1's evidence moves; q2's correction is of the answer only
    assert "1 with other evidence turns" in (out / "report.md").read_text()
    rows = {r["question_id"]: r for r in map(json.loads, (out / "questions.jsonl").open())}
    pottery = rows["conv-a:q1"]
    assert pottery["evidence"] == ["D1:2"] and pottery["evidence_corrected"] == ["D2:1"]
    for k in (1, 5):
        top = pottery["retrieved"]["bm25"][:k]
        assert pottery["recall_corrected"]["bm25"][str(k)] == float("D2:1" in top)
        assert pottery["recall"]["bm25"][str(k)] == float("D1:2" in top)
    n = len(rows)
    mean5 = sum(r["recall_corrected"]["bm25"]["5"] for r in rows.values()) / n
    assert c["modes"]["bm25"]["recall_at_k"]["5"] == pytest.approx(mean5)
