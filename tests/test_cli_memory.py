"""``memrl memory ...`` end to end, in-process and as the installed console script."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from memrl.cli.main import main


def run(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_add_search_list_history_undo(capsys, tmp_path):
    db = str(tmp_path / "cli.db")
    common = ["--db", db, "--namespace", "alice", "--embedder", "hashing"]
    code, out, _ = run(
        capsys, "memory", "add", "Alice lives in Lisbon", "--type", "semantic", *common, "--json"
    )
    assert code == 0
    first = json.loads(out)
    assert first["content"] == "Alice lives in Lisbon" and first["namespace"] == "alice"
    code, out, _ = run(capsys, "memory", "add", "Alice adopted a cat", "--type", "episodic",
                       "--metadata", '{"date": "2023-05-08"}', *common)  # fmt: skip
    second_id = out.strip()
    code, out, _ = run(capsys, "memory", "search", "where does alice live", "--top-k", "1", *common, "--json")
    hits = json.loads(out)
    assert code == 0 and [h["id"] for h in hits] == [first["id"]]
    code, out, _ = run(capsys, "memory", "search", "cat", "--filter", "date=2023-05-08", *common, "--json")
    assert [h["id"] for h in json.loads(out)] == [second_id]
    code, out, _ = run(capsys, "memory", "update", first["id"], "Alice lives in Porto", *common)
    assert "Porto" in out
    code, out, _ = run(capsys, "memory", "history", first["id"], *common, "--json")
    assert [(e["op"], e["new_content"]) for e in json.loads(out)] == [
        ("ADD", "Alice lives in Lisbon"), ("UPDATE", "Alice lives in Porto"),
    ]  # fmt: skip
    code, out, _ = run(capsys, "memory", "undo", first["id"], *common)
    assert code == 0 and "undid" in out
    code, out, _ = run(capsys, "memory", "list", *common, "--json")
    assert {i["content"] for i in json.loads(out)} == {"Alice lives in Lisbon", "Alice adopted a cat"}
    code, out, _ = run(capsys, "memory", "delete", second_id, "--reason", "test", *common)
    code, out, _ = run(capsys, "memory", "list", *common)
    assert "cat" not in out
    code, out, _ = run(capsys, "memory", "list", "--deleted", *common)
    assert "[deleted]" in out


def test_errors_exit_nonzero_with_a_message(capsys, tmp_path):
    db = str(tmp_path / "cli.db")
    code, _, err = run(capsys, "memory", "get", "ghost", "--db", db, "--embedder", "hashing")
    assert code == 1 and "no memory store at" in err  # read-only: no store is created
    run(capsys, "memory", "add", "y", "--db", db, "--embedder", "hashing")
    code, _, err = run(capsys, "memory", "get", "ghost", "--db", db, "--embedder", "hashing")
    assert code == 1 and "'ghost' does not exist" in err
    code, _, err = run(
        capsys, "memory", "add", "x", "--metadata", "{bad", "--db", db, "--embedder", "hashing"
    )
    assert code == 2 and "--metadata is not valid JSON" in err
    bad = tmp_path / "bad.db"
    bad.write_text("garbage")
    code, _, err = run(capsys, "memory", "list", "--db", str(bad))
    assert code == 1 and "bad.db is not a readable memrl database" in err
    with pytest.raises(SystemExit):
        main(["memory", "frobnicate"])


def test_console_script_is_installed(tmp_path):
    exe = shutil.which("memrl")
    if exe is None:
        pytest.skip("memrl console script not on PATH (package not installed)")
    db = str(tmp_path / "s.db")
    out = subprocess.run(
        [exe, "memory", "add", "hello world", "--db", db, "--embedder", "hashing", "--json"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert json.loads(out.stdout)["content"] == "hello world"
