"""``memrl eval ruler`` end to end with scripted models: MemAgent (chunked reading, bounded memory) and the
full-context reader on 1k-2k items, RULER's scores, items that do not fit the window skipped, failures
counted and redone on ``--resume``, the data files' checksums, the CLI."""

from __future__ import annotations

import json
import re

import pytest

from memrl.errors import ConfigError, DataError, ProviderError
from memrl.eval.ruler.config import RulerEvalConfig
from memrl.eval.ruler.run import RulerEvaluation, run_ruler_eval
from memrl.llm import ScriptedLLM


def _needle_values(text: str, keys: list[str]) -> list[str]:
    return [v for k in keys for v in re.findall(rf"for {re.escape(k)} is: (\S+)\.", text)]


def _asked_keys(task_text: str) -> list[str]:
    keys = re.search(r"magic \w+ for (.+?) mentioned", task_text)[1]
    return [k for k in re.split(r", and |, ", keys) if k]


def _chain(text: str, value: str) -> list[str]:
    holding = set(re.findall(rf"VAR ([A-Z]{{5}}) = {value}\b", text))
    for a, b in re.findall(r"VAR ([A-Z]{5}) = VAR ([A-Z]{5})", text):  # statements come in chain order
        if b in holding:
            holding.add(a)
    return sorted(holding)


def solve(text: str, task_text: str) -> str:
    """What a perfect reader answers, from the text it was shown."""
    if "VAR " in task_text or "assigned the value" in task_text:
        return ", ".join(_chain(text, re.search(r"assigned the value (\d+)", task_text)[1]))
    return ", ".join(_needle_values(text, _asked_keys(task_text)))


def oracle(messages, tools, schema):
    """A perfect reader: MemAgent's chunk steps keep the facts of the section that bear on the task, its
    answer step answers from the memory; the full reader answers from the whole prompt."""
    text = messages[-1]["content"]
    if "Next section:" in text:
        memory = re.search(r"Your memory so far:\n(.*?)\n\nNext section:", text, re.S)[1]
        chunk = re.search(r"Next section:\n(.*?)\n\nWrite your updated memory", text, re.S)[1]
        keep = [] if memory == "No previous memory" else memory.split("\n")
        keep += re.findall(r"One of the special magic \w+ for \S+ is: \S+\.", chunk)
        keep += re.findall(r"VAR [A-Z]{5} = (?:VAR [A-Z]{5}|\d+)", chunk)
        return "\n".join(keep) or "nothing yet"
    if "Your memory of the document:" in text:
        memory = text.split("Your memory of the document:")[1]
        return "\\boxed{" + solve(memory, text) + "}"
    return solve(text, text)


def essays_dir(tmp_path):
    folder = tmp_path / "paulgraham"
    folder.mkdir(exist_ok=True)
    for k in range(2):
        (folder / f"e{k}.txt").write_text(" ".join(f"Essay {k} makes point {n} clearly." for n in range(500)))
    return str(folder)


def config(tmp_path, **kw) -> RulerEvalConfig:
    base = dict(task=("niah_single_1", "niah_multivalue", "vt"), lengths=("1k", "2k"), questions=2,
                tokenizer="whitespace", essays=essays_dir(tmp_path), output_dir=str(tmp_path / "run"),
                provider="scripted", cache=False, concurrency=2, memagent_option=("chunk_tokens=600",))  # fmt: skip
    return RulerEvalConfig(**{**base, **kw})


def cell(summary, task, length, reader):
    (c,) = [c for c in summary["cells"] if (c["task"], c["length"], c["reader"]) == (task, length, reader)]
    return c


async def test_a_perfect_reader_scores_100_and_what_does_not_fit_is_skipped(tmp_path):
    llm = ScriptedLLM(oracle)
    summary = await RulerEvaluation(config(tmp_path, context_window=1500), llm=llm, progress=False).run()
    for task in ("niah_single_1", "niah_multivalue", "vt"):
        for length in ("1k", "2k"):
            assert cell(summary, task, length, "memagent")["score"] == pytest.approx(100.0)
        assert cell(summary, task, "1k", "full")["score"] == pytest.approx(100.0)
        full2k = cell(summary, task, "2k", "full")
        assert full2k["score"] is None and full2k["skipped"] == 2 and full2k["scored"] == 0
    assert summary["n_items"] == 12 and summary["n_skipped"] == 6 and summary["n_failed"] == 0
    rows = [json.loads(line) for line in (tmp_path / "run" / "predictions.jsonl").read_text().splitlines()]
    memagent = [r for r in rows if r["reader"] == "memagent"]
    assert all(r["chunks"] >= 3 for r in memagent if r["length"] == "2k")  # read in chunks, not at once
    # the memory is bounded: no MemAgent call saw the whole 2k context
    chunk_calls = [
        r.messages[-1]["content"] for r in llm.requests if "Next section:" in r.messages[-1]["content"]
    ]
    assert max(len(c.split()) for c in chunk_calls) < 1000
    report = (tmp_path / "run" / "report.md").read_text()
    assert "## niah_multivalue" in report and "| reader | 1k | 2k |" in report
    assert "- (skipped)" in report and "## Average over the tasks" in report
    on_disk = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert on_disk["cells"] == summary["cells"]
    png = (tmp_path / "run" / "scores.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and "![scores by length](scores.png)" in report
    files = on_disk["data_files"]
    assert set(files) == {
        f"{t}_{n}.jsonl" for t in ("niah_single_1", "niah_multivalue", "vt") for n in ("1k", "2k")
    }


async def test_scores_are_rulers_metric_of_each_reply(tmp_path):
    """Half the values of a multivalue item found scores 50 for that item; nothing found scores 0."""

    def half(messages, tools, schema):
        text = messages[-1]["content"]
        values = _needle_values(text, _asked_keys(text))
        return ", ".join(values[: len(values) // 2])

    cfg = config(tmp_path, task=("niah_multivalue", "niah_single_1"), lengths=("1k",), reader=("full",))
    summary = await RulerEvaluation(cfg, llm=ScriptedLLM(half), progress=False).run()
    assert cell(summary, "niah_multivalue", "1k", "full")["score"] == pytest.approx(50.0)
    assert cell(summary, "niah_single_1", "1k", "full")["score"] == pytest.approx(
        0.0
    )  # half of one value: none


async def test_failures_are_counted_not_scored_and_resume_redoes_only_them(tmp_path):
    calls = {"n": 0}

    def flaky(messages, tools, schema):
        calls["n"] += 1
        if calls["n"] % 3 == 0:
            raise ProviderError("server went away")
        return oracle(messages, tools, schema)

    cfg = config(tmp_path, task=("niah_single_1",), reader=("full",), concurrency=1)
    first = await RulerEvaluation(cfg, llm=ScriptedLLM(flaky), progress=False).run()
    assert first["n_failed"] == 1 and first["n_scored"] == 3
    assert cell(first, "niah_single_1", "1k", "full")["scored"] + cell(first, "niah_single_1", "2k", "full")[
        "scored"] == 3  # fmt: skip
    with pytest.raises(ConfigError, match="--resume"):
        RulerEvaluation(cfg, llm=ScriptedLLM(oracle), progress=False)
    retry = ScriptedLLM(oracle)
    again = await RulerEvaluation(RulerEvalConfig(**{**cfg.__dict__, "resume": True}), llm=retry,
                                  progress=False).run()  # fmt: skip
    assert len(retry.requests) == 1  # only the failed item is asked again
    assert again["n_failed"] == 0 and again["n_scored"] == 4
    assert all(c["score"] == pytest.approx(100.0) for c in again["cells"])
    assert again["data_files"] == first["data_files"]  # read back, same bytes


async def test_resume_refuses_a_data_file_that_changed(tmp_path):
    cfg = config(tmp_path, task=("niah_single_1",), lengths=("1k",), reader=("full",))
    await RulerEvaluation(cfg, llm=ScriptedLLM(oracle), progress=False).run()
    path = tmp_path / "run" / "data" / "niah_single_1_1k.jsonl"
    path.write_text(path.read_text().replace("magic", "MAGIC"))
    with pytest.raises(DataError, match="sha256"):
        await RulerEvaluation(RulerEvalConfig(**{**cfg.__dict__, "resume": True}), llm=ScriptedLLM(oracle),
                              progress=False).run()  # fmt: skip


def test_config_errors():
    with pytest.raises(ConfigError, match="unknown"):
        RulerEvalConfig(task=("niah_single_9",))
    with pytest.raises(ConfigError, match="--reader"):
        RulerEvalConfig(reader=("rag",))
    with pytest.raises(ConfigError, match="not documents"):
        RulerEvalConfig(lengths=("50docs",))
    with pytest.raises(ConfigError, match="has no option"):
        RulerEvalConfig(memagent_option=("chunks=3",))
    assert RulerEvalConfig(task=("vt,cwe",)).task == ("vt", "cwe")


def test_qa_2_by_name_needs_the_hotpotqa_file(tmp_path):
    cfg = config(tmp_path, task=("qa_2",), data_path=str(tmp_path / "empty"))
    with pytest.raises(DataError, match="hotpotqa"):
        run_ruler_eval(cfg, llm=ScriptedLLM(oracle), progress=False)


def test_cli_runs_both_readers_and_prints_json_last(tmp_path, capsys, monkeypatch):
    import memrl.llm.scripted as scripted
    from memrl.cli.main import main

    original = scripted.ScriptedLLM.__init__
    monkeypatch.setattr(
        scripted.ScriptedLLM, "__init__", lambda self, responses=(), **kw: original(self, oracle, **kw)
    )
    out_dir = tmp_path / "cli"
    argv = ["eval", "ruler", "--task", "niah_single_1,vt", "--lengths", "1k,2k", "--questions", "2",
            "--provider", "scripted", "--tokenizer", "whitespace", "--output-dir", str(out_dir), "--no-cache",
            "--memagent-option", "chunk_tokens=600"]  # fmt: skip
    assert main(argv) == 0
    out = capsys.readouterr().out.strip().splitlines()
    last = json.loads(out[-1])
    assert last["n_items"] == 8 and last["n_scored"] == 16 and last["n_failed"] == 0
    assert all(c["score"] == pytest.approx(100.0) for c in last["cells"])
    assert "# RULER synthetic tasks" in out and "## vt" in out
    assert main([*argv, "--resume", "--json"]) == 0  # all answered: nothing is asked again
    resumed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert resumed["cells"] == last["cells"]


def test_help_lists_the_tasks(capsys):
    from memrl.cli.main import main

    with pytest.raises(SystemExit):
        main(["eval", "ruler", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for task in ("niah_single_1", "niah_multikey_3", "niah_multiquery", "vt", "cwe", "fwe", "qa_2"):
        assert task in text


async def test_lengths_in_the_offline_models_tokens(tmp_path):
    """``--tokenizer model`` with a non-local model counts in the offline SmolLM2's tokenizer (loaded without
    its weights): every item's prompt is within its target in those tokens, and filled to near it."""
    from transformers import AutoTokenizer

    from memrl.llm.local.hf_models import ensure_local_model

    cfg = config(tmp_path, task=("niah_single_1", "vt"), lengths=("1k",), tokenizer="model", reader=("full",))
    summary = await RulerEvaluation(cfg, llm=ScriptedLLM(oracle), progress=False).run()
    assert summary["n_failed"] == 0 and {c["score"] for c in summary["cells"]} == {100.0}
    tok = AutoTokenizer.from_pretrained(ensure_local_model(None))
    items = [json.loads(line) for f in (tmp_path / "run" / "data").glob("*.jsonl") for line in f.open()]
    assert len(items) == 4
    for it in items:
        n = len(tok.encode(f"{it['intro']}\n\n{it['context']}\n\n{it['query']}", add_special_tokens=False))
        assert n == it["prompt_tokens"] and 0.8 * 1024 <= n <= 1024 - it["tokens_to_generate"], (it["id"], n)
