"""The CLI's bad inputs: each wrong flag or file ends in one line on stderr naming what to change, a
non-zero exit code, and no traceback. The commands run for real (no model is needed: they fail first)."""

from __future__ import annotations

import json

import pytest

from memrl.cli.main import main
from tests.hotpot_fixture import write_hotpot


@pytest.fixture
def files(tmp_path):
    (tmp_path / "bad.json").write_text("[{oops")
    (tmp_path / "empty").mkdir()
    (tmp_path / "not_a_list.json").write_text(json.dumps({"a": 1}))
    (tmp_path / "a_file").write_text("x")
    (tmp_path / "eval_50.json").write_text(
        json.dumps([{"context": "Document 1:\nA\ntext", "input": "Q?", "answers": ["x"]}])
    )
    (tmp_path / "perltqa_en_v2.json").write_text("[]")  # its memory file is missing
    write_hotpot(tmp_path / "hq", n_questions=2)
    return tmp_path


EVAL = ["eval", "--dataset", "sample", "--provider", "scripted", "--embedder", "hashing", "--no-cache"]
RETRIEVAL = ["eval", "retrieval", "--embedder", "hashing", "--json"]

# (argv, words the one-line message must contain); "{t}" is the test's folder
CASES = [
    (["eval", "--dataset", "squad"], ["unknown data set 'squad'", "locomo"]),
    (["eval", "--dataset", "locomo", "--data-path", "{t}/nowhere.json"], ["nowhere.json", "--data-path"]),
    (["eval", "--dataset", "locomo", "--data-path", "{t}/empty"], ["locomo", "not found", "--data-path"]),
    (["eval", "--dataset", "locomo", "--data-path", "{t}/bad.json"], ["bad.json", "not valid JSON"]),
    (["eval", "--dataset", "longmemeval", "--data-path", "{t}/not_a_list.json"], ["not_a_list.json", "list"]),
    (["eval", "--dataset", "perltqa", "--data-path", "{t}/perltqa_en_v2.json"], ["perltmem_en_v2.json"]),
    (["eval", "--dataset", "hotpotqa", "--data-path", "{t}/empty"], ["hotpotqa", "not found"]),
    (
        ["eval", "--dataset", "ruler-hotpotqa", "--data-path", "{t}/hq", "--lengths", "7q"],
        ["--lengths", "'7q'"],
    ),
    (
        ["eval", "--dataset", "ruler-hotpotqa", "--data-path", "{t}/hq", "--lengths", "50"],
        ["--lengths", "100"],
    ),
    (["eval", "--dataset", "locomo", "--lengths", "7k"], ["--lengths", "ruler-hotpotqa"]),
    (
        ["eval", "--dataset", "ruler-hotpotqa", "--data-path", "{t}/eval_50.json", "--lengths", "7k"],
        ["eval_50.json", "--lengths"],
    ),
    ([*EVAL, "--conv-id", "nope"], ["nope"]),
    ([*EVAL, "--split", "train"], ["split 'train'"]),
    ([*EVAL, "--questions", "0"], ["--questions"]),
    ([*EVAL, "--concurrency", "0"], ["--concurrency"]),
    ([*EVAL, "--builder", "membuilder", "--builder-option", "nope=1"], ["nope"]),
    ([*EVAL, "--builder", "memagent", "--builder-option", "chunk_tokens=ten"], ["chunk_tokens"]),
    ([*EVAL, "--namespace-format", "{conv}-{oops}"], ["--namespace-format", "oops"]),
    ([*EVAL, "--mode", "answer", "--output-dir", "{t}/fresh"], ["--mode answer", "memory.db"]),
    ([*EVAL, "--output-dir", "{t}/a_file"], ["a_file", "--output-dir"]),
    ([*EVAL, "--resume", "--overwrite"], ["--resume", "--overwrite"]),
    (["eval", "--dataset", "sample", "--provider", "nope"], ["provider 'nope'"]),
    (["eval", "--dataset", "sample", "--provider", "local", "--model", "{t}/no-model"], ["no-model"]),
    ([*EVAL, "--embedder", "nope"], ["embedder", "nope"]),
    ([*RETRIEVAL, "--dataset", "sample", "--k", "x"], ["--k", "'x'"]),
    ([*RETRIEVAL, "--dataset", "sample", "--k", "0"], ["k must be positive"]),
    ([*RETRIEVAL, "--dataset", "sample", "--modes", "fuzzy"], ["modes"]),
    ([*RETRIEVAL, "--dataset", "ruler-hotpotqa", "--data-path", "{t}/eval_50.json"], ["no", "evidence"]),
    ([*RETRIEVAL, "--dataset", "sample", "--conv-id", "nope"], ["nope"]),
    (["data", "info", "perltqa", "--data-path", "{t}/empty"], ["perltqa", "not found"]),
    (["data", "download", "squad"], ["unknown data set 'squad'"]),
]


@pytest.mark.parametrize(("argv", "words"), CASES, ids=[" ".join(c[0][:6]) for c in CASES])
def test_bad_input_is_one_line_naming_what_to_change(argv, words, files, capsys, monkeypatch):
    monkeypatch.chdir(files)  # runs/ defaults land in the test folder
    code = main([a.replace("{t}", str(files)) for a in argv])
    err = capsys.readouterr().err.strip().splitlines()
    err = [line for line in err if line.strip()]
    assert code not in (0, None)
    assert len(err) == 1 and err[0].startswith("memrl: error: "), err
    assert "Traceback" not in err[0]
    for word in words:
        assert word.replace("{t}", str(files)) in err[0], (word, err[0])
