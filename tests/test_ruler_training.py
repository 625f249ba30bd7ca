"""RULER's generated items as a data set (``--dataset ruler-synthetic``): the files ``memrl data prepare`` or
``memrl eval ruler`` write load as documents conversations, checked against their sha256; MemAgent's local
GRPO trains on them (read's boxed rewards, single-answer tasks only) from the CLI."""

from __future__ import annotations

import asyncio
import hashlib
import json
import re

import pytest

from memrl.cli.main import main
from memrl.data import load_conversations
from memrl.data.ruler.synthetic import read_items
from memrl.errors import ConfigError, DataError
from tests.tiny_lm import make_tiny_lm


def generate(tmp_path, tasks: str, seed: int = 1):
    out = tmp_path / "ruler.parquet"
    assert main(["data", "prepare", "--format", "verl", "--task", "read", "--dataset", "ruler-synthetic",
                 "--tokenizer", "whitespace", "--lengths", "1k", "--questions", "3", "--ruler-task", tasks,
                 "--seed", str(seed), "--output", str(out)]) == 0  # fmt: skip
    return tmp_path / "ruler.parquet.d"


def test_generated_items_load_as_documents(tmp_path):
    folder = generate(tmp_path, "niah_single_1,niah_multikey_2")
    convs, report = load_conversations("ruler-synthetic", folder)
    items = [*read_items(folder / "niah_multikey_2_1k.jsonl"), *read_items(folder / "niah_single_1_1k.jsonl")]
    assert [c.id for c in convs] == [i.id for i in items] and dict(report.categories) == {
        "niah_multikey_2": 3, "niah_single_1": 3}  # fmt: skip
    for conv, item in zip(convs, items, strict=True):
        (q,) = conv.questions
        assert q.question == item.question and q.answers == item.answers and q.category == item.task
        assert conv.metadata["context"] == item.context and conv.metadata["ruler_metric"] == item.metric
    one, _ = load_conversations("ruler-synthetic", folder, questions=1)  # the first of each task and length
    assert [c.id for c in one] == [items[0].id, items[3].id]


def test_a_changed_or_malformed_file_is_refused_with_where(tmp_path):
    folder = generate(tmp_path, "niah_single_1")
    f = folder / "niah_single_1_1k.jsonl"
    lines = f.read_text().splitlines()
    assert "is: " in lines[1]
    f.write_text("\n".join([lines[0], lines[1].replace("is: ", "is:  ", 1), lines[2]]) + "\n")
    with pytest.raises(DataError, match="sha256"):
        load_conversations("ruler-synthetic", f)
    bad = json.loads(lines[1])
    del bad["context"]
    blob = "\n".join([lines[0], json.dumps(bad), lines[2]]) + "\n"
    f.write_text(blob)
    (folder / "niah_single_1_1k.jsonl.sha256").write_text(f"{hashlib.sha256(blob.encode()).hexdigest()}  x\n")
    with pytest.raises(DataError, match=r"niah_single_1_1k.jsonl: line 2 is not a generated RULER item"):
        load_conversations("ruler-synthetic", f)
    with pytest.raises(DataError, match="--data-path"):
        load_conversations("ruler-synthetic")


def test_read_tasks_reward_the_boxed_needle_and_refuse_several_values(tmp_path):
    from memrl.agents.memagent import MemAgentConfig
    from memrl.llm.scripted import ScriptedLLM
    from memrl.train.tasks import ReadTasks

    convs, _ = load_conversations("ruler-synthetic", generate(tmp_path, "niah_single_1"))
    cfg = MemAgentConfig(chunk_tokens=400, memory_tokens=64, answer_tokens=16)
    tasks = ReadTasks(convs, cfg)
    gold = convs[0].questions[0].answers[0]

    def reader(answer: str):
        def reply(messages, tools, schema):
            text = messages[-1]["content"]
            if "\\boxed" in text or "boxed" in text.lower() and "answer" in text.lower():
                return f"\\boxed{{{answer}}}"
            found = re.findall(r"is: (\d+)\.", text)  # the needle, where this chunk has it
            return " ".join(found) or "nothing yet"

        return ScriptedLLM(reply)

    right = asyncio.run(tasks.rollout(reader(gold), 0, 1.0))
    wrong = asyncio.run(tasks.rollout(reader("1234567"), 0, 1.0))
    assert right.failure is None and right.reward == 1.0 and wrong.reward == 0.0
    from memrl.data.ruler.synthetic import generate as make
    from memrl.data.ruler.synthetic import write_items
    from tests.test_ruler_synthetic import WORDS, words

    essays = " ".join(f"Essay sentence number {i} says little." for i in range(400))
    items = make("niah_multivalue", 400, count=2, count_tokens=words, words=WORDS, essays=essays)
    write_items(items, tmp_path / "mv" / "niah_multivalue_400.jsonl")
    several, _ = load_conversations("ruler-synthetic", tmp_path / "mv")
    assert len(several) == 2 and all(len(c.questions[0].answers) == 4 for c in several)
    with pytest.raises(ConfigError, match="several values"):
        ReadTasks(several, cfg)
    # the value-set reward takes them, and pays the set, not one value of it nor one value four times
    values = ReadTasks(several, cfg, reward="values")
    golds = list(several[0].questions[0].answers)
    paid = {
        name: asyncio.run(values.rollout(reader(box), 0, 1.0)).reward
        for name, box in {
            "all": ", ".join(golds),
            "one": golds[0],
            "one x4": ", ".join(golds[:1] * 4),
            "two": ", ".join(golds[:2]),
        }.items()  # fmt: skip
    }
    assert paid == {"all": 1.0, "one": 0.25, "one x4": 0.0625, "two": 0.5}


def test_grpo_trains_memagent_on_generated_items_from_the_cli(tmp_path, capsys):
    folder = generate(tmp_path, "niah_single_1")
    tiny = str(make_tiny_lm(tmp_path / "lm"))
    out = tmp_path / "run"
    assert main(["train", "grpo", "--task", "read", "--dataset", "ruler-synthetic", "--data-path", str(folder),
                 "--model", tiny, "--group-size", "2", "--steps", "1", "--no-dynamic-sampling", "--output-dir",
                 str(out), "--agent-option", "chunk_tokens=600", "--agent-option", "memory_tokens=16",
                 "--agent-option", "answer_tokens=16", "--json"]) == 0  # fmt: skip
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["task"] == "read" and summary["steps"] == 1 and summary["tasks"] == 3
    run = json.loads((out / "run.json").read_text())
    assert run["dataset"] == "ruler-synthetic" and len(run["conversations"]) == 3
    rollouts = [json.loads(x) for x in (out / "rollouts.jsonl").read_text().splitlines()]
    assert rollouts and all(r["reward"] is not None for r in rollouts)
