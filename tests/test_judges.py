"""The published judges are sent byte for byte as published, over real HTTP, and scored by their protocol.

The judge model is a scripted LLM behind memrl's OpenAI-compatible server (the boundary); the evaluation
talks to it with the ``openai`` provider, as it would to gpt-4o. Each request the server received is
compared with the prompt rebuilt here from the data folder's copy of the official templates
(``$MEMRL_DATA_DIR/judges``), the way the official scripts build it: LongMemEval's ``get_anscheck_prompt``
(a template per type, ``_abstention`` for ``_abs`` ids, ``template.format(question, answer, response)``,
``max_tokens`` 10, verdict ``'yes' in reply.lower()``) and mem0's ``ACCURACY_PROMPT.format(...)`` with
``response_format`` ``json_object``.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from memrl.data import load_dataset
from memrl.eval.qa import QAEvaluation
from memrl.eval.qa.config import QAEvalConfig
from memrl.llm import ScriptedLLM
from memrl.llm.server import LLMServer
from memrl.scoring.judge import judge_answer
from memrl.scoring.judges import JUDGE_NAMES, get_judge
from tests.conftest import shared_data_dir

DATA = shared_data_dir()
pytestmark = [pytest.mark.data,
              pytest.mark.skipif(DATA is None or not (DATA / "judges").is_dir(), reason="no ../shared/data")]  # fmt: skip
JUDGES_DIR = (DATA or Path(".")) / "judges"
PART_A = str((DATA or Path(".")) / "longmemeval" / "longmemeval_oracle_part_a.json")
OFFICIAL_TYPES = ("single-session-user", "single-session-assistant", "multi-session")


def official_prompt(task: str, question: str, answer: str, response: str, abstention: bool) -> str:
    """LongMemEval's get_anscheck_prompt, rebuilt from the data folder's copy of its templates."""
    templates = json.loads((JUDGES_DIR / "longmemeval_official.json").read_text())["templates"]
    if abstention:
        return templates["_abstention"].format(question, answer, response)
    key = task if task in (*OFFICIAL_TYPES, "temporal-reasoning", "knowledge-update",
                           "single-session-preference") else None  # fmt: skip
    if key is None:
        raise NotImplementedError(task)
    return templates[key].format(question, answer, response)


def test_shipped_templates_are_the_published_files_byte_for_byte():
    for name, filename in (("longmemeval", "longmemeval_official.json"), ("mem0", "locomo_mem0_accuracy.json"),
                           ("membuilder", "locomo_membuilder_accuracy.json")):  # fmt: skip
        spec = get_judge(name)
        shipped = (Path(__file__).parents[1] / spec.file).read_bytes()
        assert shipped == (JUDGES_DIR / filename).read_bytes()
        assert spec.file_sha256 == hashlib.sha256(shipped).hexdigest()
        assert spec.license in ("MIT", "Apache-2.0") and spec.source
    mem0 = json.loads((JUDGES_DIR / "locomo_mem0_accuracy.json").read_text())["template"]
    assert get_judge("mem0").template_sha256 == hashlib.sha256(mem0.encode()).hexdigest()
    assert set(JUDGE_NAMES) == {"longmemeval", "mem0", "membuilder", "strict"}


async def test_longmemeval_part_a_is_judged_with_the_official_prompt_byte_for_byte(tmp_path):
    items = json.loads(Path(PART_A).read_text())
    by_question = {x["question"]: x for x in items}
    answers = {x["question"]: f"my answer {i}" for i, x in enumerate(items)}

    def answerer(messages, tools, schema):
        question = messages[-1]["content"].rsplit("Question", 1)[1].split(": ", 1)[1].split("\nAnswer:")[0]
        return answers[question]

    replies = {}  # the judge's reply per question id: yes, no, and one that says both (official: 'yes' in)
    for i, x in enumerate(items):
        replies[x["question_id"]] = ("Yes.", "no", "No, though yes in part")[i % 3]

    def judge_reply(messages, tools, schema):
        text = messages[0]["content"]
        qid = next(x["question_id"] for q, x in by_question.items() if f"\n\nQuestion: {q}\n\n" in text)
        return replies[qid]

    with LLMServer(ScriptedLLM(judge_reply), model_name="gpt-4o-2024-08-06") as server:
        cfg = QAEvalConfig(dataset="longmemeval", data_path=PART_A, builder="raw", embedder="hashing",
                           provider="scripted", judge="longmemeval", judge_provider="openai",
                           judge_model="gpt-4o-2024-08-06", judge_base_url=server.base_url,
                           output_dir=str(tmp_path / "run"), cache=False)  # fmt: skip
        summary = await QAEvaluation(cfg, llm=ScriptedLLM(answerer), progress=False).run()
        bodies = list(server.requests)

    assert len(bodies) == len(items) == 48
    sent = {}
    for body in bodies:
        assert body["temperature"] == 0 and body["max_tokens"] == 10 and "response_format" not in body
        assert body["model"] == "gpt-4o-2024-08-06" and len(body["messages"]) == 1
        (message,) = body["messages"]
        assert message["role"] == "user"
        sent[message["content"]] = True
    for x in items:
        expected = official_prompt(x["question_type"], x["question"], str(x["answer"]), answers[x["question"]],
                                   "_abs" in x["question_id"])  # fmt: skip
        assert expected in sent, x["question_id"]

    verdict = {qid: "yes" in r.lower() for qid, r in replies.items()}
    types: dict[str, list[bool]] = {}
    for x in items:
        types.setdefault(x["question_type"], []).append(verdict[x["question_id"]])
    lme = summary["longmemeval"]["memrl"]
    assert set(lme["by_type"]) == set(types) and len(types) == 6
    for t, v in types.items():
        assert lme["by_type"][t]["mean"] == pytest.approx(sum(v) / len(v)) and lme["by_type"][t]["n"] == len(
            v
        )
    assert lme["task_averaged"] == pytest.approx(sum(sum(v) / len(v) for v in types.values()) / len(types))
    assert lme["overall"]["mean"] == pytest.approx(sum(verdict.values()) / len(items))
    abstention = [verdict[x["question_id"]] for x in items if "_abs" in x["question_id"]]
    assert lme["abstention"]["n"] == len(abstention) == 1
    assert lme["abstention"]["mean"] == pytest.approx(sum(abstention) / len(abstention))
    assert summary["n_judge_failures"] == 0  # every reply is a verdict under the official count
    judge = summary["judge"]
    assert judge["name"] == "longmemeval" and judge["model"] == "gpt-4o-2024-08-06"
    assert judge["template_sha256"] == get_judge("longmemeval").template_sha256
    report = (tmp_path / "run" / "report.md").read_text()
    assert (
        "Task-averaged accuracy" in report
        and "Abstention accuracy" in report
        and judge["template_sha256"][:16] in report
    )
    verdicts = [json.loads(line) for line in (tmp_path / "run" / "verdicts.jsonl").open()]
    assert [v["question_id"] for v in verdicts] == [x["question_id"] for x in items]


async def test_mem0_judge_over_http_counts_a_non_json_reply_as_a_failure_and_officially_wrong(tmp_path):
    sample = load_dataset("sample")[0][0]
    template = json.loads((JUDGES_DIR / "locomo_mem0_accuracy.json").read_text())["template"]
    gold = {q.question: q.answer for q in sample.questions}
    first = sample.questions[0].question

    def judge_reply(messages, tools, schema):
        q = next(q for q in gold if f"Question: {q}\n" in messages[0]["content"])
        if q == first:
            return "CORRECT"  # not the JSON the prompt asks for
        return json.dumps({"label": "CORRECT" if gold[q].startswith("1") else "WRONG"})

    with LLMServer(ScriptedLLM(judge_reply)) as server:
        cfg = QAEvalConfig(dataset="sample", embedder="hashing", provider="scripted", judge="mem0",
                           judge_provider="openai", judge_model="gpt-4o-mini", judge_base_url=server.base_url,
                           output_dir=str(tmp_path / "run"), cache=False)  # fmt: skip
        summary = await QAEvaluation(cfg, llm=ScriptedLLM(lambda *a: "an answer"), progress=False).run()
        bodies = list(server.requests)
    assert len(bodies) == len(sample.questions)
    expected = {template.format(question=q.question, gold_answer=q.answer, generated_answer="an answer")
                for q in sample.questions}  # fmt: skip
    assert {b["messages"][0]["content"] for b in bodies} == expected
    assert all(b["response_format"] == {"type": "json_object"} and b["temperature"] == 0 for b in bodies)
    assert all(len(b["messages"]) == 1 and b["messages"][0]["role"] == "user" for b in bodies)
    right = sum(gold[q].startswith("1") for q in gold if q != first)
    assert summary["n_judge_failures"] == 1 and summary["n_judged"] == len(gold) - 1
    assert summary["judge_accuracy"] == pytest.approx(right / (len(gold) - 1))  # memrl: failure left out
    assert summary["judge_accuracy_official"] == pytest.approx(right / len(gold))  # official: wrong


async def test_published_locomo_judges_see_not_answerable_for_category_5():
    llm = ScriptedLLM(lambda m, t, s: '{"label": "CORRECT"}')
    j = await judge_answer(llm, "Where did Ana ski?", "Not mentioned in the conversation", "No information",
                           question_type="adversarial", judge="membuilder")  # fmt: skip
    assert j.label is True and "Gold answer: Not answerable\n" in llm.requests[0].messages[0]["content"]
    strict = ScriptedLLM(lambda m, t, s: '{"reasoning": "r", "label": "WRONG"}')
    j = await judge_answer(strict, "Q?", "7 May 2023", "8 May 2023", question_type="temporal")
    system = strict.requests[0].messages[0]["content"]
    assert j.label is False and "not another date" in system and strict.requests[0].sampling.max_tokens == 200
