"""Export/import of a namespace: a lossless round trip (items, deleted ones, core memory, history and undo),
atomic refusal of bad input, and the ``memrl memory export|import`` commands."""

from __future__ import annotations

import json

import pytest

from memrl.cli.main import main
from memrl.errors import ValidationError
from memrl.memory.embedders.providers import HashingEmbedder
from memrl.memory.facade.blocking import Memory


def _fill(m: Memory) -> dict[str, str]:
    a = m.add(
        "Alice moved to Lisbon in May 2023", type="episodic", metadata={"date": "2023-05"}, evidence=["D1:3"]
    )
    b = m.add("Alice likes green tea", evidence=["D1:4"])
    c = m.add("Alice has a dog named Rex")
    d = m.add("Rex is a beagle")
    m.update(a.id, "Alice moved to Porto in June 2023")
    m.delete(b.id, reason="wrong")
    merged = m.merge([c.id, d.id], "Alice has a beagle named Rex")
    m.core_append("Name: Alice")
    return {"a": a.id, "b": b.id, "merged": merged.id}


def _comparable(lines: list[dict]) -> list[dict]:
    """Lines without what an import is allowed to change: the namespace name, seq numbers, export time."""
    out = []
    for line in lines:
        x = {k: v for k, v in line.items() if k not in ("namespace", "seq", "exported_at", "name")}
        for key in ("old", "new"):
            if isinstance(x.get(key), dict):
                x[key] = {k: v for k, v in x[key].items() if k != "namespace"}
        out.append(x)
    return out


def test_round_trip_is_lossless_and_undo_still_works(mem: Memory) -> None:
    ids = _fill(mem)
    lines = mem.export_lines()
    assert [line["kind"] for line in lines[:3]] == ["header", "namespace", "core"]
    text = [json.dumps(line) for line in lines]  # through real JSON text, as a file would carry it
    got = mem.import_lines(text, namespace="copy")
    assert got == {"namespace": "copy", "items": 4, "history": 9, "core": 1, "keys": 0, "lines": len(lines)}
    again = mem.export_lines(namespace="copy")
    assert _comparable(again) == _comparable(lines)

    assert mem.get(ids["b"], namespace="copy", include_deleted=True).deleted
    assert mem.core(namespace="copy") == "Name: Alice"
    hits = mem.search("beagle named Rex", namespace="copy", top_k=5)
    assert [h.item.id for h in hits][0] == ids["merged"]
    assert ids["b"] not in [h.item.id for h in mem.search("green tea", namespace="copy", top_k=10)]

    # The imported history is live: undoing the merge in the copy restores both parts there only.
    mem.undo(namespace="copy")  # latest change: the core append
    undone = mem.undo(ids["merged"], namespace="copy")
    assert len(undone) == 2
    assert len(mem.list(namespace="copy")) == 3
    assert len(mem.list()) == 2  # the original is untouched
    mem.undo(ids["a"], namespace="copy")
    assert mem.get(ids["a"], namespace="copy").content == "Alice moved to Lisbon in May 2023"


def test_rollback_after_an_import_knows_when_a_change_was_undone(mem: Memory) -> None:
    """An entry undone after the rollback point is in effect again after the rollback, in an imported copy
    as in the original: the export says which undo reverted it (``undone_by``), renumbered on import."""
    item = mem.add("v1")
    mem.update(item.id, "v2")
    mark = mem.store.last_seq("alice")
    mem.undo(item.id)  # v2 undone after the point
    lines = mem.export_lines()
    assert [x["undone_by"] for x in lines if x["kind"] == "history" and x["op"] == "UPDATE"] == [mark + 1]
    mem.import_lines([json.dumps(x) for x in lines], namespace="copy")
    copy_mark = max(
        x["seq"] for x in mem.export_lines(namespace="copy") if x["kind"] == "history" and x["op"] == "UPDATE"
    )
    for ns, point in (("alice", mark), ("copy", copy_mark)):
        mem.store.rollback(ns, point)
        assert mem.get(item.id, namespace=ns).content == "v2"
        mem.undo(item.id, namespace=ns)  # the update is in effect again, so undo reverts it
        assert mem.get(item.id, namespace=ns).content == "v1", ns


def test_import_refuses_existing_namespace_and_bad_lines_and_changes_nothing(mem: Memory) -> None:
    _fill(mem)
    lines = mem.export_lines()
    before = mem.export_lines()
    with pytest.raises(ValidationError, match="already exists"):
        mem.import_lines(lines)  # into "alice" itself
    bad = [json.dumps(x) for x in lines]
    bad[4] = bad[4][:-3]  # a truncated line
    with pytest.raises(ValidationError, match="line 5: not valid JSON"):
        mem.import_lines(bad, namespace="copy")
    missing = [dict(x) for x in lines]
    del next(x for x in missing if x["kind"] == "item")["content"]
    with pytest.raises(ValidationError, match=r"line \d+ \(item\) content: Field required"):
        mem.import_lines(missing, namespace="copy")
    with pytest.raises(ValidationError, match="header"):
        mem.import_lines(lines[1:], namespace="copy")
    assert "copy" not in [n["name"] for n in mem.namespaces()]
    assert _comparable(mem.export_lines()) == _comparable(before)
    got = mem.import_lines(lines, overwrite=True)  # replacing itself with its own export changes no content
    assert got["items"] == 4 and _comparable(mem.export_lines()) == _comparable(before)


def test_cli_export_import(new_db, tmp_path, capsys) -> None:
    db, out = new_db(), tmp_path / "alice.jsonl"
    with Memory(db, embedder=HashingEmbedder(64), namespace="alice") as m:
        _fill(m)
    assert main(["memory", "export", "--db", str(db), "-n", "alice", "-o", str(out)]) == 0
    assert main(["memory", "import", str(out), "--db", str(db), "--into", "bob", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["items"] == 4
    assert main(["memory", "import", str(out), "--db", str(db), "--into", "bob"]) == 2
    assert "already exists" in capsys.readouterr().err
    with Memory(db, embedder=HashingEmbedder(64)) as m:
        assert {n["name"]: n["items"] for n in m.namespaces()} == {"alice": 2, "bob": 2}
