"""``memrl eval judge-check`` on locomo-audit's two stress sets and the gold answers, with a scripted judge
over real HTTP (memrl's OpenAI-compatible server in front of a rule): the rates it prints are the rule's
rates on those items, computed here independently; the rates are recorded, and a later judged run with the
same judge, model and template carries them in its summary and report (another model's run does not)."""

from __future__ import annotations

import json
import re

import pytest

from memrl.cli.main import main
from memrl.llm import ScriptedLLM
from memrl.llm.server import LLMServer
from tests.conftest import shared_data_dir

DATA = shared_data_dir()
pytestmark = [pytest.mark.data, pytest.mark.skipif(
    DATA is None or not (DATA / "locomo-audit").is_dir(), reason="no ../shared/data/locomo-audit")]  # fmt: skip
N = 3  # questions per category and set


def words(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z0-9]+", text.lower()) if len(w) > 3}


def generous(gold: str, answer: str) -> bool:
    """The scripted judge's rule: accept when the answer shares a longer word with the gold answer."""
    return gold.strip().lower() == answer.strip().lower() or bool(words(gold) & words(answer))


def reply(messages, tools, schema):
    text = messages[0]["content"].split("Now it's time for the real question:")[1]  # after the example
    gold = text.split("\nGold answer: ", 1)[1].split("\nGenerated answer: ")[0]
    answer = text.split("\nGenerated answer: ", 1)[1].split("\n\nFirst, provide")[0]
    return json.dumps({"label": "CORRECT" if generous(gold, answer) else "WRONG"})


def expected_rates():
    out = {}
    for name, file in (("specific", "ap_v1_specific_wrong.json"), ("vague", "ap_v2_vague_wrong.json")):
        rows = [r for group in json.loads((DATA / "locomo-audit" / file).read_text())["detailed_results"].values()
                for r in group]  # fmt: skip
        kept, seen = [], {}
        for r in rows:
            seen[r["category"]] = seen.get(r["category"], 0) + 1
            if seen[r["category"]] <= N:
                kept.append(r)
        out[name] = sum(generous(r["golden_answer"], r["generated_answer"]) for r in kept) / len(kept)
        if name == "specific":
            out["gold"] = sum(not generous(r["golden_answer"], r["golden_answer"]) for r in kept) / len(kept)
    return out


def test_judge_check_measures_a_scripted_judge_and_reports_carry_its_rates(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("MEMRL_CACHE_DIR", str(tmp_path / "cache"))
    with LLMServer(ScriptedLLM(reply)) as server:
        code = main(["eval", "judge-check", "--judge", "mem0", "--judge-model", "judge-x", "--judge-base-url",
                     server.base_url, "--questions", str(N), "--output-dir", str(tmp_path / "check"),
                     "--no-cache", "--data-path", str(DATA)])  # fmt: skip
        n_requests = server.num_requests
    out = capsys.readouterr().out.strip().splitlines()
    assert code == 0 and n_requests == 3 * 4 * N
    result = json.loads(out[-1])
    want = expected_rates()
    overall = result["overall"]
    assert overall["false_accept_specific"] == pytest.approx(want["specific"])
    assert overall["false_accept_vague"] == pytest.approx(want["vague"])
    assert overall["false_reject_gold"] == pytest.approx(want["gold"]) == 0.0
    assert overall["n_specific"] == overall["n_vague"] == overall["n_gold"] == 4 * N
    assert set(result["by_category"]) == {"multi-hop", "temporal", "open-domain", "single-hop"}
    assert all(c["n_vague"] == N for c in result["by_category"].values())
    assert result["judge"]["name"] == "mem0" and result["judge"]["model"] == "judge-x"
    assert any("accepts vague wrong %" in line for line in out)
    assert (tmp_path / "check" / "judge_rates.json").exists()
    assert len((tmp_path / "check" / "verdicts.jsonl").read_text().splitlines()) == 3 * 4 * N

    # a run judged by the same judge, model and template carries the rates; another model's does not
    from memrl.eval.qa import QAEvaluation
    from memrl.eval.qa.config import QAEvalConfig

    def run(model: str, name: str):
        cfg = QAEvalConfig(dataset="sample", embedder="hashing", provider="scripted", judge="mem0",
                           judge_model=model, output_dir=str(tmp_path / name), cache=False, questions=2)  # fmt: skip
        judge = ScriptedLLM(lambda m, t, s: '{"label": "WRONG"}')
        return QAEvaluation(cfg, llm=ScriptedLLM(lambda *a: "x"), judge=judge, progress=False)

    import asyncio

    summary = asyncio.run(run("judge-x", "same").run())
    assert summary["judge"]["rates"]["overall"]["false_accept_vague"] == pytest.approx(want["vague"])
    assert "false accepts" in (tmp_path / "same" / "report.md").read_text()
    other = asyncio.run(run("judge-y", "other").run())
    assert other["judge"]["rates"] is None
    assert "not measured" in (tmp_path / "other" / "report.md").read_text()
