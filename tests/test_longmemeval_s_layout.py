"""LongMemEval in the ``longmemeval_s.json`` layout: each question's evidence sessions hidden among distractor
sessions (their own ids and dates, no ``has_answer``), only some evidence-session turns marked
``has_answer``. Checks the loader on such a file, then ``memrl eval retrieval`` on it (in-process, hashing
embedder) with recall, NDCG and all@k at turn and session level that follow from how the file is built.
"""

from __future__ import annotations

import json
from datetime import datetime

import pytest

from memrl.cli.main import main
from memrl.data import load_longmemeval

# Distractor sessions (as ShareGPT / UltraChat chats in the real file): no word of any question below.
DISTRACTORS = [
    (
        "sharegpt_a1",
        "Can you suggest a recipe for lentil soup?",
        "Simmer lentils with onion, carrot and cumin.",
    ),
    ("ultrachat_b2", "How do I fix a flat bicycle tire?", "Remove the wheel, patch the puncture, reinflate."),
    (
        "sharegpt_c3",
        "Explain photosynthesis briefly.",
        "Plants turn light, water and carbon dioxide into sugar.",
    ),
    ("ultrachat_d4", "Recommend some jazz albums.", "Kind of Blue, A Love Supreme and Mingus Ah Um."),
    (
        "sharegpt_e5",
        "Suggest stretches for runners.",
        "Hamstring, calf and hip flexor stretches, thirty seconds.",
    ),
    (
        "ultrachat_f6",
        "Draft an email to my landlord about the heating.",
        "Dear landlord, the heating stopped.",
    ),
    ("sharegpt_g7", "How long should an egg boil?", "About nine minutes for a hard-boiled egg."),
    ("ultrachat_h8", "Translate good morning into Spanish.", "Buenos dias."),
]

# question id -> (type, question, answer, evidence sessions as (id, position, turns)); a turn is
# (role, text, has_answer). Positions are 0-based places in the final haystack (inserted in order).
QUESTIONS = {
    # one evidence turn holding the question's rare words: BM25 ranks it first
    "q_single": ("single-session-user", "What is my sourdough starter called?", "Clint", [
        ("answer_s1", 3, [("user", "My sourdough starter is called Clint.", True),
                          ("assistant", "Lovely, keep feeding it daily.", False),
                          ("user", "Will do, thanks.", False)]),
    ]),
    # integer answer; two evidence turns in two sessions, the only turns with "kayak": ranks 1 and 2
    "q_count": ("multi-session", "How many times did I buy a kayak?", 2, [
        ("answer_c1", 1, [("user", "I bought a red kayak at the lake shop.", True),
                          ("assistant", "Enjoy the paddling!", False)]),
        ("answer_c2", 6, [("user", "Thanks for the recipe.", False),
                          ("user", "Also, I bought another kayak for my sister.", True),
                          ("assistant", "What a generous gift.", False)]),
    ]),
    # the rare words sit in the evidence session's assistant turn, not in the has_answer turn:
    # the first hit is in the right session but is not the evidence turn
    "q_session": ("temporal-reasoning", "Which country had the glacier hikes?", "Iceland", [
        ("answer_g1", 5, [("user", "We spent last week in Iceland.", True),
                          ("assistant", "Its glacier hikes are unforgettable.", False)]),
    ]),
    # abstention: asks about something never said; its answer session is related (as in the real file)
    "q_pet_abs": ("single-session-user", "What is my iguana called?", "You never mentioned an iguana.", [
        ("answer_p1", 2, [("user", "I am thinking about adopting a lizard.", True),
                          ("assistant", "Lizards need warm tanks.", False)]),
    ]),
}  # fmt: skip


def _record(qid: str, qtype: str, question: str, answer: str | int, evidence: list) -> dict:
    """One record of ``longmemeval_s.json``: the distractors with the evidence sessions put in place."""
    sessions = [(sid, [{"role": "user", "content": u}, {"role": "assistant", "content": a}])
                for sid, u, a in DISTRACTORS]  # fmt: skip
    for sid, position, turns in evidence:
        sessions.insert(position, (sid, [{"role": r, "content": t, "has_answer": h} for r, t, h in turns]))
    return {
        "question_id": qid,
        "question_type": qtype,
        "question": question,
        "answer": answer,
        "question_date": "2023/06/30 (Fri) 20:00",
        "haystack_session_ids": [sid for sid, _ in sessions],
        # one session a day from 1 June 2023, in LongMemEval's date format
        "haystack_dates": [
            datetime(2023, 6, day, 10 + day % 10, 30).strftime("%Y/%m/%d (%a) %H:%M")
            for day in range(1, len(sessions) + 1)
        ],  # fmt: skip
        "haystack_sessions": [turns for _, turns in sessions],
        "answer_session_ids": [sid for sid, _, _ in evidence],
    }


@pytest.fixture
def s_file(tmp_path):
    path = tmp_path / "longmemeval_s.json"
    path.write_text(json.dumps([_record(qid, *spec) for qid, spec in QUESTIONS.items()]))
    return path


def test_loader_reads_the_s_layout(s_file):
    convs, report = load_longmemeval(s_file)
    by_id = {c.id: c for c in convs}
    assert list(by_id) == list(QUESTIONS)
    assert [len(c.sessions) for c in convs] == [9, 10, 9, 9]  # 8 distractors + the evidence sessions
    assert report.stats["sessions"] == 37 and report.stats["turns"] == 2 * 32 + 3 + 2 + 3 + 2 + 2
    assert report.stats["abstention"] == 1 and report.stats["answers_numeric"] == 1
    assert report.ok, report.notes  # distractor turns without has_answer are not problems

    single = by_id["q_single"]
    (q,) = single.questions
    assert single.sessions[3].id == "answer_s1" and single.sessions[0].id == "sharegpt_a1"
    assert single.sessions[3].date_text == "2023/06/04 (Sun) 14:30"
    assert single.sessions[3].date == datetime(2023, 6, 4, 14, 30)
    assert (q.evidence, q.evidence_sessions) == (("S4:1",), (4,))
    assert single.evidence_turns(q)[0].text == "My sourdough starter is called Clint."

    count = by_id["q_count"].questions[0]
    assert count.answers == ("2",) and count.answerable
    # has_answer marks one turn of each evidence session; answer_session_ids gives the sessions
    assert (count.evidence, count.evidence_sessions) == (("S2:1", "S7:2"), (2, 7))
    assert by_id["q_session"].questions[0].evidence == ("S6:1",)

    abstain = by_id["q_pet_abs"].questions[0]
    assert not abstain.answerable and abstain.evidence == ("S3:1",) and abstain.evidence_sessions == (3,)


def test_retrieval_on_the_s_layout(s_file, tmp_path, capsys):
    out = tmp_path / "out"
    # one indexed view per turn (no neighbour context), so BM25's candidates are the turns holding a word
    argv = ["eval", "retrieval", "--dataset", "longmemeval", "--data-path", str(s_file), "--embedder", "hashing",
            "--modes", "dense,bm25,hybrid", "--k", "1,5", "--context-before", "0", "--context-after", "0",
            "--views", "turn", "--dense-views", "turn", "--bootstrap", "20", "--output-dir", str(out), "--json"]  # fmt: skip
    assert main(argv) == 0
    last = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert (
        last["dataset"] == "longmemeval" and last["n_questions"] == 3
    )  # the abstention question is left out

    rows = {r["question_id"]: r for r in map(json.loads, (out / "questions.jsonl").read_text().splitlines())}
    assert set(rows) == {"q_single", "q_count", "q_session"}

    def figures(qid: str, k: str) -> dict:
        return {level: rows[qid][level]["bm25"][k] for level in
                ("recall", "recall_all", "ndcg", "session_recall", "session_recall_all", "session_ndcg")}  # fmt: skip

    assert rows["q_single"]["retrieved"]["bm25"][0] == "S4:1"
    assert figures("q_single", "1") == dict.fromkeys(figures("q_single", "1"), 1.0)
    # the two kayak turns at ranks 1 and 2, in either order: half found at k=1, all at k=5
    assert set(rows["q_count"]["retrieved"]["bm25"][:2]) == {"S2:1", "S7:2"}
    assert figures("q_count", "1") == {"recall": 0.5, "recall_all": 0.0, "ndcg": 1.0,
                                       "session_recall": 0.5, "session_recall_all": 0.0, "session_ndcg": 1.0}  # fmt: skip
    assert figures("q_count", "5") == dict.fromkeys(figures("q_count", "5"), 1.0)
    # the glacier turn is the evidence session's assistant turn: the right session, not the evidence turn
    assert rows["q_session"]["retrieved"]["bm25"][0] == "S6:2"
    assert figures("q_session", "1") == {"recall": 0.0, "recall_all": 0.0, "ndcg": 0.0,
                                         "session_recall": 1.0, "session_recall_all": 1.0, "session_ndcg": 1.0}  # fmt: skip

    # pooled over the three questions, as the JSON line and the report give them
    bm25 = last["modes"]["bm25"]
    assert bm25["recall_at_k"]["1"] == pytest.approx((1 + 0.5 + 0) / 3)
    assert bm25["ndcg_at_k"]["1"] == pytest.approx(2 / 3) and bm25["session_ndcg_at_k"]["1"] == 1.0
    assert bm25["recall_all_at_k"]["1"] == pytest.approx(1 / 3) and bm25["session_recall_all_at_k"][
        "1"
    ] == pytest.approx(2 / 3)
    for mode in ("dense", "hybrid"):  # the hashing embedder ranks by chance: only the ranges are known
        for key in ("recall_at_k", "ndcg_at_k", "session_recall_at_k", "session_ndcg_at_k"):
            assert all(0 <= v <= 1 for v in last["modes"][mode][key].values())
    md = (out / "report.md").read_text()
    assert "## bm25: NDCG@k and all@k" in md and "| overall | turn | 3 | 0.667 |" in md


def test_session_figures_rank_distinct_sessions_past_the_first_k_turns(tmp_path, capsys):
    # three turns of one evidence session hold both rare words, the other evidence session's turn one:
    # the first 3 turns all lie in session A, the 4th (read past max_k = 3) in session B
    deep = ("multi-session", "Who teaches my violin lessons?", "Mrs Park", [
        ("answer_v1", 2, [("user", "My violin lessons are with Mrs Park.", True),
                          ("assistant", "Violin lessons with Mrs Park sound fun.", False),
                          ("user", "The violin lessons cost a lot.", False)]),
        ("answer_v2", 6, [("user", "I lent my violin to a friend.", True),
                          ("assistant", "Kind of you.", False)]),
    ])  # fmt: skip
    path = tmp_path / "longmemeval_s.json"
    path.write_text(json.dumps([_record("q_deep", *deep)]))
    out = tmp_path / "out"
    argv = ["eval", "retrieval", "--dataset", "longmemeval", "--data-path", str(path), "--embedder", "hashing",
            "--modes", "bm25", "--k", "1,3", "--context-before", "0", "--context-after", "0", "--views", "turn",
            "--dense-views", "turn", "--bootstrap", "20", "--output-dir", str(out), "--json"]  # fmt: skip
    assert main(argv) == 0
    capsys.readouterr()
    (row,) = map(json.loads, (out / "questions.jsonl").read_text().splitlines())
    assert sorted(row["retrieved"]["bm25"]) == ["S3:1", "S3:2", "S3:3"]  # max_k = 3 turns, all of session 3
    assert row["retrieved_sessions"]["bm25"][:2] == [3, 7]
    # the sessions of the first 3 turns hold one of the two evidence sessions ...
    assert row["session_recall"]["bm25"]["3"] == 0.5 and row["recall"]["bm25"]["3"] == 0.5
    # ... the first 3 distinct sessions (LongMemEval's turn-to-session ranking) hold both, at ranks 1 and 2
    assert row["session_recall_all"]["bm25"] == {"1": 0.0, "3": 1.0}
    assert row["session_ndcg"]["bm25"] == {"1": 1.0, "3": 1.0}
