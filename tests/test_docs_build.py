"""`make docs` (part of `make test`) must fail on a broken link: its recipe runs `mkdocs build --strict`
without `--quiet`, which hid the warnings --strict counts (a broken link once passed). The recipe is read
from the Makefile and run on a copy of the docs with one broken link added."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def docs_command() -> list[str]:
    """The `docs` target's command from the Makefile, with $(VENV)/bin pointing at this interpreter's."""
    text = (ROOT / "Makefile").read_text()
    m = re.search(r"^docs:.*\n\t(.+)$", text, re.M)
    assert m, "the Makefile has no docs target"
    venv_bin = str(Path(sys.executable).parent)
    return shlex.split(m.group(1).replace("$(VENV)/bin", venv_bin))


@pytest.fixture
def site_copy(tmp_path: Path) -> Path:
    if shutil.which("mkdocs", path=str(Path(sys.executable).parent)) is None:
        pytest.skip("mkdocs is not installed (the dev extra)")
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    shutil.copy(ROOT / "mkdocs.yml", tmp_path / "mkdocs.yml")
    (tmp_path / "memrl").symlink_to(ROOT / "memrl")  # the API pages read the package's docstrings
    return tmp_path


def test_the_docs_target_is_strict_and_not_quiet():
    cmd = docs_command()
    assert "--strict" in cmd and "--quiet" not in cmd and "-q" not in cmd


def test_the_docs_target_fails_on_a_broken_link(site_copy: Path):
    cmd = docs_command()
    ok = subprocess.run(cmd, cwd=site_copy, capture_output=True, text=True, timeout=300)
    assert ok.returncode == 0, ok.stdout + ok.stderr  # the docs as they are build
    with open(site_copy / "docs" / "store.md", "a") as f:
        f.write("\n[a page that is not there](no-such-page.md)\n")
    broken = subprocess.run(cmd, cwd=site_copy, capture_output=True, text=True, timeout=300)
    assert broken.returncode != 0
    assert "no-such-page.md" in broken.stdout + broken.stderr
