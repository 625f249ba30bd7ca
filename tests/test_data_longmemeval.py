"""LongMemEval loader on small files in the published format, and the MemBuilder / seeded splits."""

from __future__ import annotations

import json
from datetime import datetime

import pytest

from memrl.data import MEMBUILDER_LONGMEMEVAL_SPLIT, load_dataset, load_longmemeval, seeded_split
from memrl.errors import DataError


def _entry(qid="q1", **overrides):
    entry = {
        "question_id": qid,
        "question_type": "single-session-user",
        "question": "What breed is my dog?",
        "answer": "a corgi",
        "question_date": "2023/05/30 (Tue) 23:40",
        "haystack_session_ids": ["sharegpt_a", "answer_b"],
        "haystack_dates": ["2023/05/20 (Sat) 02:21", "2023/05/21 (Sun) 10:05"],
        "haystack_sessions": [
            [{"role": "user", "content": "Help me plan a trip."}, {"role": "assistant", "content": "Sure."}],
            [
                {"role": "user", "content": "My corgi loves the beach.", "has_answer": True},
                {"role": "assistant", "content": "Corgis are great."},
            ],
        ],
        "answer_session_ids": ["answer_b"],
    }
    entry.update(overrides)
    return entry


def _write(tmp_path, entries, name="longmemeval_oracle.json"):
    path = tmp_path / name
    path.write_text(json.dumps(entries))
    return path


def test_entry_becomes_a_conversation_with_one_question(tmp_path):
    abstain = _entry("q2_abs", answer="You did not mention a cat.", question="What is my cat called?")
    abstain["haystack_sessions"][1][0].pop("has_answer")
    counted = _entry("q3", answer=3, question_type="multi-session")
    (conv, conv_abs, conv_int), report = load_longmemeval(_write(tmp_path, [_entry(), abstain, counted]))

    assert conv.id == "q1" and conv.source == "longmemeval" and conv.speakers == ("user", "assistant")
    assert [s.id for s in conv.sessions] == ["sharegpt_a", "answer_b"]
    assert conv.sessions[0].date == datetime(2023, 5, 20, 2, 21)
    assert conv.sessions[1].date_text == "2023/05/21 (Sun) 10:05"
    assert [t.id for t in conv.turns()] == ["S1:1", "S1:2", "S2:1", "S2:2"]
    assert conv.turns()[2].speaker == "user" and conv.turns()[2].session == 2
    (q,) = conv.questions
    assert (q.evidence, q.evidence_sessions) == (("S2:1",), (2,))
    assert conv.evidence_turns(q)[0].text == "My corgi loves the beach."
    assert q.question_date == datetime(2023, 5, 30, 23, 40)
    assert q.category == "single-session-user" and q.answerable and q.answers == ("a corgi",)

    assert not conv_abs.questions[0].answerable and conv_abs.questions[0].evidence == ()
    assert conv_int.questions[0].answers == ("3",)
    assert report.stats["abstention"] == 1 and report.stats["turns"] == 12
    assert report.categories == {"single-session-user": 2, "multi-session": 1}
    # LongMemEval's counting questions have integer answers: read as text, counted, not a problem
    assert report.stats["answers_numeric"] == 1 and report.problems["answers_not_text"] == 0
    assert report.problems["questions_without_evidence"] == 0  # abstention questions need none


def test_answers_neither_text_nor_number_are_problems(tmp_path):
    entries = [
        _entry("list", answer=["a", "b"]),
        _entry("dict", answer={"n": 1}),
        _entry("bool", answer=True),
        _entry("float", answer=2.5),
        _entry("text"),
    ]
    convs, report = load_longmemeval(_write(tmp_path, entries))
    assert [c.questions[0].answers for c in convs] == [
        ('["a", "b"]',),
        ('{"n": 1}',),
        ("True",),
        ("2.5",),
        ("a corgi",),
    ]
    assert report.problems["answers_not_text"] == 3 and report.stats["answers_numeric"] == 1
    assert any(n.startswith("answers_not_text: bool: True") for n in report.notes)
    # counted over the selected questions only, like the other sizes
    _, subset = load_longmemeval(_write(tmp_path, entries), question_ids=["text", "list"])
    assert subset.stats["answers_numeric"] == 0 and subset.stats["questions"] == 2


def test_problems_are_counted(tmp_path):
    entry = _entry(
        answer_session_ids=["answer_b", "nowhere"], haystack_dates=["sometime", "2023/05/21 (Sun) 10:05"]
    )
    entry["haystack_sessions"][1][0].pop("has_answer")
    (conv,), report = load_longmemeval(_write(tmp_path, [entry]))
    assert report.problems["evidence_dangling"] == 1
    assert report.problems["session_dates_unparsed"] == 1
    assert report.problems["questions_without_evidence"] == 1
    assert conv.questions[0].evidence_sessions == (2,)


def test_question_ids_select_a_subset(tmp_path):
    path = _write(tmp_path, [_entry("a"), _entry("b"), _entry("c")])
    convs, report = load_longmemeval(path, question_ids=["c", "a", "zz"])
    assert [c.id for c in convs] == ["a", "c"]
    assert report.problems["selected_ids_not_found"] == 1


def test_load_dataset_finds_the_file_in_the_data_dir(tmp_path, monkeypatch):
    (tmp_path / "longmemeval").mkdir()
    _write(tmp_path / "longmemeval", [_entry("only")], name="longmemeval_s.json")
    monkeypatch.setenv("MEMRL_DATA_DIR", str(tmp_path))
    convs, _ = load_dataset("longmemeval", file="longmemeval_s.json")
    assert [c.id for c in convs] == ["only"]


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({"question": None}, "question 'q1': field 'question' should be a string, got null"),
        (
            {"haystack_dates": ["2023/05/20 (Sat) 02:21"]},
            "question 'q1': haystack_session_ids (2), haystack_dates (1)",
        ),
        ({"answer": None}, "question 'q1': field 'answer' is null"),
    ],
)
def test_malformed_entries_name_file_question_field(tmp_path, overrides, expected):
    path = _write(tmp_path, [_entry(**overrides)])
    with pytest.raises(DataError, match=r"longmemeval_oracle\.json") as info:
        load_longmemeval(path)
    assert expected in str(info.value)


def test_bad_role_and_missing_id(tmp_path):
    entry = _entry()
    entry["haystack_sessions"][0][1]["role"] = "system"
    with pytest.raises(DataError, match=r"haystack_sessions\[0\] \[1\]: field 'role' is 'system'"):
        load_longmemeval(_write(tmp_path, [entry]))
    entry = _entry()
    del entry["question_id"]
    with pytest.raises(DataError, match=r"\[0\]: field 'question_id' missing"):
        load_longmemeval(_write(tmp_path, [entry]))


def test_membuilder_split_is_the_published_one():
    split = MEMBUILDER_LONGMEMEVAL_SPLIT
    assert {k: len(v) for k, v in split.items()} == {"sft": 50, "rl": 50, "test": 400}
    ids = [i for part in split.values() for i in part]
    assert len(set(ids)) == 500
    assert "gpt4_e061b84g" in split["test"] and "2133c1b5_abs" in split["sft"]
    assert sum(i.endswith("_abs") for i in ids) == 30  # LongMemEval has 30 abstention questions


def test_seeded_split_is_deterministic_and_order_free():
    ids = [f"q{i:03d}" for i in range(500)]
    a = seeded_split(ids, {"sft": 50, "rl": 50, "test": None}, seed=7)
    b = seeded_split(reversed(ids), {"sft": 50, "rl": 50, "test": None}, seed=7)
    assert a == b
    assert [len(v) for v in a.values()] == [50, 50, 400]
    assert set(a["sft"]).isdisjoint(a["rl"]) and set().union(*a.values()) == set(ids)
    assert seeded_split(ids, {"sft": 50, "rest": None}, seed=8)["sft"] != a["sft"]
    with pytest.raises(ValueError, match="only 500 ids"):
        seeded_split(ids, {"a": 400, "b": 200})
