"""``python -m bench.decode`` on the tiny real model: every phase runs (greedy, the schema's grammar, the
constrained decoding), and the last line of stdout is the JSON it returns. Timing is not asserted."""

from __future__ import annotations

import json

from bench import decode
from tests.tiny_lm import make_tiny_lm


def test_decode_benchmark_reports_every_batch_free_and_constrained(tmp_path, capsys):
    tiny = make_tiny_lm(tmp_path / "lm")
    res = decode.main(["--model", str(tiny), "--tokens", "3", "--repeats", "1"])  # no --threads: process-wide
    last = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert last == json.loads(json.dumps(res))
    assert set(last["tok_per_s"]) == set(last["ms_per_step"]) == {"batch1", "batch8"}
    assert all(v > 0 for v in last["tok_per_s"].values())
    assert all(set(v) == {"free", "json_schema"} for v in last["ms_per_step"].values())
    assert last["grammar_compile_s"] >= 0 and last["tokens"] == 3
