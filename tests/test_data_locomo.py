"""LoCoMo loader: exact counts on the real file, repairs of its evidence ids, errors on broken files."""

from __future__ import annotations

import json
import os
import random
from datetime import datetime
from pathlib import Path

import pytest

from memrl.data import (
    LOCOMO_UPDATE_SPLIT,
    NOT_ANSWERABLE,
    Conversation,
    load_dataset,
    load_locomo,
    locomo_observations,
    sample_conversation_path,
    select,
)
from memrl.data.locomo import parse_evidence_id
from memrl.errors import DataError


def _shared_locomo() -> Path | None:
    for base in (os.environ.get("MEMRL_DATA_DIR"), Path(__file__).parents[1] / "../shared/data"):
        if base and (Path(base) / "locomo/locomo10.json").is_file():
            return Path(base) / "locomo/locomo10.json"
    return None


LOCOMO = _shared_locomo()
needs_locomo = pytest.mark.skipif(
    LOCOMO is None, reason="LoCoMo not found: set MEMRL_DATA_DIR or put it at ../shared/data/locomo/"
)


@pytest.fixture(scope="module")
def locomo_all():
    return load_locomo(LOCOMO, include_adversarial=True)


@needs_locomo
@pytest.mark.data
def test_real_file_counts_without_category_5():
    convs, report = load_locomo(LOCOMO)
    assert len(convs) == 10
    assert sum(len(c.sessions) for c in convs) == 272
    assert sum(len(c.turns()) for c in convs) == 5882
    assert sum(len(c.questions) for c in convs) == 1540
    assert dict(report.categories) == {
        "multi-hop": 282,
        "temporal": 321,
        "open-domain": 96,
        "single-hop": 841,
    }
    assert report.stats["adversarial_skipped"] == 446
    assert all(q.answerable and q.category_id != 5 for c in convs for q in c.questions)


@needs_locomo
@pytest.mark.data
def test_real_file_counts_with_category_5(locomo_all):
    convs, report = locomo_all
    questions = [q for c in convs for q in c.questions]
    assert len(questions) == 1986
    assert report.categories["adversarial"] == 446
    adversarial = [q for q in questions if q.category_id == 5]
    assert len(adversarial) == 446
    assert all(q.answers == (NOT_ANSWERABLE,) and not q.answerable for q in adversarial)
    assert all(q.adversarial_answer for q in adversarial)


@needs_locomo
@pytest.mark.data
def test_real_file_problems_are_counted_and_repaired(locomo_all):
    convs, report = locomo_all
    assert report.problems["evidence_malformed"] == 6  # 'D8:6; D9:17', 'D', 'D:11:26', 3 space-separated
    assert report.problems["evidence_unrecoverable"] == 1  # 'D'
    assert report.problems["evidence_noncanonical"] == 1  # 'D30:05'
    assert report.problems["evidence_dangling"] == 2  # D10:19 and D4:36 name no turn
    assert report.problems["questions_without_evidence"] == 4
    assert report.problems["answers_not_text"] == 6
    assert report.problems["session_dates_without_session"] == 16  # conv-26 has 35 dates, 19 sessions
    q = {q.id: q for c in convs for q in c.questions}
    assert q["conv-26:q37"].evidence == ("D8:6", "D9:17")
    assert q["conv-26:q37"].evidence_sessions == (8, 9)
    assert "D11:26" in q["conv-43:q18"].evidence
    assert q["conv-42:q88"].evidence == ("D1:18", "D1:20")
    assert q["conv-50:q69"].evidence == ("D30:5",)
    assert q["conv-42:q58"].evidence_sessions and 10 in q["conv-42:q58"].evidence_sessions
    assert "D10:19" not in q["conv-42:q58"].evidence
    assert q["conv-26:q1"].answers == ("2022",)
    # Every evidence id left now names a real turn.
    for c in convs:
        turns = c.turn_by_id()
        assert all(e in turns for qq in c.questions for e in qq.evidence)


@needs_locomo
@pytest.mark.data
def test_real_file_dates_captions_metadata(locomo_all):
    convs, report = locomo_all
    assert report.problems["session_dates_unparsed"] == 0
    first = convs[0].sessions[0]
    assert (first.date, first.date_text) == (datetime(2023, 5, 8, 13, 56), "1:56 pm on 8 May, 2023")
    assert all(s.date is not None for c in convs for s in c.sessions)
    assert sum(1 for c in convs for t in c.turns() if t.image_caption) == 1226
    assert convs[0].speakers == ("Caroline", "Melanie")
    assert set(convs[0].metadata) == {"observation", "session_summary", "event_summary"}
    observations = [o for c in convs for o in locomo_observations(c)]
    assert len(observations) == 2541
    assert all(o.evidence for o in observations)


@needs_locomo
@pytest.mark.data
def test_memupdate_split_is_the_seed_42_shuffle(locomo_all):
    convs, _ = locomo_all
    order = list(range(10))
    random.Random(42).shuffle(order)  # what MemUpdate's random.seed(42); random.shuffle(...) does
    assert tuple(convs[i].id for i in order[:7]) == LOCOMO_UPDATE_SPLIT["train"]
    assert tuple(convs[i].id for i in order[7:]) == LOCOMO_UPDATE_SPLIT["test"]
    train, test = select(convs, LOCOMO_UPDATE_SPLIT["train"]), select(convs, LOCOMO_UPDATE_SPLIT["test"])
    assert len(train) == 7 and len(test) == 3
    assert {c.id for c in train} | {c.id for c in test} == {c.id for c in convs}


@pytest.mark.parametrize(
    ("raw", "ids", "malformed"),
    [
        ("D1:3", ("D1:3",), False),
        (" D1:3 ", ("D1:3",), False),
        ("D30:05", ("D30:5",), False),
        ("D8:6; D9:17", ("D8:6", "D9:17"), True),
        ("D9:1 D4:4 D4:6", ("D9:1", "D4:4", "D4:6"), True),
        ("D:11:26", ("D11:26",), True),
        ("D", (), True),
    ],
)
def test_parse_evidence_id(raw, ids, malformed):
    assert parse_evidence_id(raw) == (ids, malformed)


def test_sample_conversation_loads_and_is_answerable_from_its_evidence():
    convs, report = load_dataset("sample")
    assert len(convs) == 1 and report.ok
    conv = convs[0]
    assert conv.source == "sample"
    assert [len(s.turns) for s in conv.sessions] == [11, 10, 10]
    assert len({s.date for s in conv.sessions}) == 3
    assert len(conv.questions) == 10
    assert {q.category_id for q in conv.questions} == {1, 2, 3, 4}
    for q in conv.questions:
        text = " ".join(t.text for t in conv.evidence_turns(q))
        assert len(conv.evidence_turns(q)) == len(q.evidence) > 0, q.id
        if q.category_id == 4:
            assert q.answer in text, q.id
        elif q.category_id == 2:
            assert " ".join(q.answer.split()[:2]) in text, q.id  # "25 February" of "25 February 2024"
        elif q.category_id == 1:
            assert all(part.strip() in text for part in q.answer.split(",")), q.id
    assert locomo_observations(conv)


def test_round_trip_through_json():
    (conv,), _ = load_locomo(sample_conversation_path())
    again = Conversation.from_dict(json.loads(json.dumps(conv.to_dict())))
    assert again == conv
    assert again.turn_by_id()["D1:3"].image_caption


# --- small files written by the tests -------------------------------------------------------------


def _sample(**overrides):
    sample = {
        "sample_id": "conv-x",
        "conversation": {
            "speaker_a": "Ann",
            "speaker_b": "Bob",
            "session_1_date_time": "9:05 am on 1 January, 2024",
            "session_1": [
                {"speaker": "Ann", "dia_id": "D1:1", "text": "I moved to Oslo."},
                {"speaker": "Bob", "dia_id": "D1:2", "text": "Nice!", "blip_caption": "a photo of a fjord"},
            ],
            "session_2_date_time": "not a date",
            "session_2": [{"speaker": "Ann", "dia_id": "D2:1", "text": "I got a cat."}],
            "session_3_date_time": "1:00 pm on 3 January, 2024",
        },
        "qa": [
            {"question": "Where did Ann move?", "answer": "Oslo", "evidence": ["D1:1"], "category": 4},
            {
                "question": "What pet?",
                "answer": "cat",
                "evidence": ["D1:1; D2:1", "D", "D9:9"],
                "category": 1,
            },
            {"question": "When?", "answer": 2024, "evidence": [], "category": 2},
            {"question": "Did Ann move to Rome?", "adversarial_answer": "Yes", "evidence": [], "category": 5},
        ],
    }
    sample.update(overrides)
    return sample


def _write(tmp_path, data, name="locomo10.json"):
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


def test_small_file_problems_are_counted_not_fatal(tmp_path):
    (conv,), report = load_locomo(_write(tmp_path, [_sample()]))
    assert [q.id for q in conv.questions] == ["conv-x:q0", "conv-x:q1", "conv-x:q2"]
    pet = conv.questions[1]
    assert pet.evidence == ("D1:1", "D2:1") and pet.evidence_sessions == (1, 2)
    assert conv.questions[2].answers == ("2024",)
    assert report.problems["evidence_malformed"] == 2
    assert report.problems["evidence_unrecoverable"] == 1
    assert report.problems["evidence_dangling"] == 1
    assert report.problems["questions_without_evidence"] == 1
    assert report.problems["session_dates_unparsed"] == 1
    assert report.problems["session_dates_without_session"] == 1
    assert conv.sessions[1].date is None and conv.sessions[1].date_text == "not a date"
    assert conv.turns()[1].image_caption == "a photo of a fjord"
    assert "evidence_dangling: conv-x:q1: 'D9:9' is not a turn" in str(report)


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (lambda s: s["qa"][1].pop("question"), "sample 'conv-x' qa[1]: field 'question' missing"),
        (lambda s: s["qa"][0].update(category=7), "sample 'conv-x' qa[0]: field 'category' is 7"),
        (lambda s: s["qa"][0].pop("answer"), "sample 'conv-x' qa[0]: field 'answer' missing"),
        (lambda s: s["qa"][0].update(evidence="D1:1"), "qa[0]: field 'evidence' should be a list"),
        (lambda s: s["conversation"].pop("speaker_b"), "sample 'conv-x': field 'speaker_b' missing"),
        (
            lambda s: s["conversation"]["session_1"][1].pop("dia_id"),
            "sample 'conv-x' conversation session_1[1]: field 'dia_id' missing",
        ),
        (lambda s: s.pop("sample_id"), "sample [0]: field 'sample_id' missing"),
    ],
)
def test_malformed_file_errors_name_file_record_field(tmp_path, mutate, expected):
    sample = _sample()
    mutate(sample)
    path = _write(tmp_path, [sample])
    with pytest.raises(DataError) as info:
        load_locomo(path)
    assert str(info.value).startswith(str(path))
    assert expected in str(info.value)


def test_unreadable_files(tmp_path):
    with pytest.raises(DataError, match="file not found"):
        load_locomo(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text('[{"sample_id": ')
    with pytest.raises(DataError, match=r"bad.json: not valid JSON \(line 1"):
        load_locomo(bad)
    with pytest.raises(DataError, match="the top level should be a list"):
        load_locomo(_write(tmp_path, {"sample_id": "x"}))
    with pytest.raises(DataError, match="duplicate sample_id 'conv-x'"):
        load_locomo(_write(tmp_path, [_sample(), _sample()]))


def test_the_protocol_split_is_the_seeded_cut_of_the_training_conversations():
    """fit + validation = MemUpdate's train conversations, disjoint, as seeded_split (seed 0) cuts them;
    ``--split validation`` and ``--split fit`` resolve through SPLITS."""
    from memrl.data.splits import LOCOMO_PROTOCOL_SPLIT, SPLITS, seeded_split

    fit, val = LOCOMO_PROTOCOL_SPLIT["fit"], LOCOMO_PROTOCOL_SPLIT["validation"]
    assert seeded_split(LOCOMO_UPDATE_SPLIT["train"], {"validation": 2, "fit": None}, seed=0) == {
        "validation": val, "fit": fit,
    }  # fmt: skip
    assert not set(fit) & set(val) and set(fit) | set(val) == set(LOCOMO_UPDATE_SPLIT["train"])
    assert LOCOMO_PROTOCOL_SPLIT["test"] == LOCOMO_UPDATE_SPLIT["test"]
    assert SPLITS["locomo"]["validation"] == val and SPLITS["locomo"]["train"] == LOCOMO_UPDATE_SPLIT["train"]
