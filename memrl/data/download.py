"""Where data sets live on disk, and downloading them: ``memrl data download NAME``.

The data folder is, in order: the ``--data-path`` argument, the ``MEMRL_DATA_DIR`` environment variable,
``~/.cache/memrl/data``. Each data set in :data:`DATASETS` lists its files (URL, path inside the data
folder, sha256 where known). :func:`download` streams each file to a temporary file next to its
destination, checks the checksum, then renames it into place, so an interrupted download never leaves
a truncated file behind. Only LoCoMo has a published, pinned checksum; for the others the sha256 of the
first download is recorded beside the file and enforced from then on (see :func:`download`).
Standard library only (urllib).

    memrl data download locomo            # -> ~/.cache/memrl/data/locomo/locomo10.json
    MEMRL_DATA_DIR=../shared/data python -c "from memrl.data import find_dataset; print(find_dataset('locomo'))"
"""

from __future__ import annotations

import hashlib
import http.client
import os
import tempfile
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from memrl.errors import DataError

__all__ = [
    "DATASETS",
    "DatasetSource",
    "RemoteFile",
    "data_dir",
    "download",
    "fetch",
    "find_dataset",
    "recorded_checksum_path",
    "resolve_data_dir",
    "sha256_file",
]

ENV_VAR = "MEMRL_DATA_DIR"
DEFAULT_DATA_DIR = Path("~/.cache/memrl/data")

Progress = Callable[[int, int | None], None]


@dataclass(frozen=True)
class RemoteFile:
    """One downloadable file: where it comes from, where it goes (relative to the data folder), its sha256."""

    url: str
    path: str
    sha256: str | None = None


@dataclass(frozen=True)
class DatasetSource:
    """A data set: its files (the first is the one :func:`find_dataset` returns by default) and license."""

    name: str
    files: tuple[RemoteFile, ...]
    description: str
    license: str


_HF_LME = "https://huggingface.co/datasets/xiaowu0162/longmemeval/resolve/main"
_PERLTQA = "https://raw.githubusercontent.com/Elvin-Yiming-Du/PerLTQA/main/Dataset/en_v2"

DATASETS: dict[str, DatasetSource] = {
    s.name: s
    for s in (
        DatasetSource(
            "locomo",
            (
                RemoteFile(
                    "https://raw.githubusercontent.com/snap-research/LoCoMo/"
                    "3eb6f2c585f5e1699204e3c3bdf7adc5c28cb376/data/locomo10.json",
                    "locomo/locomo10.json",
                    "79fa87e90f04081343b8c8debecb80a9a6842b76a7aa537dc9fdf651ea698ff4",
                ),
            ),
            "LoCoMo: 10 long conversations, 1,986 questions (snap-research/LoCoMo)",
            "CC BY-NC 4.0",
        ),
        DatasetSource(
            "longmemeval",
            (
                RemoteFile(f"{_HF_LME}/longmemeval_oracle.json", "longmemeval/longmemeval_oracle.json"),
                RemoteFile(f"{_HF_LME}/longmemeval_s.json", "longmemeval/longmemeval_s.json"),
            ),
            "LongMemEval oracle and S (~115k tokens per question) haystacks, 500 questions",
            "MIT",
        ),
        DatasetSource(
            "longmemeval-m",
            (RemoteFile(f"{_HF_LME}/longmemeval_m.json", "longmemeval/longmemeval_m.json"),),
            "LongMemEval M: ~500 sessions per question (several GB)",
            "MIT",
        ),
        DatasetSource(
            "perltqa",
            (
                RemoteFile(f"{_PERLTQA}/perltqa_en_v2.json", "perltqa/perltqa_en_v2.json"),
                RemoteFile(f"{_PERLTQA}/perltmem_en_v2.json", "perltqa/perltmem_en_v2.json"),
            ),
            "PerLTQA English v2: QA file and memory file (Elvin-Yiming-Du/PerLTQA)",
            "CC BY-NC 4.0",
        ),
        DatasetSource(
            "hotpotqa",
            (
                RemoteFile(
                    "http://curtis.ml.cmu.edu/datasets/hotpot/hotpot_dev_distractor_v1.json",
                    "hotpotqa/hotpot_dev_distractor_v1.json",
                ),
            ),
            "HotpotQA dev set, distractor setting (7,405 questions); RULER-HotpotQA is built from it",
            "CC BY-SA 4.0",
        ),
    )
}


def resolve_data_dir(path: str | Path | None = None) -> Path:
    """The data folder: ``path`` (``--data-path``) > ``$MEMRL_DATA_DIR`` > ``~/.cache/memrl/data``."""
    chosen = path if path not in (None, "") else os.environ.get(ENV_VAR) or DEFAULT_DATA_DIR
    return Path(chosen).expanduser()


#: Alias of :func:`resolve_data_dir`, under the name the CLI uses.
data_dir = resolve_data_dir


def _source(name: str, registry: Mapping[str, DatasetSource] | None) -> DatasetSource:
    registry = DATASETS if registry is None else registry
    if name not in registry:
        raise DataError(f"unknown data set {name!r}; known: {', '.join(sorted(registry))}")
    return registry[name]


def find_dataset(
    name: str,
    data_path: str | Path | None = None,
    *,
    file: str | None = None,
    registry: Mapping[str, DatasetSource] | None = None,
) -> Path:
    """Locate a data set's file in the data folder (see :func:`resolve_data_dir`).

    ``name`` is a registered data set (its first file, or the one whose name is ``file``) or a path
    relative to the data folder, such as ``"locomo/locomo10.json"``. Files are also looked for directly
    in the data folder. Raises :class:`DataError` saying where it looked and how to get the file.
    """
    root = resolve_data_dir(data_path)
    registry = DATASETS if registry is None else registry
    if name in registry:
        files = [f.path for f in registry[name].files if file is None or Path(f.path).name == file]
        if not files:
            known = ", ".join(Path(f.path).name for f in registry[name].files)
            raise DataError(f"data set {name!r} has no file {file!r}; its files: {known}")
        files = files[:1]
        hint = f"run `memrl data download {name}`"
    else:
        files = [name]
        hint = "check the name"
    tried = []
    for rel in files:
        for candidate in (root / rel, root / Path(rel).name):
            if candidate.is_file():
                return candidate
            tried.append(str(candidate))
    raise DataError(
        f"data set {name!r} not found (looked for {', '.join(dict.fromkeys(tried))}); {hint}, "
        f"or point --data-path / ${ENV_VAR} at the folder that holds it"
    )


def sha256_file(path: str | Path, chunk_size: int = 1 << 20) -> str:
    """The hex sha256 of a file, read in chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(chunk_size):
            h.update(chunk)
    return h.hexdigest()


def fetch(
    url: str,
    dest: str | Path,
    *,
    sha256: str | None = None,
    force: bool = False,
    timeout: float = 60.0,
    progress: Progress | None = None,
) -> Path:
    """Download ``url`` to ``dest`` atomically, checking ``sha256`` if given.

    An existing ``dest`` is kept (after checking its checksum) unless ``force``. ``progress`` is called
    as ``progress(bytes_done, total_or_None)``. Network failures, HTTP errors and checksum mismatches
    raise :class:`DataError`; nothing is left at ``dest`` when they do.
    """
    dest = Path(dest)
    if dest.is_file() and not force:
        if sha256 and (actual := sha256_file(dest)) != sha256.lower():
            raise DataError(
                f"{dest}: sha256 is {actual}, expected {sha256}; delete it or download again with --force"
            )
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".part", dir=dest.parent)
    tmp = Path(tmp_name)
    try:
        digest = hashlib.sha256()
        request = urllib.request.Request(url, headers={"User-Agent": "memrl-data-download"})
        with os.fdopen(fd, "wb") as out, urllib.request.urlopen(request, timeout=timeout) as response:
            length = response.headers.get("Content-Length")
            total = int(length) if length and length.isdigit() else None
            done = 0
            while chunk := response.read(1 << 20):
                out.write(chunk)
                digest.update(chunk)
                done += len(chunk)
                if progress is not None:
                    progress(done, total)
        if total is not None and done != total:
            raise DataError(f"download of {url} stopped after {done:,} of {total:,} bytes; try again")
        if sha256 and digest.hexdigest() != sha256.lower():
            raise DataError(
                f"download of {url} has sha256 {digest.hexdigest()}, expected {sha256}: "
                "the file changed upstream or was corrupted in transit; not saved"
            )
        os.replace(tmp, dest)
        return dest
    except urllib.error.HTTPError as e:
        raise DataError(f"download of {url} failed: HTTP {e.code} {e.reason}") from None
    except (urllib.error.URLError, http.client.HTTPException, TimeoutError, ConnectionError) as e:
        reason = getattr(e, "reason", e)
        raise DataError(
            f"could not download {url}: {reason}. Check the network connection, or fetch the file "
            f"by hand and save it as {dest}"
        ) from None
    finally:
        tmp.unlink(missing_ok=True)


def recorded_checksum_path(dest: str | Path) -> Path:
    """Where the sha256 of a file without a published checksum is recorded: ``FILE.sha256`` beside it."""
    dest = Path(dest)
    return dest.with_name(dest.name + ".sha256")


def download(
    name: str,
    data_dir: str | Path | None = None,
    *,
    force: bool = False,
    timeout: float = 60.0,
    progress: Progress | None = None,
    registry: Mapping[str, DatasetSource] | None = None,
    on_unverified: Callable[[Path, str], None] | None = None,
) -> list[Path]:
    """Download every file of data set ``name`` into the data folder; returns their paths.

    Files already present (with the right checksum) are not downloaded again unless ``force``.

    A file with a published sha256 is verified against it. A file without one (upstream publishes no
    checksum and the URL is not pinned to a commit) is recorded on first download (trust on first use):
    its sha256 goes to ``FILE.sha256`` and ``on_unverified(path, sha256)`` is called so the caller can
    say so; every later call, ``--force`` included, checks the file against the recorded value, so an
    upstream change or a corrupted copy is an error rather than a silently different benchmark.
    """
    source = _source(name, registry)
    root = resolve_data_dir(data_dir)
    paths = []
    for f in source.files:
        dest = root / f.path
        record = recorded_checksum_path(dest)
        expected = f.sha256 or (record.read_text().strip() if record.is_file() else None)
        path = fetch(f.url, dest, sha256=expected, force=force, timeout=timeout, progress=progress)
        if expected is None:
            digest = sha256_file(path)
            record.write_text(digest + "\n")
            if on_unverified is not None:
                on_unverified(path, digest)
        paths.append(path)
    return paths
