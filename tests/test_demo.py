"""``memrl demo``: membuilder, the annotation expert's memory and raw turns on the bundled sample, scored by
one answerer, and a last line that says which wins (the answerer here is scripted; the demo's default is
the offline model)."""

from __future__ import annotations

import memrl.llm.registry as registry
from memrl.cli.demo_cmd import verdict
from memrl.cli.main import main
from memrl.llm import ScriptedLLM


def test_the_demo_runs_three_builders_and_says_which_memory_wins(tmp_path, monkeypatch, capsys):
    def answer(messages, tools, schema):
        if schema is not None:  # a MemBuilder agent: nothing to write
            return (
                '{"operations": []}'
                if "CORE" not in messages[0]["content"]
                else '{"operation": "APPEND", "content": "-"}'
            )
        return "Biscuit"

    models = []
    monkeypatch.setattr(registry, "create_llm", lambda *a, **k: models.append(a[1:2]) or ScriptedLLM(answer))
    code = main(["demo", "--provider", "scripted", "--embedder", "hashing", "--output-dir", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0
    assert ("memrl:membuilder-sft",) in models  # the trained builder's agents ran the shipped adapter
    assert "the trained builder (memrl:membuilder-sft) scores" in out
    for name in ("membuilder", "membuilder-sft", "annotations", "raw"):
        assert (tmp_path / name / "report.md").is_file()
        assert any(line.startswith(f"{name} ") and " F1 " in line for line in out.splitlines()), name
    assert "docs/results/builders.md#membuilders-recipe-on-held-out-conversations" in out
    # learning without an expert: GRPO beat no non-RL arm, so the demo prints the measured table, no run
    from memrl.cli.demo_cmd import LEARNING

    assert out.rstrip().endswith(LEARNING) and "GRPO alone 52.8" in LEARNING


def test_the_verdict_line_names_the_loser_and_the_expert():
    def run(f1):
        return (None, {"f1": f1})

    lost = verdict({"membuilder": run(0.042), "annotations": run(0.20), "raw": run(0.154)})
    assert lost.startswith("membuilder loses to raw storage here (F1 4.2 vs 15.4)") and "scores 20.0" in lost
    # the LoCoMo-scale figures (untrained and SFT builder against raw) and why the SFT one is not the default
    assert (
        "F1 5.1 against raw's 9.0" in lost
        and "memrl:membuilder-sft (SFT; ADRPO made no update on this CPU) 7.1" in lost
        and "not the default" in lost
    )
    won = verdict({"membuilder": run(0.2), "raw": run(0.154)})
    assert won.startswith("membuilder 20.0 >= raw 15.4") and "expert" not in won
    assert verdict({"membuilder": run(None), "raw": run(0.1)}).startswith("LoCoMo's table")


def test_the_demo_builds_with_another_model_only_where_asked(tmp_path, monkeypatch, capsys):
    """``--builder-model`` (e.g. the shipped SFT adapter, memrl:membuilder-sft) is membuilder's agents' model;
    the answerer, the expert's and raw's runs keep the default model."""
    made: list[tuple[str, str | None]] = []

    def create(provider, model=None, **kw):
        made.append((provider, model))
        return ScriptedLLM(
            lambda m, t, schema: ('{"operations": []}' if "CORE" not in m[0]["content"] else
                                  '{"operation": "APPEND", "content": "-"}') if schema is not None else "Biscuit"
        )  # fmt: skip

    monkeypatch.setattr(registry, "create_llm", create)
    code = main(["demo", "--provider", "scripted", "--embedder", "hashing", "--output-dir", str(tmp_path),
                 "--builder-model", "memrl:membuilder-sft", "--no-trained"])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0 and "membuilder " in out and "skipped: --no-trained" in out
    assert made.count(("scripted", "memrl:membuilder-sft")) == 1
    assert all(model is None for _, model in made if model != "memrl:membuilder-sft") and len(made) == 2
