"""PerLTQA loader on a small QA file + memory file in the published English v2 format."""

from __future__ import annotations

import json
from datetime import datetime

import pytest

from memrl.data import load_dataset, load_perltqa
from memrl.errors import DataError


def _memory():
    return {
        "Wang Xiaoming": {
            "profile": {"Protagonist": "Wang Xiaoming", "Gender": "male", "Age": 28},
            "profile_description": "A software engineer.",
            "social_relationship": {
                "1_0": {
                    "Supporting Characters": "Wang Xiaohong",
                    "Description": "Sister.",
                    "Relationship": "sister",
                }
            },
            "events": {
                "1_0_0": {
                    "content": "They visited the Grand Canyon.",
                    "summary": "Trip",
                    "Creation Time": "May 12, 2022",
                },
                "1_0_1": {
                    "content": "An exhibition.",
                    "summary": "Expo",
                    "Creation Time": "October 15, 2022",
                },
                "1_0_2": {
                    "content": "No dialogue about this one.",
                    "summary": "Case",
                    "Creation Time": "2012",
                },
            },
            "dialogues": {
                "1_0_1#1": {
                    "events": "1_0_1",
                    "contents": {
                        "2022-10-15 09:00": ["Wang Xiaohong: Shall we see the expo?", "Wang Xiaoming: Yes!"]
                    },
                },
                "1_0_0#0": {
                    "events": "1_0_0",
                    "contents": {
                        "2022-05-12 10:00": [
                            "Wang Xiaoming: The canyon is huge.",
                            "Wang Xiaohong: We should camp at 10:30 tonight.",
                        ]
                    },
                },
            },
        },
        "Zhang Xiaohong": {
            "profile": {"Protagonist": "Zhang Xiaohong", "Gender": "female"},
            "profile_description": "A chemical engineer.",
            "social_relationship": {},
            "events": {},
            "dialogues": {},
        },
    }


def _qa():
    item = {"Memory Anchors": [{"Master&#39;s Degree": [-1, -1]}, {"canyon": [44, 45]}]}
    return [
        {
            "Zhang Xiaohong": {
                "profile": [
                    {
                        "Question": "What is her gender?",
                        "Answer": "female",
                        "Reference Memory": "Gender",
                        **item,
                    }
                ]
            }
        },
        {
            "Wang Xiaoming": {
                "profile": [{"Question": "How old is he?", "Answer": 28, "Reference Memory": "Age"}],
                "social_relationship": [
                    {
                        "1_0": [
                            {
                                "Question": "Who is his sister?",
                                "Answer": "Wang Xiaohong",
                                "Reference Memory": "['1_0']",
                            }
                        ]
                    }
                ],
                "events": [
                    {
                        "1_0_0": [
                            {
                                "Question": "Where did they go?",
                                "Answer": "The Grand Canyon.",
                                "Reference Memory": "['1_0_0']",
                                **item,
                            },
                            {"Question": "Bad ref?", "Answer": "x", "Reference Memory": "['9_9_9']"},
                        ]
                    }
                ],
                "dialogues": [
                    {
                        "1_0_0#0": [
                            {
                                "Question": "When will they camp?",
                                "Answer": "At 10:30.",
                                "Reference Memory": "['1_0_0#0']",
                            },
                            {"Question": "It&#39;s big?", "Answer": "Yes", "Reference Memory": "[1_0_0#0"},
                        ]
                    }
                ],
            }
        },
        {"Nobody Here": {"profile": []}},
    ]


@pytest.fixture
def files(tmp_path):
    qa, mem = tmp_path / "perltqa_en_v2.json", tmp_path / "perltmem_en_v2.json"
    qa.write_text(json.dumps(_qa()))
    mem.write_text(json.dumps(_memory()))
    return qa, mem


def test_characters_are_matched_by_name_and_dialogues_ordered_by_time(files):
    convs, report = load_perltqa(*files)
    assert [c.id for c in convs] == ["Wang Xiaoming", "Zhang Xiaohong"]  # memory-file order
    wang = convs[0]
    assert wang.source == "perltqa"
    assert [s.id for s in wang.sessions] == ["1_0_0#0", "1_0_1#1"]  # May before October
    assert wang.sessions[0].date == datetime(2022, 5, 12, 10, 0)
    first = wang.turns()[1]
    assert (first.id, first.speaker, first.text) == (
        "S1:2",
        "Wang Xiaohong",
        "We should camp at 10:30 tonight.",
    )
    assert wang.speakers == ("Wang Xiaoming", "Wang Xiaohong")
    assert wang.metadata["profile"]["Age"] == 28 and wang.metadata["events"]["1_0_0"]["summary"] == "Trip"
    assert report.problems["qa_characters_without_memory"] == 1
    assert report.problems["events_without_dialogue"] == 1  # 1_0_2
    assert report.stats["questions"] == 7


def test_questions_evidence_and_sessions(files):
    (wang, zhang), report = load_perltqa(*files)
    q = {x.id: x for x in wang.questions}
    age = q["Wang Xiaoming:profile:0"]
    assert (age.category, age.answers, age.evidence, age.evidence_sessions) == (
        "profile",
        ("28",),
        ("profile:Age",),
        (),
    )
    assert q["Wang Xiaoming:social_relationship:0"].evidence == ("1_0",)
    trip = q["Wang Xiaoming:events:0"]
    assert trip.evidence == ("1_0_0",) and trip.evidence_sessions == (1,)  # the dialogue about that event
    camp = q["Wang Xiaoming:dialogues:0"]
    assert camp.evidence == ("1_0_0#0",) and camp.evidence_sessions == (1,)
    assert q["Wang Xiaoming:events:1"].evidence == ()
    assert report.problems["evidence_dangling"] == 1  # 9_9_9
    assert report.problems["references_unparsed"] == 1  # "[1_0_0#0" is not a Python literal...
    assert q["Wang Xiaoming:dialogues:1"].evidence == ("1_0_0#0",)  # ...but the id is still recovered
    assert q["Wang Xiaoming:dialogues:1"].question == "It's big?"  # HTML entity unescaped
    assert wang.metadata["anchors"]["Wang Xiaoming:events:0"] == ["Master's Degree", "canyon"]
    assert zhang.questions[0].evidence == ("profile:Gender",)
    assert report.categories == {"profile": 2, "social_relationship": 1, "events": 2, "dialogues": 2}


def test_names_with_html_entities_match(tmp_path):
    mem = {"O&#39;Brien Li": {"profile": {"Gender": "male"}, "events": {}, "dialogues": {}}}
    qa = [
        {
            "O'Brien  Li": {
                "profile": [{"Question": "Gender?", "Answer": "male", "Reference Memory": "Gender"}]
            }
        }
    ]
    (tmp_path / "qa.json").write_text(json.dumps(qa))
    (tmp_path / "mem.json").write_text(json.dumps(mem))
    (conv,), report = load_perltqa(tmp_path / "qa.json", tmp_path / "mem.json")
    assert (
        conv.id == "O'Brien Li" and len(conv.questions) == 1 and report.problems["characters_without_qa"] == 0
    )


def test_load_dataset_with_a_folder(files):
    convs, _ = load_dataset("perltqa", files[0].parent)
    assert len(convs) == 2


def test_malformed_memory_names_file_character_dialogue_field(files):
    qa, mem = files
    data = _memory()
    del data["Wang Xiaoming"]["dialogues"]["1_0_0#0"]["contents"]
    mem.write_text(json.dumps(data))
    with pytest.raises(DataError) as info:
        load_perltqa(qa, mem)
    message = str(info.value)
    assert message.startswith(str(mem))
    assert "character 'Wang Xiaoming' dialogues '1_0_0#0': field 'contents' missing" in message


def test_malformed_qa_names_file_character_item_field(files):
    qa, mem = files
    data = _qa()
    del data[1]["Wang Xiaoming"]["events"][0]["1_0_0"][1]["Question"]
    qa.write_text(json.dumps(data))
    with pytest.raises(
        DataError,
        match=r"perltqa_en_v2\.json: character 'Wang Xiaoming' events '1_0_0' \[1\]: field 'Question' missing",
    ):
        load_perltqa(qa, mem)


def test_profile_item_without_question_is_an_error(files):
    qa, mem = files
    data = _qa()
    del data[0]["Zhang Xiaohong"]["profile"][0]["Question"]
    qa.write_text(json.dumps(data))
    with pytest.raises(
        DataError, match=r"character 'Zhang Xiaohong' profile \[0\]: field 'Question' missing"
    ):
        load_perltqa(qa, mem)


def test_memory_file_as_a_list_of_banks(files):
    qa, mem = files
    mem.write_text(json.dumps(list(_memory().values())))  # banks named by profile.Protagonist
    convs, report = load_perltqa(qa, mem)
    assert [c.id for c in convs] == ["Wang Xiaoming", "Zhang Xiaohong"]
    assert report.stats["questions"] == 7
