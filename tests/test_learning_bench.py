"""The learning benchmark's parts: split-pure RULER-LoCoMo documents, the trivial baselines, the paired
verdict, and a smoke run of ``python -m bench.learning --task read`` on the tiny real model (real data, real
reader, real trainer; the model is tiny and random, so nothing is learned: the run must still produce every
figure, keep every prediction and refuse nothing)."""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path

import pytest

from bench.learning_baselines import Baselines, Candidate, Item, document_item, score_prediction
from bench.learning_report import paired, verdict
from memrl.data.splits import LOCOMO_PROTOCOL_SPLIT, LOCOMO_UPDATE_SPLIT
from memrl.eval.qa.config import QAEvalConfig, load_conversations

FIT, VALIDATION, TEST = (LOCOMO_PROTOCOL_SPLIT[k] for k in ("fit", "validation", "test"))
#: The systems a run with an SFT stage scores on its held-out items: the model before, after SFT, after
#: GRPO, and the four no-model rules.
SFT_RUN_SYSTEMS = {"before", "after", "after SFT", "most_frequent", "top1_date", "top1_text", "per_category"}


def _titles(conv) -> set[str]:
    return {s.id.split(" session ")[0] for s in conv.sessions}


def test_ruler_locomo_split_builds_documents_from_that_split_only(locomo_path):
    for split in ("train", "test"):
        docs = load_conversations(QAEvalConfig(dataset="ruler-locomo", data_path=str(locomo_path), split=split,
                                               lengths=("1k",), questions=30))  # fmt: skip
        assert len(docs) == 30
        allowed = set(LOCOMO_UPDATE_SPLIT[split])
        for d in docs:
            # gold and distractor sessions alike come from the split's conversations
            assert _titles(d) <= allowed, (split, d.id, _titles(d) - allowed)
            assert d.metadata["question_id"].split(":")[0] in allowed
    # without a split, distractors come from every conversation (the length sweep of memrl eval)
    mixed = load_conversations(QAEvalConfig(dataset="ruler-locomo", data_path=str(locomo_path), lengths=("2k",),
                                            questions=40))  # fmt: skip
    assert any(_titles(d) & set(LOCOMO_UPDATE_SPLIT["test"]) and _titles(d) & set(LOCOMO_UPDATE_SPLIT["train"])
               for d in mixed)  # fmt: skip


def test_train_cli_refuses_ruler_locomo_documents_of_the_test_split(locomo_path, tmp_path, capsys):
    from memrl.cli.main import main

    code = main(["train", "grpo", "--task", "read", "--dataset", "ruler-locomo", "--data-path", str(locomo_path),
                 "--lengths", "1k", "--split", "test", "--questions", "2", "--steps", "1",
                 "--output-dir", str(tmp_path / "x")])  # fmt: skip
    assert code == 1 and "evaluation split" in capsys.readouterr().err
    assert not (tmp_path / "x" / "metrics.jsonl").exists()


def test_document_item_ranks_turns_and_dates_the_best_session(locomo_path):
    docs = load_conversations(QAEvalConfig(dataset="ruler-locomo", data_path=str(locomo_path), split="train",
                                           lengths=("2k",), questions=20))  # fmt: skip
    for d in docs:
        it = document_item(d)
        assert it.category in (1, 2, 3, 4) and it.candidates
        assert len(it.candidates) == sum(len(s.turns) for s in d.sessions)
        assert it.top_session_day is not None  # every LoCoMo session has a date


def test_baselines_fit_on_train_and_score_like_the_model():
    train = [Item("a", "When did X run?", ("8 May 2023",), 2, [Candidate("X: I ran today!", date(2023, 5, 8))]),
             Item("b", "When did Y swim?", ("8 May 2023",), 2, [Candidate("Y: swam", date(2023, 5, 8))]),
             Item("c", "What does X like?", ("pottery",), 4, [Candidate("pottery class is fun", None)])]  # fmt: skip
    rules = Baselines.fit(train)
    assert rules.frequent == {2: "8 May 2023", 4: "pottery"}
    assert rules.n_chars == 8  # "pottery " is the gold; any longer cut adds words (ties: the shortest)
    test = [Item("t", "When did Z sing?", ("7 May 2023",), 2, [Candidate("Z: sang", date(2023, 5, 7))])]
    preds = rules.predict(test)
    assert preds["top1_date"] == ["7 May 2023"] and preds["most_frequent"] == ["8 May 2023"]
    assert score_prediction(preds["top1_date"][0], test[0])["em"] == 1.0
    assert score_prediction(preds["most_frequent"][0], test[0])["em"] == 0.0


def test_the_per_category_rule_uses_for_each_category_the_rule_best_on_its_train_items():
    train = [Item("a", "When did X run?", ("8 May 2023",), 2, [Candidate("X: I ran", date(2023, 5, 8))]),
             Item("b", "When did Y swim?", ("9 June 2023",), 2, [Candidate("Y: swam", date(2023, 6, 9))]),
             Item("c", "What does X like?", ("pottery",), 4, [Candidate("pottery!", date(2023, 1, 2))]),
             Item("d", "What does Y play?", ("chess",), 4, [Candidate("chess", date(2023, 1, 3))])]  # fmt: skip
    rules = Baselines.fit(train)
    assert rules.by_category == {2: "top1_date", 4: "top1_text"}
    test = [Item("t", "When did Z sing?", ("7 May 2023",), 2, [Candidate("sang", date(2023, 5, 7))]),
            Item("u", "What does Z own?", ("a cat",), 4, [Candidate("a cat", date(2023, 5, 1))])]  # fmt: skip
    preds = rules.predict(test)
    assert preds["per_category"] == ["7 May 2023", "a cat"]
    assert all(
        score_prediction(p, it)["em"] == 1.0 for p, it in zip(preds["per_category"], test, strict=True)
    )


def test_verdict_counts_a_gain_only_over_both_before_and_the_best_rule():
    n = 60
    before = [{"f1": 0.1} for _ in range(n)]
    rule = [{"f1": 0.3} for _ in range(n)]
    weak = [{"f1": 0.0} for _ in range(n)]
    after_ties_rule = [{"f1": 0.3 + (0.02 if i % 2 else -0.02)} for i in range(n)]
    v = verdict(before, after_ties_rule, {"rule": rule, "weak": weak})
    assert v["best_trivial_rule"] == "rule" and v["gain_reference"] == "rule"
    assert v["after_vs_before"]["excludes_0"] and not v["gain"]  # beats before, not the rule
    after_wins = [{"f1": 0.5} for _ in range(n)]
    v = verdict(before, after_wins, {"rule": rule, "weak": weak})
    assert v["gain"] and v["gain_ci_low"] > 0 and v["after"] == 50.0 and v["best_trivial"] == 30.0
    assert paired(before, after_wins, "f1")["diff"] == pytest.approx(40.0)


_KEYS = (
    "task",
    "before",
    "after",
    "best_trivial",
    "gain_ci_low",
    "gain_ci_high",
    "seed",
    "n_eval",
    "wall_time_s",
)


def test_learning_bench_read_smoke_on_the_tiny_model(locomo_path, tmp_path, monkeypatch):
    """Two GRPO steps after one SFT step: the CI smoke of the read task's whole pipeline."""
    from bench import learning
    from tests.tiny_lm import make_tiny_lm

    monkeypatch.setenv("MEMRL_DATA_DIR", str(locomo_path.parents[1]))
    tiny = make_tiny_lm(tmp_path / "lm")
    out, cache = tmp_path / "run", tmp_path / "before.json"
    reading = ["--model", str(tiny), "--eval-items", "4", "--chunk-tokens", "600", "--memory-tokens", "8",
               "--answer-tokens", "12", "--eval-bf16", "--before-cache", str(cache), "--quiet"]  # fmt: skip
    # the untrained model's evaluation first, on its own (every seed then gets the same training time)
    learning.main(["--task", "read", "--before-only", "--out", str(tmp_path / "before"), *reading])
    assert json.loads(cache.read_text())["made_by"] == str(tmp_path / "before")
    learning.main(["--task", "read", "--out", str(out), "--steps", "2", "--group-size", "2", "--tasks-per-step", "1",
                   "--sft-steps", "1", "--sft-batch", "2", "--sft-answer-repeat", "2", "--sft-autocast", "bf16",
                   "--budget-minutes", "5", *reading])  # fmt: skip
    result = json.loads((out / "learning.json").read_text())
    assert result["setting"]["before_reused_from"] == str(tmp_path / "before")
    assert result["setting"]["eval_prefill"] == "bf16" and result["sft"]["autocast"] == "bf16"
    assert result["evidence"]["before"]["n"] == result["evidence"]["after"]["n"] == 4
    for key in _KEYS:
        assert key in result, key
    assert result["task"] == "read" and result["n_eval"] == 4 and result["train"]["steps"] == 2
    # the SFT warm start ran on expert trajectories of TRAIN documents, one optimizer step
    assert result["sft"]["steps"] == 1 and result["sft"]["documents"] > 0
    assert result["sft"]["chunk_examples"] > 0 and result["sft"]["answer_examples"] > 0
    assert (out / "sft" / "checkpoint").is_dir()
    rows = [json.loads(x) for x in (out / "predictions.jsonl").read_text().splitlines()]
    systems = {r["system"] for r in rows}
    assert systems == SFT_RUN_SYSTEMS
    assert len(rows) == 4 * len(systems)
    assert all(0.0 <= r["evidence_in_memory"] <= 1.0 for r in rows if r["system"] in ("before", "after"))
    assert (out / "learning.png").stat().st_size > 0
    # RL's own effect is measured against the SFT model on the same items, clustered by conversation
    assert set(result["rl_over_sft"]) == {"diff", "ci", "excludes_0"} and "sft_over_before" in result
    assert result["protocol"]["eval_split"] == "validation" and result["protocol"]["train_split"] == "fit"
    assert result["n_conversations"] == len({r["id"].split(":")[0] for r in rows})
    # trained on documents of fit conversations only; evaluated on validation conversations only
    trained = [json.loads(x)["task"] for x in (out / "train" / "rollouts.jsonl").read_text().splitlines()]
    assert trained and all(t.split(":")[0] in FIT for t in trained)
    assert all(r["id"].split(":")[0] in VALIDATION for r in rows)


def test_read_steps_0_is_the_sft_only_control_scored_once(locomo_path, tmp_path, monkeypatch):
    """``--task read --steps 0``: SFT alone, its model scored once and reported as both the SFT and the final
    model (the equal-time control of a GRPO run); without SFT it is refused, not an empty run."""
    from bench import learning
    from tests.learning_checks import assert_sft_only_control
    from tests.tiny_lm import make_tiny_lm

    monkeypatch.setenv("MEMRL_DATA_DIR", str(locomo_path.parents[1]))
    tiny = make_tiny_lm(tmp_path / "lm")
    out = tmp_path / "run"
    learning.main(["--task", "read", "--model", str(tiny), "--eval-items", "2", "--chunk-tokens", "600",
                   "--memory-tokens", "8", "--answer-tokens", "12", "--steps", "0", "--sft-steps", "1",
                   "--sft-batch", "2", "--budget-minutes", "5", "--out", str(out), "--quiet"])  # fmt: skip
    assert len(assert_sft_only_control(out)) == 2
    with pytest.raises(SystemExit):
        learning.parse(["--task", "read", "--steps", "0"])  # no SFT either: nothing would be trained


@pytest.mark.parametrize("task", ["update", "build"])
def test_learning_bench_tool_tasks_smoke_two_steps_on_the_tiny_model(
    task, locomo_path, tmp_path, monkeypatch
):
    """The CI smoke of update and build: two GRPO steps of the tiny real model on TRAIN items, the held-out
    items of TEST conversations scored before and after, the red team's scripted policies as baselines."""
    from bench import learning
    from tests.tiny_lm import make_tiny_lm

    monkeypatch.setenv("MEMRL_DATA_DIR", str(locomo_path.parents[1]))
    tiny = make_tiny_lm(tmp_path / "lm")
    out = tmp_path / "run"
    learning.main(["--task", task, "--model", str(tiny), "--out", str(out), "--eval-items", "2", "--steps", "2",
                   "--group-size", "2", "--tasks-per-step", "1", "--embedder", "hashing", "--quiet",
                   "--budget-minutes", "5"])  # fmt: skip
    result = json.loads((out / "learning.json").read_text())
    for key in _KEYS:
        assert key in result, key
    assert result["task"] == task and result["n_eval"] == 2 and result["train"]["steps"] == 2
    assert result["metric_label"] == f"{task} reward x100"
    assert result["trivial"], "no scripted baseline was played"
    rows = [json.loads(x) for x in (out / "predictions.jsonl").read_text().splitlines()]
    assert {r["system"] for r in rows} >= {"before", "after", *result["trivial"]}
    assert all(r["id"].split(":")[0] in VALIDATION for r in rows)
    trained = [json.loads(x)["task"] for x in (out / "train" / "rollouts.jsonl").read_text().splitlines()]
    assert trained and all(t.split(":")[0] in FIT for t in trained)


def test_learning_bench_answer_smoke_sft_then_two_steps_on_the_tiny_model(locomo_path, tmp_path, monkeypatch):
    """The CI smoke of the answer task: the raw store, the rules on its retrieval, one SFT step, two GRPO
    steps, and three evaluations by memrl eval's own code in fresh processes (before, after SFT, after)."""
    from bench import learning
    from tests.tiny_lm import make_tiny_lm

    monkeypatch.setenv("MEMRL_DATA_DIR", str(locomo_path.parents[1]))
    tiny = make_tiny_lm(tmp_path / "lm")
    out = tmp_path / "run"
    ledger = tmp_path / "ledger.jsonl"
    learning.main(["--task", "answer", "--model", str(tiny), "--out", str(out), "--eval-questions", "2",
                   "--train-questions", "2", "--steps", "2", "--group-size", "2", "--tasks-per-step", "1",
                   "--sft-steps", "1", "--sft-batch", "2", "--answer-tokens", "12", "--embedder", "hashing",
                   "--quiet", "--budget-minutes", "5", "--eval-split", "test", "--ledger", str(ledger)])  # fmt: skip
    result = json.loads((out / "learning.json").read_text())
    for key in _KEYS:
        assert key in result, key
    assert result["task"] == "answer" and result["n_eval"] == 6 and result["train"]["steps"] == 2
    assert result["sft"]["steps"] == 1
    rows = [json.loads(x) for x in (out / "predictions.jsonl").read_text().splitlines()]
    systems = {r["system"] for r in rows}
    assert systems == SFT_RUN_SYSTEMS
    assert len(rows) == 6 * len(systems)
    assert all(r["id"].split(":")[0] in TEST for r in rows)
    trained = [json.loads(x)["task"] for x in (out / "train" / "rollouts.jsonl").read_text().splitlines()]
    assert trained and all(t.split(":")[0] in FIT for t in trained)
    # a test evaluation is recorded, and the result counts it
    recorded = [json.loads(x) for x in ledger.read_text().splitlines()]
    assert len(recorded) == 1 and recorded[0]["setting_key"] == result["protocol"]["setting_key"]
    assert result["protocol"]["test_evaluations"] == {"of_setting": 1, "all_settings": 1, "settings": 1}
    assert "rl_over_sft" in result and result["n_conversations"] == 3


def test_answer_steps_0_is_the_sft_only_control_scored_once(locomo_path, tmp_path, monkeypatch):
    """``--task answer --steps 0``: the equal-time SFT control of an answer GRPO run; its SFT model is scored
    once (by memrl eval in a fresh process) and reported as the final model; without SFT it is refused. A
    time budget (``--sft-minutes``) is not cut at ``--sft-epochs``' one pass: here one pass is one step (every
    example in one batch) and the run makes the two ``--sft-steps`` allow within its 10 minutes."""
    from bench import learning
    from tests.learning_checks import assert_sft_only_control
    from tests.tiny_lm import make_tiny_lm

    monkeypatch.setenv("MEMRL_DATA_DIR", str(locomo_path.parents[1]))
    tiny = make_tiny_lm(tmp_path / "lm")
    out = tmp_path / "run"
    learning.main(["--task", "answer", "--model", str(tiny), "--out", str(out), "--eval-questions", "2",
                   "--train-questions", "2", "--steps", "0", "--sft-steps", "2", "--sft-minutes", "10", "--sft-batch", "64",
                   "--answer-tokens", "12", "--embedder", "hashing", "--quiet", "--budget-minutes", "5"])  # fmt: skip
    assert (
        len(assert_sft_only_control(out, sft_steps=2)) == 4
    )  # 2 questions of each of the 2 validation conversations
    assert not (out / "train" / "checkpoint").exists()
    sft = json.loads((out / "learning.json").read_text())["sft"]
    assert 0 < sft["examples"] <= 64 and sft["steps"] == 2 and sft["passes"] == 2
    with pytest.raises(SystemExit):
        learning.parse(["--task", "answer", "--steps", "0"])  # no SFT either: nothing would be trained


def test_the_verl_recipe_for_read_composes_on_verls_trainer():
    pytest.importorskip("verl")
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    root = Path(__file__).resolve().parents[1]
    with initialize_config_dir(version_base=None, config_dir=str(root / "configs/verl")):
        cfg = compose(config_name="memagent_ruler_locomo", overrides=["data.train_files=x.parquet"])
    assert cfg.algorithm.adv_estimator == "grpo" and cfg.algorithm.norm_adv_by_std_in_grpo is False
    assert cfg.actor_rollout_ref.rollout.n == 16 and cfg.trainer.use_v1
    assert cfg.reward.custom_reward_function.path == "pkg://memrl.integrations.verl.reward"
    from memrl.integrations.verl.resources import resource

    path = cfg.actor_rollout_ref.rollout.agent.agent_loop_config_path
    assert path == "memrl/resources/verl/agent_loops_ruler_locomo.yaml"  # relative to site-packages
    (loop,) = OmegaConf.load(resource(Path(path).name))
    assert loop.name == "memagent" and loop.chunk_tokens == 1024 and loop.memory_tokens == 256


@pytest.mark.parametrize(("name", "loop", "steps_per_epoch"), [("memupdate_locomo", "memupdate", 70),
                                                               ("membuilder_locomo", "membuilder", 51)])  # fmt: skip
def test_the_verl_recipes_for_update_and_build_compose_and_pass_verls_batch_checks(
    name, loop, steps_per_epoch
):
    """The recipes docs/training.md gives for the tasks that cannot learn here: verl's own config composes
    them, their batch sizes pass the rules verl's validate_config applies, and the comments' step counts hold
    for the train split's rows (1,118 update questions; 203 sessions x 4 memory types for build)."""
    pytest.importorskip("verl")
    from hydra import compose, initialize_config_dir

    root = Path(__file__).resolve().parents[1]
    with initialize_config_dir(version_base=None, config_dir=str(root / "configs/verl")):
        cfg = compose(config_name=name, overrides=["data.train_files=x.parquet"])
    ar = cfg.actor_rollout_ref
    assert ar.rollout.agent.default_agent_loop == loop and cfg.trainer.use_v1
    assert cfg.data.train_batch_size >= ar.actor.ppo_mini_batch_size
    assert ar.actor.ppo_micro_batch_size_per_gpu and ar.rollout.log_prob_micro_batch_size_per_gpu
    rows = {"memupdate": 1118, "membuilder": 812}[loop]
    assert -(-rows // cfg.data.train_batch_size) == steps_per_epoch
    assert (
        str(steps_per_epoch * cfg.trainer.total_epochs)
        in (root / "configs/verl" / f"{name}.yaml").read_text()
    )


def test_read_sft_expert_writes_the_evidence_when_read_and_boxes_the_gold(locomo_path, tmp_path, monkeypatch):
    """bench/read_sft.py's expert, run by MemAgent itself on real train documents: the memory is the
    initial one until a chunk holds an evidence turn, then that turn with its date, kept after it; the answer
    is the boxed gold; every step becomes an SFT example with the prompt MemAgent sends the student."""
    import asyncio

    from bench.learning_read import documents, reader_config
    from memrl.agents.memagent import render_conversation
    from memrl.agents.read_expert import evidence_lines, expert_trajectories
    from memrl.llm.local import LocalLLM
    from memrl.train.sft import sft_samples
    from tests.tiny_lm import make_tiny_lm

    monkeypatch.setenv("MEMRL_DATA_DIR", str(locomo_path.parents[1]))
    docs = documents("train", "1k")[:12]
    convs = {c.id: c for c in load_conversations(QAEvalConfig(dataset="locomo", data_path=str(locomo_path),
                                                              split="train"))}  # fmt: skip
    args = type(
        "A", (), {"chunk_tokens": 200, "memory_tokens": 48, "answer_tokens": 40, "memory_first": False}
    )
    config = reader_config(args)
    student = LocalLLM(str(make_tiny_lm(tmp_path / "lm"))).load()
    trajs, counts = asyncio.run(expert_trajectories(student, docs, convs, config))
    assert counts["documents"] == 12 and counts["evidence_steps"] >= 12  # each holds its evidence somewhere
    for doc, t in zip(docs, trajs, strict=True):
        lines = evidence_lines(doc, convs)
        assert lines and all(x.startswith("(") for x in lines)  # dated evidence turns
        chunks = [s for s in t.steps if s.role.startswith("chunk")]
        assert len(chunks) >= 2  # 1k-token documents in 200-token chunks
        text = render_conversation(doc)
        if not any(x.split(": ", 1)[1][:40] in text for x in lines):  # the padder cut a long gold session
            assert all(s.response == "No previous memory" for s in chunks)
            continue
        k = next(i for i, s in enumerate(chunks) if s.response != "No previous memory")
        # the evidence the memory starts with was read in that chunk (documents shuffle sessions)
        prompt = chunks[k].messages[-1]["content"]
        read = [x for x in lines if x[-15:] in prompt or x.split(") ", 1)[1][:15] in prompt]
        assert read and any(chunks[k].response.startswith(x[:20]) for x in read)
        assert all(s.response == "No previous memory" for s in chunks[:k])
        # after it: the previous memory, or the evidence read so far (a later chunk may hold more)
        assert all(
            b.response == a.response or b.response.startswith("(")
            for a, b in zip(chunks[k:-1], chunks[k + 1 :], strict=True)
        )
        assert len(student.tokenizer.encode(chunks[k].response)) < 48
        answers = [s for s in t.steps if s.role == "answer"]
        gold = str(doc.questions[0].answers[0])
        assert [s.response for s in answers] == ([] if len(gold) > 32 else ["\\boxed{" + gold + "}"])
        assert chunks[-1].response in (answers[0].messages[-1]["content"] if answers else chunks[-1].response)
    samples, skipped = sft_samples(student, trajs, max_reply_tokens=48)
    assert len(samples) + skipped["too_long"] == sum(len(t.steps) for t in trajs) and skipped["failed"] == 0


def test_evidence_in_measures_how_much_of_the_evidence_a_memory_holds(locomo_path, monkeypatch):
    from bench.learning_read import documents, evidence_in
    from memrl.agents.read_expert import evidence_lines

    monkeypatch.setenv("MEMRL_DATA_DIR", str(locomo_path.parents[1]))
    convs = {c.id: c for c in load_conversations(QAEvalConfig(dataset="locomo", data_path=str(locomo_path),
                                                              split="train"))}  # fmt: skip
    for doc in documents("train", "1k")[:10]:
        lines = evidence_lines(doc, convs)
        assert evidence_in(doc, "\n".join(lines)) == 1.0  # the expert's uncut memory
        assert evidence_in(doc, "") == 0.0
        first = lines[0].split(": ", 1)[1]
        half = evidence_in(doc, first[: len(first) // 2])
        assert 0.0 < half < 1.0 or len(lines) > 1  # a part of the evidence is a part of the figure


def test_read_sft_validation_reads_a_held_out_train_conversation(locomo_path, tmp_path, monkeypatch):
    """``python -m bench.read_sft --val-conv``: that conversation's documents are left out of the SFT and read at
    the end beside the rules fitted on the others; every reading kept, with its evidence share."""
    from bench import read_sft
    from tests.tiny_lm import make_tiny_lm

    monkeypatch.setenv("MEMRL_DATA_DIR", str(locomo_path.parents[1]))
    out = tmp_path / "sft"
    result = read_sft.main(["--out", str(out), "--model", str(make_tiny_lm(tmp_path / "lm")), "--documents", "40",
                            "--steps", "2", "--batch", "2", "--val-conv", "conv-44", "--val-items", "3",
                            "--chunk-tokens", "600", "--memory-tokens", "8", "--answer-tokens", "12",
                            "--autocast", "bf16", "--quiet"])  # fmt: skip
    val = result["validation"]
    assert result["steps"] == 2 and val["conversation"] == "conv-44" and val["n"] == 3
    assert set(val["rules"]) == {"most_frequent", "top1_date", "top1_text", "per_category"}
    assert 0.0 <= val["bm25_evidence"]["top1"] <= val["bm25_evidence"]["top3"] <= 1.0
    (mark,) = val["marks"]
    assert mark["steps"] == 2 and "by_category" in mark
    assert mark["evidence_in_memory"]["n"] == 3 and 0.0 <= mark["evidence_in_memory"]["mean"] <= 1.0
    rows = [json.loads(x) for x in next(out.glob("val-*.jsonl")).read_text().splitlines()]
    assert len(rows) == 3 and all(r["id"].startswith("conv-44:") for r in rows)
    assert all("memory" in r and "evidence_in_memory" in r for r in rows)
    assert (out / "sft" / "checkpoint").is_dir()
    # the held-out conversation's questions were not trained on: its documents made no example
    assert result["documents"] < 40


def test_read_sft_refuses_a_document_whose_question_it_cannot_find(locomo_path, monkeypatch):
    from bench.learning_read import documents
    from memrl.agents.read_expert import evidence_lines

    monkeypatch.setenv("MEMRL_DATA_DIR", str(locomo_path.parents[1]))
    (doc,) = documents("train", "1k")[:1]
    with pytest.raises(ValueError, match="not in the given conversations"):
        evidence_lines(doc, {})


def test_read_sft_finds_a_turn_a_chunk_boundary_cuts_on_one_side_of_the_cut():
    from memrl.agents.read_expert import in_chunk

    for turn in (
        "Jo: ok, 7 May",
        "Caroline: I went to the LGBTQ support group yesterday and it was powerful.",
    ):
        for c in range(len(turn) + 1):  # every place the boundary can fall
            before, after = "xx " + turn[:c], turn[c:] + " yy"
            assert in_chunk(turn, before) or in_chunk(turn, after), (turn, c)
    assert not in_chunk("Caroline: I went to the support group.", "Melanie: I painted a lake yesterday.")


def _seed_run(
    folder: Path, seed: int, after: list[float], ids=("a", "b", "c", "d"), sft=None, result=None
) -> Path:
    folder.mkdir(parents=True)
    rule = [0.5, 0.0, 0.5, 0.0]
    rows = []
    systems = [("before", [0.0] * 4), ("after", after), ("top1_date", rule), ("most_frequent", [0.0] * 4)]
    for system, scores in systems + ([("after SFT", sft)] if sft else []):
        rows += [
            {"system": system, "id": i, "prediction": f"{system}{x}", "f1": x, "em": 0.0}
            for i, x in zip(ids, scores, strict=True)
        ]
    (folder / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    res = {"task": "read", "seed": seed, "metric_label": "official LoCoMo F1 x100", "before": 0.0,
           "after": 100 * sum(after) / 4, "best_trivial": 25.0, "gain_ci_low": 0.0, "gain_ci_high": 0.0,
           "gain": False, "wall_time_s": 1.0, **(result or {})}  # fmt: skip
    (folder / "learning.json").write_text(json.dumps(res))
    return folder


def test_learning_seeds_pairs_each_seed_with_its_equal_time_sft_only_control(tmp_path):
    """``--control``: SFT + GRPO minus SFT alone per seed and seed-averaged, paired on the items; a control
    that trained GRPO, or of another seed, is refused."""
    from bench import learning_seeds

    grpo = [[1.0, 1.0, 0.5, 0.0], [1.0, 0.5, 0.5, 0.5]]
    alone = [[0.5, 1.0, 0.5, 0.0], [0.5, 0.5, 0.0, 0.5]]
    runs = [
        _seed_run(
            tmp_path / f"g{k}",
            k,
            a,
            sft=[0.5] * 4,
            result={"sft_s": 240.0, "train_s": 3000.0, "train": {"steps": 240}},
        )
        for k, a in enumerate(grpo)
    ]
    ctls = [
        _seed_run(
            tmp_path / f"c{k}",
            k,
            a,
            sft=a,
            result={"sft_s": 3240.0, "train_s": 0.0, "train": {"steps": 0}, "sft": {"steps": 300}},
        )
        for k, a in enumerate(alone)
    ]
    s = learning_seeds.main([*map(str, runs), "--control", *map(str, ctls)])
    c = s["control"]
    assert [r["rl_over_control"]["diff"] for r in c["per_seed"]] == [12.5, 25.0]
    assert c["rl_over_control"]["diff"] == 18.75  # per item (0.5, 0, 0.25, 0) on average, x100
    assert (
        [r["minutes"] for r in c["per_seed"]] == [54.0, 54.0] == [r["control_minutes"] for r in c["per_seed"]]
    )
    assert (
        c["after_mean"] == 43.75 and "SFT + GRPO minus SFT alone" in (tmp_path / "seeds-read.md").read_text()
    )
    with pytest.raises(SystemExit, match="one per seed"):
        learning_seeds.summarize(runs, controls=ctls[:1])
    with pytest.raises(SystemExit, match="not the task, seed and held-out items"):
        learning_seeds.summarize(runs, controls=ctls[::-1])
    with pytest.raises(SystemExit, match="not an SFT-only"):
        learning_seeds.summarize(runs, controls=[ctls[0], runs[1]])


def test_learning_seeds_averages_the_seeds_per_item_against_the_best_rule(tmp_path):
    from bench import learning_seeds

    runs = [_seed_run(tmp_path / f"s{k}", k, a) for k, a in
            enumerate([[1.0, 1.0, 1.0, 1.0], [1.0, 0.0, 1.0, 1.0], [0.5, 1.0, 1.0, 0.5]])]  # fmt: skip
    s = learning_seeds.main([str(r) for r in runs])
    assert s["seeds"] == [0, 1, 2] and s["n_eval"] == 4
    assert (
        s["best_trivial_rule"] == "top1_date"
        and s["best_trivial"] == 25.0
        and s["gain_reference"] == "top1_date"
    )
    # per item: mean after (0.833, 0.667, 1.0, 0.833) minus the rule (0.5, 0, 0.5, 0) -> mean 0.583
    assert s["gain_diff"] == pytest.approx(58.33, abs=0.01) and s["gain_ci_low"] > 0 and s["gain"]
    assert s["after_mean"] == pytest.approx(83.33, abs=0.01) and s["after_sd"] > 0
    assert (tmp_path / "seeds-read.md").read_text().count("\n| ") == 5  # the header, 3 seeds and the mean


def test_learning_seeds_refuses_runs_on_other_items_or_settings(tmp_path):
    from bench import learning_seeds

    a = _seed_run(tmp_path / "s0", 0, [1.0] * 4)
    b = _seed_run(tmp_path / "s1", 1, [1.0] * 4, ids=("a", "b", "c", "e"))
    with pytest.raises(SystemExit, match="not the same task and held-out items"):
        learning_seeds.summarize([a, b])
    c = _seed_run(tmp_path / "s2", 2, [1.0] * 4)
    lines = (c / "predictions.jsonl").read_text().replace("top1_date0.5", "top1_dateX", 1)
    (c / "predictions.jsonl").write_text(lines)
    with pytest.raises(SystemExit, match="'top1_date' predictions differ"):
        learning_seeds.summarize([a, c])


def test_learning_seeds_adds_the_rules_of_a_baselines_only_run(tmp_path):
    from bench import learning_seeds

    runs = [_seed_run(tmp_path / f"s{k}", k, [1.0, 1.0, 1.0, 0.0]) for k in range(2)]
    rules = tmp_path / "rules.jsonl"
    rows = [{"system": "per_category", "id": i, "prediction": "r", "f1": x, "em": 0.0}
            for i, x in zip("abcd", (1.0, 1.0, 1.0, 1.0), strict=True)]  # fmt: skip
    rules.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert learning_seeds.summarize(runs)["gain"]  # 75 against the date rule's 25
    s = learning_seeds.summarize(runs, rules)
    assert s["best_trivial_rule"] == "per_category" and s["best_trivial"] == 100.0
    assert s["gain_diff"] == -25.0 and not s["gain"]
    rules.write_text("".join(json.dumps(r) + "\n" for r in rows[:3]))
    with pytest.raises(SystemExit, match="its items are not those of"):
        learning_seeds.summarize(runs, rules)


def test_read_baselines_only_scores_the_rules_on_the_held_out_documents(
    locomo_path, tmp_path, monkeypatch, capsys
):
    from bench import learning

    monkeypatch.setenv("MEMRL_DATA_DIR", str(locomo_path.parents[1]))
    out = tmp_path / "rules"
    learning.main(
        ["--task", "read", "--baselines-only", "--eval-items", "8", "--out", str(out), "--eval-split", "test"]
    )
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["task"] == "read" and result["baselines_only"] and result["n_eval"] == 8
    assert set(result["overall"]) == {"most_frequent", "top1_date", "top1_text", "per_category"}
    assert result["rule_per_category"]["2"] == "top1_date"  # temporal questions: the date, chosen on train
    hits = result["bm25_evidence"]
    assert 0.0 <= hits["top1"] <= hits["top3"] <= 1.0 and hits["top3"] > 0  # BM25 finds some evidence
    rows = [json.loads(x) for x in (out / "predictions.jsonl").read_text().splitlines()]
    assert len(rows) == 8 * 4 and all(r["id"].split(":")[0] in LOCOMO_UPDATE_SPLIT["test"] for r in rows)
    per_cat = [r for r in rows if r["system"] == "per_category"]
    assert abs(100 * sum(r["f1"] for r in per_cat) / 8 - result["overall"]["per_category"]["f1"]) < 0.01


def test_the_protocol_counts_test_evaluations_per_setting_and_ignores_bookkeeping(tmp_path):
    """Seeds and output folders do not make a new setting; a changed learning rate does. Validation runs
    are never recorded."""
    import argparse

    from memrl.eval.protocol import protocol

    ledger = tmp_path / "ledger.jsonl"

    def args(**kw):
        base = {"task": "read", "seed": 0, "out": tmp_path / "a", "lr": 3e-4, "eval_split": "test",
                "ledger": ledger, "quiet": True}  # fmt: skip
        return argparse.Namespace(**{**base, **kw})

    assert protocol(args(eval_split="validation"), record=True)["test_evaluations"]["all_settings"] == 0
    first = protocol(args(), record=True)
    again = protocol(args(seed=1, out=tmp_path / "b"), record=True)
    other = protocol(args(lr=1e-4), record=True)
    assert first["setting_key"] == again["setting_key"] != other["setting_key"]
    assert again["test_evaluations"] == {"of_setting": 2, "all_settings": 2, "settings": 1}
    assert other["test_evaluations"] == {"of_setting": 1, "all_settings": 3, "settings": 2}
    ledger.write_text(ledger.read_text() + "not json\n")
    with pytest.raises(SystemExit, match="line 4: not JSON"):
        protocol(args(), record=False)


def test_paired_intervals_resample_conversations_when_given():
    """Thirty items from two conversations that disagree: the cluster interval is wider than the one that
    treats the items as independent."""
    a = [{"f1": 0.0}] * 30
    b = [{"f1": 1.0 if i < 15 else 0.0} for i in range(30)]
    clusters = ["conv-1"] * 15 + ["conv-2"] * 15
    iid, clustered = paired(a, b, "f1"), paired(a, b, "f1", clusters)
    assert iid["diff"] == clustered["diff"] == pytest.approx(50.0)
    assert clustered["ci"][1] - clustered["ci"][0] > iid["ci"][1] - iid["ci"][0]
    assert iid["excludes_0"] and not clustered["excludes_0"]


def test_learning_seeds_isolates_grpo_over_the_sft_checkpoint_per_seed_and_averaged(tmp_path):
    from bench import learning_seeds

    # two conversations (a, b | c, d): the intervals resample them, not the four items
    ids = ("conv-1:q1", "conv-1:q2", "conv-2:q1", "conv-2:q2")
    sfts = [[1.0, 0.0, 0.5, 0.0], [0.0, 0.0, 1.0, 0.0], [1.0, 1.0, 0.0, 0.0]]
    afters = [[1.0, 0.0, 1.0, 0.0], [1.0, 0.0, 1.0, 1.0], [1.0, 1.0, 0.0, 0.0]]
    runs = [
        _seed_run(tmp_path / f"s{k}", k, a, ids=ids, sft=f)
        for k, (a, f) in enumerate(zip(afters, sfts, strict=True))
    ]
    s = learning_seeds.main([str(r) for r in runs])
    assert s["n_clusters"] == 2
    assert [r["after_sft"] for r in s["per_seed"]] == [37.5, 25.0, 50.0]
    assert [r["rl_over_sft"]["diff"] for r in s["per_seed"]] == [12.5, 50.0, 0.0]
    assert s["after_sft_mean"] == pytest.approx(37.5) and s["rl_over_sft"]["diff"] == pytest.approx(20.83)
    assert s["sft_over_before"]["diff"] == pytest.approx(37.5)
    md = (tmp_path / "seeds-read.md").read_text()
    assert "GRPO minus SFT" in md and "+20.83" in md and "in 2 clusters" in md
    mixed = _seed_run(tmp_path / "nosft", 3, afters[0], ids=ids)
    with pytest.raises(SystemExit, match="scored an SFT-only checkpoint and some did not"):
        learning_seeds.summarize([runs[0], mixed])
