"""``memrl eval`` QA on LongMemEval (a file in the oracle layout that the test writes) with memrl's strict
judge (``--judge strict``; the official judge is tests/test_judges.py's): the raw builder and a scripted
answerer (the boundary), judged by a scripted judge that reads its prompt. Each question type gets its rule
(off-by-one for counts of days, knowledge-update's latest value, the preference rubric), an ``_abs``
question is judged as an abstention whatever its type, an integer answer is an answer, and a judge reply
that does not parse is a judge failure, counted and not scored."""

from __future__ import annotations

import json

from memrl.eval.qa import QAEvaluation
from memrl.eval.qa.config import QAEvalConfig
from memrl.llm.scripted import ScriptedLLM

# question id -> (type, question, answer, the user's evidence turn)
ITEMS = {
    "t1": ("temporal-reasoning", "How many days before my trip did I buy boots?", "3 days",
           "I bought hiking boots three days before my trip to Oslo."),
    "k1": ("knowledge-update", "Where do I live now?", "Porto", "I moved from Lisbon to Porto in June."),
    "p1": ("single-session-preference", "Can you suggest a weekend activity?",
           "The user would prefer suggestions involving birdwatching.", "I love birdwatching on weekends."),
    "m1": ("multi-session", "How many kayaks did I buy?", 2, "I bought two kayaks this year."),
    "u1_abs": ("single-session-user", "What is my iguana called?", "You did not mention an iguana.",
               "I am thinking about adopting a lizard."),
}  # fmt: skip
RULES = {  # words of each rule's text in memrl.scoring.judges (the strict judge)
    "t1": "count of days",
    "k1": "latest value",
    "p1": "rubric",
    "m1": None,
    "u1_abs": "cannot be answered",
}


def write_file(path) -> None:
    records = []
    for qid, (qtype, question, answer, said) in ITEMS.items():
        records.append({
            "question_id": qid, "question_type": qtype, "question": question, "answer": answer,
            "question_date": "2023/07/01 (Sat) 10:00",
            "haystack_session_ids": [f"answer_{qid}"], "haystack_dates": ["2023/06/20 (Tue) 09:30"],
            "haystack_sessions": [[{"role": "user", "content": said, "has_answer": True},
                                   {"role": "assistant", "content": "Noted, thanks for telling me."}]],
            "answer_session_ids": [f"answer_{qid}"],
        })  # fmt: skip
    path.write_text(json.dumps(records))


async def test_longmemeval_qa_judged_by_question_type(tmp_path):
    data = tmp_path / "longmemeval_oracle.json"
    write_file(data)
    answerer = ScriptedLLM(lambda messages, tools, schema: "2")
    seen: dict[str, str] = {}

    def judge_reply(messages, tools, schema):
        question = messages[-1]["content"].split("\n", 1)[0].removeprefix("Question: ")
        qid = next(q for q, item in ITEMS.items() if item[1] == question)
        seen[qid] = messages[0]["content"]
        if qid == "p1":
            assert "\nRubric: The user would prefer" in messages[-1]["content"]  # a rubric, not a gold answer
            return "the grader is tired"  # not JSON: a judge failure
        label = "CORRECT" if qid == "m1" else "WRONG"
        return json.dumps({"reasoning": "compared", "label": label})

    judge = ScriptedLLM(judge_reply)
    cfg = QAEvalConfig(dataset="longmemeval", data_path=str(data), builder="raw", embedder="hashing",
                       provider="scripted", output_dir=str(tmp_path / "run"), cache=False, judge="strict")  # fmt: skip
    summary = await QAEvaluation(cfg, llm=answerer, judge=judge, progress=False).run()

    assert summary["n_questions"] == summary["n_answered"] == len(ITEMS)
    assert set(seen) == set(ITEMS)
    for qid, rule in RULES.items():
        if rule is None:
            assert "off by one" not in seen[qid] and "cannot be answered" not in seen[qid]
        else:
            assert rule in seen[qid], (qid, seen[qid])
    rows = {
        json.loads(line)["question_id"]: json.loads(line)
        for line in (tmp_path / "run" / "predictions.jsonl").open()
    }
    assert rows["m1"]["answers"] == ["2"] and rows["m1"]["judge"] is True and rows["m1"]["f1"] == 1.0
    assert rows["p1"]["judge"] is None and "unparsable" in rows["p1"]["judge_error"]
    assert summary["n_judge_failures"] == 1 and summary["n_judged"] == len(ITEMS) - 1
    assert summary["judge_accuracy"] == 1 / (len(ITEMS) - 1)  # the failure is not scored either way
    report = (tmp_path / "run" / "report.md").read_text()
    assert "knowledge-update" in report and "judge failures 1" in report
