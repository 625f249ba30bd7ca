"""Downloading against a real HTTP server on loopback; data-folder resolution; the dataset registry."""

from __future__ import annotations

import hashlib
import http.server
import os
import socket
import threading
from functools import partial
from pathlib import Path

import pytest

from memrl.data import DATASETS, download, find_dataset, resolve_data_dir
from memrl.data.download import DatasetSource, RemoteFile, fetch, sha256_file
from memrl.errors import DataError

PAYLOAD = b'[{"sample_id": "x"}]\n' * 1000
GOOD = hashlib.sha256(PAYLOAD).hexdigest()


class _Handler(http.server.SimpleHTTPRequestHandler):
    requests: list[str] = []

    def do_GET(self):  # noqa: N802 - http.server's naming
        type(self).requests.append(self.path)
        super().do_GET()

    def log_message(self, *args):  # keep test output quiet
        pass


@pytest.fixture
def server(tmp_path):
    root = tmp_path / "served"
    root.mkdir()
    (root / "data.json").write_bytes(PAYLOAD)
    _Handler.requests = []
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), partial(_Handler, directory=str(root)))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()
    thread.join(timeout=5)


def _leftovers(folder: Path) -> list[str]:
    return [p.name for p in folder.iterdir()] if folder.exists() else []


def test_fetch_with_good_checksum(server, tmp_path):
    seen = []
    dest = fetch(
        f"{server}/data.json",
        tmp_path / "out" / "data.json",
        sha256=GOOD,
        progress=lambda d, t: seen.append((d, t)),
    )
    assert dest.read_bytes() == PAYLOAD
    assert seen[-1] == (len(PAYLOAD), len(PAYLOAD))
    assert _leftovers(tmp_path / "out") == ["data.json"]  # the temporary file was renamed, not copied


def test_fetch_with_bad_checksum_saves_nothing(server, tmp_path):
    with pytest.raises(DataError, match=f"has sha256 {GOOD}, expected 0000"):
        fetch(f"{server}/data.json", tmp_path / "out" / "data.json", sha256="0" * 64)
    assert _leftovers(tmp_path / "out") == []


def test_fetch_404_is_a_clear_error(server, tmp_path):
    with pytest.raises(DataError, match=r"download of .*/missing.json failed: HTTP 404"):
        fetch(f"{server}/missing.json", tmp_path / "missing.json")
    assert not (tmp_path / "missing.json").exists()


def test_fetch_unreachable_host_is_a_clear_error(tmp_path):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(DataError, match="could not download .* Check the network connection"):
        fetch(f"http://127.0.0.1:{port}/x.json", tmp_path / "x.json", timeout=5)
    assert _leftovers(tmp_path) == []


def test_existing_files_are_kept_unless_forced(server, tmp_path):
    dest = tmp_path / "data.json"
    fetch(f"{server}/data.json", dest, sha256=GOOD)
    fetch(f"{server}/data.json", dest, sha256=GOOD)
    assert len(_Handler.requests) == 1
    fetch(f"{server}/data.json", dest, sha256=GOOD, force=True)
    assert len(_Handler.requests) == 2
    dest.write_bytes(b"corrupted")
    with pytest.raises(DataError, match="--force"):
        fetch(f"{server}/data.json", dest, sha256=GOOD)


def test_download_by_name_into_the_data_dir(server, tmp_path, monkeypatch):
    registry = {
        "toy": DatasetSource(
            "toy", (RemoteFile(f"{server}/data.json", "toy/toy.json", GOOD),), "a toy", "CC0"
        )
    }
    monkeypatch.setenv("MEMRL_DATA_DIR", str(tmp_path / "env-dir"))
    (path,) = download("toy", registry=registry)
    assert path == tmp_path / "env-dir" / "toy" / "toy.json" and path.read_bytes() == PAYLOAD
    assert find_dataset("toy", registry=registry) == path
    (other,) = download("toy", tmp_path / "arg-dir", registry=registry)
    assert other == tmp_path / "arg-dir" / "toy" / "toy.json"
    with pytest.raises(DataError, match="unknown data set 'nope'; known: toy"):
        download("nope", registry=registry)


def test_a_file_without_published_checksum_is_recorded_then_enforced(server, tmp_path):
    registry = {
        "toy": DatasetSource("toy", (RemoteFile(f"{server}/data.json", "toy/toy.json"),), "a toy", "CC0")
    }
    seen = []
    (path,) = download("toy", tmp_path, registry=registry, on_unverified=lambda p, d: seen.append((p, d)))
    assert seen == [(path, GOOD)] and (tmp_path / "toy" / "toy.json.sha256").read_text().strip() == GOOD
    (tmp_path / "served" / "data.json").write_bytes(PAYLOAD + b"changed upstream\n")
    with pytest.raises(DataError, match="expected " + GOOD):
        download("toy", tmp_path, registry=registry, force=True)
    assert path.read_bytes() == PAYLOAD  # the recorded copy is kept
    seen.clear()
    assert download("toy", tmp_path, registry=registry, on_unverified=lambda p, d: seen.append(p)) == [path]
    assert seen == []  # verified against the record this time


def test_data_dir_precedence(tmp_path, monkeypatch):
    monkeypatch.delenv("MEMRL_DATA_DIR", raising=False)
    assert resolve_data_dir() == Path("~/.cache/memrl/data").expanduser()
    monkeypatch.setenv("MEMRL_DATA_DIR", str(tmp_path / "env"))
    assert resolve_data_dir() == tmp_path / "env"
    assert resolve_data_dir(tmp_path / "arg") == tmp_path / "arg"


def test_find_dataset_explains_what_to_do(tmp_path, monkeypatch):
    monkeypatch.setenv("MEMRL_DATA_DIR", str(tmp_path))
    with pytest.raises(DataError, match=r"'locomo' not found .*locomo10\.json.*memrl data download locomo"):
        find_dataset("locomo")
    (tmp_path / "locomo10.json").write_text("[]")  # a file right in the data folder is found too
    assert find_dataset("locomo") == tmp_path / "locomo10.json"
    (tmp_path / "hotpotqa").mkdir()
    (tmp_path / "hotpotqa" / "mine.json").write_text("[]")
    assert find_dataset("hotpotqa/mine.json") == tmp_path / "hotpotqa" / "mine.json"
    with pytest.raises(DataError, match="has no file 'x.json'; its files: longmemeval_oracle.json"):
        find_dataset("longmemeval", file="x.json")


def test_registry_urls_and_locomo_checksum():
    assert set(DATASETS) >= {"locomo", "longmemeval", "perltqa", "hotpotqa"}
    assert all(f.url.startswith(("https://", "http://")) for s in DATASETS.values() for f in s.files)
    (locomo,) = DATASETS["locomo"].files
    assert locomo.sha256 and locomo.sha256.startswith("79fa87e9") and len(locomo.sha256) == 64
    shared = Path(os.environ.get("MEMRL_DATA_DIR") or Path(__file__).parents[1] / "../shared/data")
    real = shared / locomo.path
    if not real.is_file():
        pytest.skip("LoCoMo not found: set MEMRL_DATA_DIR or put it at ../shared/data/locomo/")
    assert sha256_file(real) == locomo.sha256
    assert find_dataset("locomo", shared) == real
