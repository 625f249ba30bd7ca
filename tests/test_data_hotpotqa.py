"""HotpotQA loader and the RULER-HotpotQA builder: determinism, length targets, eval-file round trips."""

from __future__ import annotations

import json
import random
import re

import pytest

from memrl.data import (
    LongDocQuestion,
    approx_tokens,
    build_ruler_hotpotqa,
    load_hotpotqa,
    load_ruler_hotpotqa,
    save_ruler_hotpotqa,
)
from memrl.errors import DataError

WORDS = "river stone cloud maple lantern harbor violet copper meadow signal orbit quartz".split()


def _split(n_questions=20, seed=0):
    """A made-up HotpotQA split: each question has 2 gold + 8 distractor paragraphs of 5-40 words."""
    rng = random.Random(seed)
    records = []
    for q in range(n_questions):
        context = []
        for p in range(10):
            sentences = [
                " ".join(rng.choices(WORDS, k=rng.randint(5, 20))) + "." for _ in range(rng.randint(1, 2))
            ]
            context.append([f"Title {q}-{p}", [sentences[0]] + [" " + s for s in sentences[1:]]])
        records.append(
            {
                "_id": f"id{q:03d}",
                "question": f"Which thing links Title {q}-0 and Title {q}-1?",
                "answer": f"answer {q}",
                "type": "bridge" if q % 2 else "comparison",
                "level": "hard",
                "supporting_facts": [[f"Title {q}-0", 0], [f"Title {q}-1", 0], [f"Title {q}-0", 1]],
                "context": context,
            }
        )
    return records


@pytest.fixture
def examples(tmp_path):
    path = tmp_path / "hotpot_dev_distractor_v1.json"
    path.write_text(json.dumps(_split()))
    examples, report = load_hotpotqa(path)
    assert report.ok
    return examples


def _titles(context):
    return re.findall(r"^Document \d+:\n(.+)$", context, flags=re.MULTILINE)


def test_loader_reads_the_distractor_format(examples):
    ex = examples[1]
    assert (ex.id, ex.answer, ex.type, ex.level) == ("id001", "answer 1", "bridge", "hard")
    assert ex.gold_titles == ("Title 1-0", "Title 1-1")
    assert len(ex.context) == 10 and len(ex.paragraphs()) == 10


def test_ruler_contexts_hit_the_token_target(examples):
    target = 600
    questions = build_ruler_hotpotqa(examples, target_tokens=target, num_questions=5, seed=3)
    assert [q.id for q in questions] == ["id000", "id001", "id002", "id003", "id004"]
    biggest_doc = max(approx_tokens(f"Document 1:\n{t}\n{x}") for ex in examples for t, x in ex.paragraphs())
    for q, ex in zip(questions, examples, strict=False):
        size = approx_tokens(q.context)
        assert target - biggest_doc < size <= target
        titles = _titles(q.context)
        assert len(titles) == q.num_docs == len(set(titles))  # distinct documents
        assert set(ex.gold_titles) <= set(titles) and q.gold_titles == ex.gold_titles
        numbers = [int(n) for n in re.findall(r"^Document (\d+):$", q.context, flags=re.MULTILINE)]
        assert numbers == list(range(1, q.num_docs + 1))
        assert q.answers == (ex.answer,)
    assert any(not set(_titles(q.context)) <= {t for t, _ in ex.paragraphs()} for q in questions)


def test_ruler_build_is_deterministic_given_the_seed(examples):
    a = build_ruler_hotpotqa(examples, target_tokens=500, seed=1)
    b = build_ruler_hotpotqa(examples, target_tokens=500, seed=1)
    c = build_ruler_hotpotqa(examples, target_tokens=500, seed=2)
    assert a == b
    assert [q.context for q in a] != [q.context for q in c]
    # A question's context does not depend on how many other questions are built.
    assert build_ruler_hotpotqa(examples, target_tokens=500, seed=1, num_questions=3) == a[:3]


def test_num_docs_limit_and_custom_token_counter(examples):
    by_docs = build_ruler_hotpotqa(examples, num_docs=12, num_questions=4)
    assert [q.num_docs for q in by_docs] == [12] * 4

    def chars(text):  # a "tokenizer" that counts characters
        return len(text)

    by_chars = build_ruler_hotpotqa(examples, target_tokens=2_000, count_tokens=chars, num_questions=4)
    assert all(1_000 < len(q.context) <= 2_000 for q in by_chars)
    tiny = build_ruler_hotpotqa(examples, target_tokens=5, num_questions=1)[0]
    assert sorted(_titles(tiny.context)) == ["Title 0-0", "Title 0-1"]  # gold documents always kept
    with pytest.raises(ValueError, match="target_tokens, num_docs or both"):
        build_ruler_hotpotqa(examples)


@pytest.mark.parametrize("name", ["eval_50.json", "eval_50.jsonl"])
def test_eval_file_round_trip(examples, tmp_path, name):
    questions = build_ruler_hotpotqa(examples, target_tokens=400, num_questions=3)
    path = save_ruler_hotpotqa(questions, tmp_path / name)
    lines = path.read_text().splitlines()
    first = json.loads(lines[0])[0] if name.endswith(".json") else json.loads(lines[0])
    assert {"context", "input", "answers", "num_docs", "index"} <= set(first)
    assert (first["input"], first["index"]) == (questions[0].question, 0)
    loaded, report = load_ruler_hotpotqa(path)
    assert loaded == questions and report.stats["questions"] == 3


def test_memagent_records_without_extras(tmp_path):
    path = tmp_path / "eval_50.json"
    path.write_text(
        json.dumps(
            [{"context": "Document 1:\nA\ntext", "input": "Q?", "answers": ["x"], "num_docs": 1, "index": 7}]
        )
    )
    (q,), _ = load_ruler_hotpotqa(path)
    assert q == LongDocQuestion("7", "Q?", ("x",), "Document 1:\nA\ntext", 1, ())
    path.write_text(json.dumps([{"context": "c", "answers": ["x"], "num_docs": 1, "index": 0}]))
    with pytest.raises(DataError, match=r"eval_50\.json: \[0\]: field 'input' missing"):
        load_ruler_hotpotqa(path)


def test_malformed_hotpotqa_names_file_question_field(tmp_path):
    records = _split(2)
    records[1]["context"][3] = ["only a title"]
    path = tmp_path / "hotpot.json"
    path.write_text(json.dumps(records))
    with pytest.raises(
        DataError, match=r"hotpot\.json: question 'id001' context\[3\]: should be \[title, \[sentences\]\]"
    ):
        load_hotpotqa(path)
    records = _split(2)
    records[0]["supporting_facts"].append(["Elsewhere", 0])
    path.write_text(json.dumps(records))
    _, report = load_hotpotqa(path)
    assert report.problems["supporting_titles_not_in_context"] == 1
