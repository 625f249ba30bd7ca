"""Retrieval evaluation: recall on a tiny conversation where the answer is known, summaries, the report
files, the CLI's last JSON line, query analysis, the search features, and (if present) real LoCoMo data."""

from __future__ import annotations

import argparse
import json
from datetime import datetime

import pytest

from memrl.agents.raw import RawConfig
from memrl.cli.eval_cmd import config_from_args, register
from memrl.data.types import Conversation, Question, Session, Turn
from memrl.errors import ConfigError
from memrl.eval.retrieval import evaluate_retrieval, load_conversations
from memrl.eval.retrieval.ablation import ablation_markdown
from memrl.eval.retrieval.config import RetrievalConfig
from memrl.eval.retrieval.report import headline, summarize
from memrl.memory.analysis.query import asks_when, date_matches, mentioned_dates, mentions_time, named_in
from memrl.memory.embedders.providers import HashingEmbedder
from memrl.memory.facade.memory import AsyncMemory
from memrl.memory.search.hybrid import PLAIN
from memrl.memory.store.base import NewItem

FAST = {"embedder": "hashing", "bootstrap": 50}


def _conv() -> Conversation:
    def turn(sid: int, i: int, who: str, text: str) -> Turn:
        return Turn(f"D{sid}:{i}", who, text, sid, i)

    s1 = Session(1, datetime(2023, 5, 8), "8 May, 2023", (
        turn(1, 1, "Ann", "Hi Bob, long time!"),
        turn(1, 2, "Bob", "I adopted a greyhound named Zephyr yesterday."),
        turn(1, 3, "Ann", "Lovely. I started learning the cello."),
    ))  # fmt: skip
    s2 = Session(2, datetime(2023, 10, 2), "2 October, 2023", (
        turn(2, 1, "Bob", "Zephyr won a frisbee contest last week."),
        turn(2, 2, "Ann", "My cello teacher moved to Porto."),
        turn(2, 3, "Bob", "Porto is beautiful."),
    ))  # fmt: skip
    qs = (
        Question("t:q0", "What is the name of Bob's greyhound?", ("Zephyr",), "single-hop", 4, ("D1:2",), (1,)),
        Question("t:q1", "Where did Ann's cello teacher move?", ("Porto",), "single-hop", 4, ("D2:2",), (2,)),
        Question("t:q2", "What did Zephyr and the cello have in common?", ("x",), "multi-hop", 1,
                 ("D1:2", "D1:3"), (1,)),
        Question("t:q3", "Zzz qqq?", ("x",), "open-domain", 3, ("D2:3",), (2,)),
        Question("t:q4", "Adversarial about the frisbee?", ("x",), "adversarial", 5, ("D2:1",), (2,)),
        Question("t:q5", "Nothing to find", ("x",), "temporal", 2, (), ()),
    )  # fmt: skip
    return Conversation("tiny", ("Ann", "Bob"), (s1, s2), qs, "sample")


def test_recall_on_a_known_conversation(tmp_path):
    # one item per turn, so BM25's candidates are exactly the turns holding a query word
    raw = RawConfig(context_before=0, context_after=0, views=("turn",), dense_views=("turn",))
    cfg = RetrievalConfig(modes=("bm25", "hybrid"), k=(1, 2, 5), output_dir=str(tmp_path), raw=raw, **FAST)
    report = evaluate_retrieval([_conv()], cfg, progress=False)
    rows = {r["question_id"]: r for r in report["rows"]}
    assert set(rows) == {"t:q0", "t:q1", "t:q2", "t:q3", "t:q5"}  # category 5 only when asked for
    for mode in ("bm25", "hybrid"):
        assert rows["t:q0"]["retrieved"][mode][0] == "D1:2"
        assert rows["t:q0"]["recall"][mode]["1"] == 1.0
        assert rows["t:q1"]["recall"][mode]["1"] == 1.0
        assert rows["t:q2"]["recall"][mode]["5"] == 1.0  # both evidence turns within 5
        assert rows["t:q5"]["recall"][mode]["5"] is None  # no evidence: no recall, left out of the means
        assert len(rows["t:q0"]["retrieved"][mode]) == len(set(rows["t:q0"]["retrieved"][mode]))
    assert rows["t:q3"]["retrieved"]["bm25"] == [] and rows["t:q3"]["recall"]["bm25"]["5"] == 0.0
    # dense search ranks all 6 turns; any 5 of them include one of session 2's three turns
    assert (
        len(rows["t:q3"]["retrieved"]["hybrid"]) >= 5 and rows["t:q3"]["session_recall"]["hybrid"]["5"] == 1.0
    )
    assert rows["t:q3"]["session_recall"]["bm25"]["5"] == 0.0
    # NDCG@k and all@k, turn and session level (LongMemEval's ndcg_any and recall_all)
    for mode in ("bm25", "hybrid"):
        assert rows["t:q0"]["ndcg"][mode]["1"] == 1.0 and rows["t:q0"]["session_ndcg"][mode]["1"] == 1.0
        assert (
            rows["t:q2"]["recall_all"][mode]["5"] == 1.0
            and rows["t:q2"]["session_recall_all"][mode]["5"] == 1.0
        )
        assert rows["t:q5"]["ndcg"][mode]["5"] is None and rows["t:q5"]["recall_all"][mode]["5"] is None
    assert rows["t:q3"]["ndcg"]["bm25"]["5"] == 0.0 and rows["t:q3"]["session_ndcg"]["bm25"]["5"] == 0.0
    assert rows["t:q3"]["recall_all"]["bm25"]["5"] == 0.0
    # t:q2 cites two turns of session 1: all found at k=1 only if the first hit holds both (it cannot)
    assert rows["t:q2"]["recall_all"]["bm25"]["1"] == 0.0
    ndcg = [rows[q]["ndcg"]["hybrid"]["5"] for q in ("t:q0", "t:q1", "t:q2", "t:q3")]
    assert report["modes"]["hybrid"]["ndcg_at_k"]["5"] == pytest.approx(sum(ndcg) / 4)
    # pooled figures are means over questions with evidence, categories 1-4
    per_q = [rows[q]["recall"]["hybrid"]["5"] for q in ("t:q0", "t:q1", "t:q2", "t:q3")]
    assert report["modes"]["hybrid"]["recall_at_k"]["5"] == pytest.approx(sum(per_q) / 4)
    assert report["n_questions"] == 5 and report["n_turns"] == 6
    default = evaluate_retrieval([_conv()], RetrievalConfig(modes=("bm25",), **FAST), progress=False)
    assert default["rows"][0]["retrieved"]["bm25"][0] == "D1:2"  # with context views, still one id per turn
    with_adv = evaluate_retrieval(
        [_conv()], RetrievalConfig(include_adversarial=True, **FAST), progress=False
    )
    assert with_adv["n_questions_all"] == 6 and "adversarial" in with_adv["modes"]["hybrid"]["by_category"]
    assert "all" in with_adv["modes"]["hybrid"]["by_category"]


def test_summarize_hand_made_rows():
    def row(cat: str, cid: int, r10: float | None) -> dict:
        return {"category": cat, "category_id": cid, "recall": {"bm25": {"10": r10}},
                "session_recall": {"bm25": {"10": r10}}}  # fmt: skip

    rows = [
        row("temporal", 2, 1.0),
        row("temporal", 2, 0.0),
        row("single-hop", 4, 0.5),
        row("single-hop", 4, None),
    ]
    s = summarize(rows, RetrievalConfig(modes=("bm25",), k=(10,), bootstrap=20))
    assert s["recall_at_10"] == pytest.approx(0.5) and s["headline_mode"] == "bm25"
    cats = s["modes"]["bm25"]["by_category"]
    assert (
        cats["temporal"]["recall_at_k"]["10"]["mean"] == 0.5
        and cats["temporal"]["recall_at_k"]["10"]["n"] == 2
    )
    assert cats["single-hop"]["recall_at_k"]["10"]["n"] == 1 and cats["multi-hop"]["n"] == 0
    # rows written before NDCG existed have none: the figure is missing (n 0), not 0
    assert cats["temporal"]["ndcg_at_k"]["10"] == {"n": 0, "mean": None, "ci_low": None, "ci_high": None}
    assert s["modes"]["bm25"]["session_ndcg_at_k"] == {"10": None}


def test_report_files_are_well_formed(tmp_path):
    evaluate_retrieval([_conv()], RetrievalConfig(output_dir=str(tmp_path), **FAST), progress=False)
    lines = (tmp_path / "questions.jsonl").read_text().splitlines()
    assert len(lines) == 5
    first = json.loads(lines[0])
    assert {"question_id", "category", "evidence", "retrieved", "recall", "session_recall"} <= set(first)
    assert {"ndcg", "session_ndcg", "recall_all", "session_recall_all"} <= set(first)
    assert set(first["retrieved"]) == {"dense", "bm25", "hybrid"}
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["recall_at_10"] == summary["modes"]["hybrid"]["recall_at_k"]["10"]
    assert {"wall_time_s", "embed_time_s", "n_questions", "config"} <= set(summary)
    md = (tmp_path / "report.md").read_text()
    assert md.count("## ") == 9 and "| overall |" in md and "recall@10" in md
    assert "## hybrid: NDCG@k and all@k" in md and "| overall | session |" in md and "NDCG@10 |" in md
    assert (
        summary["modes"]["hybrid"]["ndcg_at_k"]["10"]
        == summary["modes"]["hybrid"]["by_category"]["overall"]["ndcg_at_k"]["10"]["mean"]
    )
    assert (tmp_path / "recall.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_config_validation():
    with pytest.raises(ConfigError):
        RetrievalConfig(modes=("fuzzy",))
    with pytest.raises(ConfigError):
        RetrievalConfig(k=(0,))


def _cli(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="memrl")
    register(parser.add_subparsers(dest="command"))
    return parser.parse_args(argv)


def test_cli_flags_map_onto_the_config():
    args = _cli(["eval", "retrieval", "--modes", "bm25,hybrid", "--k", "1,5", "10", "--conv-id", "a", "b",
                 "--no-strip-speaker", "--context-before", "1", "--views", "turn", "--dense-views", "turn"])  # fmt: skip
    cfg = config_from_args(args)
    assert cfg.modes == ("bm25", "hybrid") and cfg.k == (1, 5, 10) and cfg.conv_id == ("a", "b")
    assert cfg.strip_speaker is False and cfg.raw.context_before == 1 and cfg.raw.views == ("turn",)
    assert config_from_args(_cli(["eval", "retrieval"])) == RetrievalConfig()


def test_cli_help_renders(capsys):
    with pytest.raises(SystemExit):
        _cli(["eval", "retrieval", "--help"])
    assert "--context-before" in capsys.readouterr().out


def test_cli_last_line_is_json(capsys):
    args = _cli(["eval", "retrieval", "--dataset", "sample", "--embedder", "hashing", "--bootstrap", "20"])
    assert args.func(args) == 0
    last = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert {"recall_at_10", "n_questions", "wall_time_s", "embed_time_s", "modes"} <= set(last)
    for mode in ("dense", "bm25", "hybrid"):
        assert {"1", "5", "10", "20"} == set(last["modes"][mode]["recall_at_k"])
        assert {"multi-hop", "temporal", "single-hop", "overall"} <= set(last["modes"][mode]["by_category"])
    assert last["recall_at_10"] == last["modes"]["hybrid"]["recall_at_k"]["10"]
    for key in ("ndcg_at_k", "session_ndcg_at_k", "recall_all_at_k", "session_recall_all_at_k"):
        assert set(last["modes"]["hybrid"][key]) == {"1", "5", "10", "20"}
        assert all(0 <= v <= 1 for v in last["modes"]["hybrid"][key].values())


def test_ablation_table_renders():
    rows = [{"step": "baseline", "hybrid": {"overall": 0.6, "temporal": 0.7}, "bm25": {"overall": 0.5}},
            {"step": "+ idea", "hybrid": {"overall": 0.65, "temporal": 0.8}, "bm25": {"overall": 0.55}}]  # fmt: skip
    md = ablation_markdown(rows)
    assert "+0.050" in md and "| baseline |" in md


def test_query_analysis():
    assert named_in("What did Caroline's kids paint?", ["Caroline", "Melanie", "Mel"]) == {"Caroline"}
    assert mentioned_dates("What setback did Melanie face in October 2023?") == [(2023, 10)]
    assert mentioned_dates("When did she go camping in June?") == [(None, 6)]
    assert mentioned_dates("How many times in 2023?") == [(2023, None)]
    assert mentioned_dates("May I ask what you did?") == []
    assert date_matches("2023-10-13T10:00:00", [(2023, 10)]) and not date_matches("2023-11-01", [(None, 10)])
    assert not date_matches(None, [(2023, None)])
    assert asks_when("When did Melanie run a race?") and asks_when("How long has she known him?")
    assert not asks_when("What did Caroline research?")
    assert mentions_time("I ran a race last Saturday") and not mentions_time("I love painting")


async def test_speaker_prior_and_plain_options(db_path):
    m = AsyncMemory(db_path, embedder=HashingEmbedder(64))
    await m.add_many([
        NewItem("Ann: I love hiking in the hills", "episodic", {"speaker": "Ann"}),
        NewItem("Bob: hiking hiking hiking hiking is great, Ann", "episodic", {"speaker": "Bob"}),
    ])  # fmt: skip
    plain = await m.search("Does Ann like hiking?", mode="bm25", top_k=2, **PLAIN)
    assert plain[0].item.metadata["speaker"] == "Bob"  # term frequency wins without the prior
    prior = await m.search("Does Ann like hiking?", mode="bm25", top_k=2)
    assert prior[0].item.metadata["speaker"] == "Ann"
    await m.close()


def test_real_locomo_one_conversation(locomo_path):
    cfg = RetrievalConfig(data_path=str(locomo_path), conv_id=("conv-26",), modes=("bm25",), **FAST)
    convs = load_conversations(cfg)
    report = evaluate_retrieval(convs, cfg, progress=False)
    assert report["n_turns"] == 419 and report["n_questions"] == 152
    assert report["recall_at_10"] > 0.6  # BM25 over turns with context: ~0.75 on this conversation
    assert headline(report)["modes"]["bm25"]["recall_at_k"]["10"] == report["recall_at_10"]


async def test_priors_follow_changes_and_feedback_runs(db_path):
    m = AsyncMemory(db_path, embedder=HashingEmbedder(64))
    ann, bob = await m.add_many([
        NewItem("I love hiking in the hills", "episodic", {"speaker": "Ann"}),
        NewItem("hiking hiking is great", "episodic", {"speaker": "Bob"}),
    ])  # fmt: skip
    assert (await m.search("Does Ann like hiking?", mode="bm25", top_k=1))[0].item.id == ann.id
    await m.update(ann.id, metadata={"speaker": "Cy"})  # the facts cache follows the change
    await m.update(bob.id, metadata={"speaker": "Ann"})
    assert (await m.search("Does Ann like hiking?", mode="bm25", top_k=1))[0].item.id == bob.id
    hits = await m.search("hiking hills", mode="hybrid", top_k=2, prf_docs=2, prf_terms=3)
    assert {h.item.id for h in hits} == {ann.id, bob.id}
    await m.reset()
    assert await m.search("hiking", mode="bm25") == []
    await m.close()


class _CountingEmbedder(HashingEmbedder):
    """The deterministic hashing embedder, recording every text it is asked to embed."""

    def __init__(self) -> None:
        super().__init__(384)
        self.calls: list[list[str]] = []

    def embed(self, texts):
        self.calls.append(list(texts))
        return super().embed(texts)


async def test_everything_is_embedded_once_up_front():
    from memrl.eval.retrieval import aevaluate
    from memrl.eval.retrieval.search import build_conversation, evaluate_conversation

    cfg = RetrievalConfig(**FAST)
    emb = _CountingEmbedder()
    memory = AsyncMemory(":memory:", embedder=emb)
    try:
        report = await aevaluate([_conv()], cfg, memory=memory, progress=False)
    finally:
        await memory.close()
    texts = [t for call in emb.calls for t in call]
    assert len(texts) == len(set(texts))  # nothing embedded twice
    assert len(emb.calls) == 2  # one call for the turns (one block: fewer than 1024), one for the questions
    assert [len(t) for t in emb.calls[0]] == sorted((len(t) for t in emb.calls[0]), reverse=True)
    assert len(emb.calls[0]) == 6 and len(emb.calls[1]) == 5  # 6 turns; questions of categories 1-4 (+ none)
    # the same figures as building and searching without the up-front pass
    plain = AsyncMemory(":memory:", embedder=HashingEmbedder(384))
    try:
        await build_conversation(plain, _conv(), cfg)
        rows, _ = await evaluate_conversation(plain, _conv(), cfg)
    finally:
        await plain.close()
    assert [r["retrieved"] for r in rows] == [r["retrieved"] for r in report["rows"]]


def test_ablation_reports_the_tuning_and_held_out_halves_apart(monkeypatch):
    import dataclasses

    from memrl.eval.retrieval import ablation

    base = _conv()
    tuning = [dataclasses.replace(base, id=f"c{i}") for i in range(5)]
    # the held-out conversation keeps only the question BM25 cannot answer (no shared word)
    held = dataclasses.replace(base, id="c5", questions=tuple(q for q in base.questions if q.id == "t:q3"))
    raw = RawConfig(context_before=0, context_after=0, views=("turn",), dense_views=("turn",))
    cfg = RetrievalConfig(modes=("bm25",), raw=raw, **FAST)
    monkeypatch.setattr(ablation, "ablation_steps", lambda final: [("only step", final)])
    rows = ablation.run_ablation([*tuning, held], cfg, progress=False)
    assert len(rows) == 1
    # q0-q2 found, q3 not: 3/4 on every tuning conversation, 0 on the held-out one; pooled over 21 questions
    assert rows[0]["bm25_tuning"] == pytest.approx(0.75) and rows[0]["bm25_heldout"] == 0.0
    assert rows[0]["bm25"]["overall"] == pytest.approx(15 / 21)
    md = ablation.ablation_markdown(
        [{"step": "s", "hybrid": {"overall": 0.5}, "hybrid_tuning": 0.6, "hybrid_heldout": 0.4}]
    )
    assert "hybrid conv 0-4 | hybrid conv 5-9" in md and "| 0.600 | 0.400 |" in md


def test_ablation_reranker_row_matches_the_embedder():
    from memrl.eval.retrieval.ablation import ablation_steps

    rows = dict(ablation_steps(RetrievalConfig()))
    mp = dict(ablation_steps(RetrievalConfig(embedder="mpnet")))
    assert [c.rerank for n, c in rows.items() if "reranker" in n] == ["locomo"]
    assert [c.rerank for n, c in mp.items() if "reranker" in n] == ["locomo-mpnet"]


def test_recall_is_reported_on_the_tuning_and_held_out_conversations_apart():
    from memrl.eval.retrieval.report import halves, report_markdown

    def row(conv: str, cid: int, r10: float | None) -> dict:
        return {"conversation": conv, "category": "x", "category_id": cid, "recall": {"bm25": {"10": r10}},
                "session_recall": {"bm25": {"10": r10}}}  # fmt: skip

    rows = [row(f"c{i}", 4, 1.0) for i in range(5)] + [row("c5", 4, 0.0), row("c6", 1, 0.5)]
    rows += [row("c0", 5, 0.0), row("c6", 4, None)]  # adversarial and no-evidence rows are left out
    assert halves(rows, "bm25") == {"conv 0-4": 1.0, "conv 5-6": 0.25}
    assert halves(rows[:5], "bm25") == {}  # five conversations: nothing held out
    s = summarize(rows, RetrievalConfig(modes=("bm25",), k=(10,), bootstrap=20))
    assert s["modes"]["bm25"]["recall_at_10_halves"] == {"conv 0-4": 1.0, "conv 5-6": 0.25}
    assert headline(s)["modes"]["bm25"]["recall_at_10_halves"]["conv 5-6"] == 0.25
    md = report_markdown({**s, "config": {"dataset": "locomo"}})
    assert "bm25 conv 0-4 1.000, conv 5-6 0.250" in md


def test_ndcg_credits_a_cited_session_once_at_its_first_turn():
    # evidence cites a whole session by its id (as a HotpotQA document or a PerLTQA dialogue does)
    def session(i: int, sid: str, texts: tuple[str, ...]) -> Session:
        return Session(
            i, None, None, tuple(Turn(f"S{i}:{j}", "user", t, i, j) for j, t in enumerate(texts, 1)), sid
        )

    docs = (
        session(1, "docA", ("Marmalade is made from oranges.", "Jam uses berries.")),
        session(
            2, "docB", ("The quokka lives on Rottnest.", "A quokka smiles in photos.", "Ferries go there.")
        ),
    )
    q = Question("d:q0", "Where does the quokka live?", ("Rottnest",), "doc", None, ("docB",), (2,))
    conv = Conversation("docs", ("user",), docs, (q,), "hotpotqa")
    raw = RawConfig(context_before=0, context_after=0, views=("turn",), dense_views=("turn",))
    cfg = RetrievalConfig(dataset="hotpotqa", modes=("bm25",), k=(1, 2), raw=raw, **FAST)
    (row,) = evaluate_retrieval([conv], cfg, progress=False)["rows"]
    assert row["retrieved"]["bm25"] == ["S2:1", "S2:2"]  # the two quokka turns, both of docB
    assert row["recall"]["bm25"] == {"1": 1.0, "2": 1.0}
    # docB is found at rank 1; its second turn earns nothing more, so NDCG stays 1 (not 2)
    assert row["ndcg"]["bm25"] == {"1": 1.0, "2": 1.0} and row["session_ndcg"]["bm25"]["2"] == 1.0


@pytest.mark.parametrize("diversity", [0.0, 0.3])
async def test_deeper_search_for_sessions_keeps_the_first_k_turns(diversity):
    # the session figures read up to `candidates` hits; the first max_k must be a max_k-deep search's own
    from memrl.eval.retrieval.search import (
        build_conversation,
        evaluate_conversation,
        namespace_of,
        session_depth,
    )

    cfg = RetrievalConfig(k=(1, 2), candidates=4, diversity=diversity, **FAST)
    assert session_depth(cfg) == (4 if diversity == 0 else 2)
    memory = AsyncMemory(":memory:", embedder=HashingEmbedder(384))
    try:
        await build_conversation(memory, _conv(), cfg)
        rows, _ = await evaluate_conversation(memory, _conv(), cfg)
        for row in rows:
            for mode in cfg.modes:
                hits = await memory.search(row["question"], namespace=namespace_of(_conv()), mode=mode,
                                           top_k=cfg.max_k, **cfg.search_options())  # fmt: skip
                assert row["retrieved"][mode] == [h.item.evidence[0] for h in hits]
                assert len(row["retrieved_sessions"][mode]) <= 2  # two sessions in the conversation
    finally:
        await memory.close()
