"""The shared data model: helpers, serialisation, reports."""

from __future__ import annotations

import json
from datetime import datetime

import pytest

from memrl.data import Conversation, LoadReport, LongDocQuestion, Question, Session, Turn, load_dataset
from memrl.errors import DataError


def _conv():
    s1 = Session(
        1, datetime(2024, 1, 1, 9, 0), "9:00 am on 1 January, 2024", (Turn("D1:1", "Ann", "Hi", 1, 1),)
    )
    s2 = Session(
        2,
        None,
        None,
        (Turn("D2:1", "Bob", "Look", 2, 1, image_caption="a cat"), Turn("D2:2", "Ann", "Cute", 2, 2)),
    )
    q = Question("c:q0", "What did Bob share?", ("a cat photo",), "single-hop", 4, ("D2:1",), (2,))
    return Conversation("c", ("Ann", "Bob"), (s1, s2), (q,), "test", {"note": {"nested": [1, 2]}})


def test_conversation_helpers():
    conv = _conv()
    assert [t.id for t in conv.turns()] == ["D1:1", "D2:1", "D2:2"]
    assert conv.turn_by_id()["D2:2"].text == "Cute"
    assert conv.turn_by_id() is conv.turn_by_id()  # built once
    assert conv.session(2).turns[0].render() == "Bob: Look [shares a cat]"
    assert conv.session(1).turns[0].render(speaker=False) == "Hi"
    assert conv.evidence_turns(conv.questions[0])[0].id == "D2:1"
    assert conv.questions[0].answer == "a cat photo"
    with pytest.raises(KeyError, match="no session 3"):
        conv.session(3)
    assert {conv: 1}[conv] == 1  # hashable although metadata is a dict


def test_json_round_trips():
    conv = _conv()
    data = json.loads(json.dumps(conv.to_dict()))
    assert data["sessions"][0]["date"] == "2024-01-01T09:00:00"
    assert Conversation.from_dict(data) == conv
    doc = LongDocQuestion("1", "Q?", ("a", "b"), "Document 1:\nT\ntext", 1, ("T",))
    assert LongDocQuestion.from_dict(json.loads(json.dumps(doc.to_dict()))) == doc


def test_load_report_summary():
    report = LoadReport(source="f.json", max_notes=1)
    report.stats["questions"] = 1540
    report.problem("evidence_dangling", "conv-1:q2: 'D9:9'")
    report.problem("evidence_dangling", "conv-1:q3: 'D9:8'")
    assert report.problems["evidence_dangling"] == 2 and not report.ok
    assert report.notes == ["evidence_dangling: conv-1:q2: 'D9:9'"]  # capped at max_notes
    text = str(report)
    assert "questions: 1,540" in text and "evidence_dangling 2" in text
    assert json.loads(json.dumps(report.to_dict()))["problems"] == {"evidence_dangling": 2}


def test_load_dataset_rejects_unknown_names():
    with pytest.raises(DataError, match="unknown data set 'squad'; choose from locomo"):
        load_dataset("squad")
