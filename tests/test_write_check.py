"""The write check: junk is refused, the expert's writes on LoCoMo's training conversations pass (the figures
the thresholds were chosen on), and a job's junk is shown as refused events and never stored."""

from __future__ import annotations

import json

from memrl.agents.jobs import JobRunner
from memrl.agents.jobs.write_check import (
    JUNK,
    JUNK_SOURCE,
    WriteCheck,
    _measure,
    check_events,
    check_write,
    job_source,
)
from memrl.llm.scripted import ScriptedLLM
from memrl.memory.embedders.providers import HashingEmbedder
from memrl.memory.facade.memory import AsyncMemory


def test_the_junk_of_issue_56_is_refused_with_its_rule():
    reasons = [check_write(text, JUNK_SOURCE) for text in JUNK]
    assert reasons[0] == "not grounded: no word from the session"  # MADE_MATHEMATICAL_MEMORY
    assert reasons[1].startswith("degenerate: one token repeated")  # MADE_MADE_MADE_...
    assert reasons[2].startswith("degenerate: a repetition loop")  # one sentence six times
    assert reasons[3] == reasons[4] == "no words: only numbers or punctuation"  # "123", "2023-05-22"


def test_grounded_writes_pass():
    for text in (
        "Alice moved to Lisbon last month.",
        "User - Home: Lisbon",
        "2024-05-01: the user moved to Lisbon",
    ):
        assert check_write(text, JUNK_SOURCE) is None, text
    assert check_write("I'm a Portuguese person.", JUNK_SOURCE) == "not grounded: no word from the session"
    # a paraphrase with some new words passes; mostly invented words do not
    assert check_write("Moved to Lisbon, a city in Portugal", JUNK_SOURCE) is None
    assert check_write("Lisbon trams, pastries, fado, beaches, museums, bakeries", JUNK_SOURCE).startswith(
        "not grounded"
    )
    assert check_write("very very very", "very", WriteCheck(max_run=4)) is None


def test_thresholds_on_locomo_training_conversations(locomo_path):
    """Every write of the annotation expert on the 7 training conversations passes; every junk write is
    refused. The lowest grounded share of an expert write (0.2, an event summary of a trip the session only
    hints at) is above the threshold 0.15."""
    got = _measure(str(locomo_path))
    assert got["conversations"] == 7
    assert got["expert_writes"] == got["expert_passed"] == 2507 and got["expert_refused"] == 0
    assert got["junk"] == got["junk_refused"] == 5
    assert min(got["lowest_grounded"]) == 0.2 > WriteCheck().min_grounded


def test_check_events_refuses_changes_not_deletions_and_a_merge_whole():
    events = [
        {"event": "added", "id": "a", "type": "semantic", "before": None, "after": "123", "op": "ADD"},
        {"event": "deleted", "id": "b", "type": "semantic", "before": "old", "after": None, "op": "DELETE"},
        {"event": "updated", "id": "core", "type": "core", "before": "x", "after": "", "op": "CORE_REPLACE"},
        # an update keeps words of the text it replaced
        {
            "event": "updated",
            "id": "c",
            "type": "semantic",
            "before": "Alice - Pet: a cat named Tom",
            "after": "Alice - Pet: a cat named Tom, lives in Lisbon",
            "op": "UPDATE",
        },  # fmt: skip
        {
            "event": "merged",
            "id": "d",
            "type": "semantic",
            "before": "x",
            "after": "MADE MADE MADE",
            "op": "MERGE",
        },
        {"event": "merged", "id": "e", "type": "semantic", "before": "y", "after": None, "op": "MERGE"},
    ]
    keep, refused = check_events(events, JUNK_SOURCE)
    assert [e["id"] for e in keep] == ["b", "core", "c"]
    assert [(e["id"], e["event"]) for e in refused] == [("a", "refused"), ("d", "refused"), ("e", "refused")]
    assert refused[2]["reason"] == "write check: part of a refused merge"


def test_job_source_holds_speakers_names_times_and_what_the_namespace_knew():
    req = {"messages": [{"role": "user", "name": "Ana", "content": [{"type": "text", "text": "hi"}]}],
           "session_time": "2024-05-01"}  # fmt: skip
    src = job_source(req, ["Ana - Home: Porto"])
    assert "Ana" in src and "2024-05-01" in src and "Porto" in src and "hi" in src


async def test_a_jobs_junk_is_refused_counted_and_never_stored(db_path):
    answers = {
        "core": {"operation": "APPEND", "content": " ".join(["I'm a Portuguese person."] * 6)},
        "episodic": {"operations": [{"operation": "ADD", "memory": "2023-05-22"}]},
        "semantic": {
            "operations": [
                {"operation": "ADD", "memory": "MADE_MATHEMATICAL_MEMORY"},
                {"operation": "ADD", "memory": "User - Home: Lisbon"},
            ]
        },  # fmt: skip
        "procedural": {"operations": [{"operation": "ADD", "memory": "MADE_" * 20}]},
    }

    def reply(messages, tools, json_schema):
        t = next(t for t in answers if f"is the {t.upper()} memory" in messages[0]["content"])
        return json.dumps(answers[t])

    memory = AsyncMemory(db_path, embedder=HashingEmbedder(64))
    try:
        runner = JobRunner(memory, ScriptedLLM(reply))
        msgs = [{"role": "user", "content": "I moved to Lisbon last month"}]
        job, _ = await runner.submit("alice", "remember", {"messages": msgs})
        job = await runner.wait(job.id, 20)
        assert job.status == "succeeded", job.error
        assert job.result["stats"]["refused"] == 4
        refused = [e for e in job.result["events"] if e["event"] == "refused"]
        assert {e["type"] for e in refused} == {"core", "episodic", "semantic", "procedural"}
        assert all(e["reason"].startswith("write check: ") for e in refused)
        assert [it.content for it in await memory.list(user_id="alice")] == ["User - Home: Lisbon"]
        assert await memory.core(namespace="alice") == ""
    finally:
        await memory.close()


def test_without_a_model_the_writer_remembers_raw_and_says_so(caplog):
    from memrl.agents.jobs import LOCAL_WARNING, describe_writer, job_writer, llm_from_spec

    text = describe_writer(job_writer())
    assert "agent=raw" in text and "no capable model" in text
    assert "with scripted" in describe_writer(job_writer(ScriptedLLM(lambda *a: "{}")))
    with caplog.at_level("WARNING"):
        llm_from_spec("local")  # built lazily: nothing loads here
    assert [r.getMessage() for r in caplog.records] == [LOCAL_WARNING]
    assert "\n" not in LOCAL_WARNING


def test_serve_memory_says_at_start_who_writes(tmp_path):
    """A real ``memrl serve memory``: no --llm, the banner says remember is raw; --llm local warns once."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "MEMRL_LLM": ""}
    env.pop("MEMRL_LLM")
    for extra, want in (([], "agent=raw"), (["--llm", "local"], "with ")):
        argv = [
            "serve",
            "memory",
            "--port",
            "0",
            "--db",
            str(tmp_path / "m.db"),
            "--embedder",
            "hashing",
            *extra,
        ]
        proc = subprocess.Popen([sys.executable, "-m", "memrl.cli.main", *argv], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=env)  # fmt: skip
        try:
            assert proc.stdout.readline().startswith("serving ")
            assert want in proc.stdout.readline()
        finally:
            proc.terminate()
            _, err = proc.communicate(timeout=30)
        assert ("warning: --llm local is the offline 135M model" in err) == bool(extra), err
