"""docs/integrations.md's examples run as written, so they cannot drift: each Python block in a fresh process,
in an empty temporary folder (its own ``memrl.db``), offline. A block that is not Python must be listed in
:data:`NOT_RUN` with the reason, or the test fails."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "integrations.md"
NOT_RUN = {'pip install ".[langgraph]"': "installs packages"}
NEEDS = {"langgraph": "langgraph", "langchain": "langchain_openai", "openai_agents": "agents"}


def python_blocks() -> list[str]:
    out = []
    for lang, code in re.findall(r"^```(\w*)\n(.*?)^```", PAGE.read_text(), re.M | re.S):
        if lang == "python":
            out.append(code)
        else:
            first = code.strip().splitlines()[0]
            assert any(first.startswith(k) for k in NOT_RUN), f"block neither run nor listed: {first!r}"
    return out


def test_there_is_one_example_per_integration():
    found = [next(k for k in NEEDS if f"memrl.integrations.{k} import" in code) for code in python_blocks()]
    assert found == ["langgraph", "langchain", "openai_agents"]


@pytest.mark.parametrize("code", python_blocks(), ids=list(NEEDS))
def test_the_example_runs_as_written(code, tmp_path):
    integration = next(k for k in NEEDS if f"memrl.integrations.{k} import" in code)
    pytest.importorskip(NEEDS[integration])
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=300)  # fmt: skip
    assert r.returncode == 0, f"{code}\n--- stdout\n{r.stdout}\n--- stderr\n{r.stderr}"
    assert (tmp_path / "memrl.db").exists()  # the example wrote its store where it said
