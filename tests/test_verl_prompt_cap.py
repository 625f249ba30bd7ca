"""The prompt-length cap: a call whose prompt + max_tokens exceeds ``rollout.prompt_length + response_length``
(or vLLM's ``max_model_len``) fails its rollout with memrl's message before reaching the server, and a
sequence whose prompt exceeds ``rollout.prompt_length`` fails instead of being left-truncated by verl. A
failed rollout raises out of the loop: verl's v1 worker marks that prompt ``failure`` (one failed rollout,
not a crashed step; ``verl/trainer/ppo/v1/agent_loop_tq.py``, ``_run_prompt``)."""

from __future__ import annotations

import pytest

pytest.importorskip("verl")

from memrl.data import load_dataset  # noqa: E402
from memrl.integrations.verl.loops import context_cap  # noqa: E402
from memrl.integrations.verl.outputs import RolloutFailed  # noqa: E402
from memrl.integrations.verl.rows import read_rows  # noqa: E402
from memrl.llm.local import LocalEngine  # noqa: E402
from tests.test_verl_integration import SAMPLING, FakeServerManager, make_loop, row_kwargs  # noqa: E402
from tests.tiny_lm import make_tiny_lm  # noqa: E402


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return str(make_tiny_lm(tmp_path_factory.mktemp("tiny")))


@pytest.fixture(scope="module")
def sample():
    return load_dataset("sample")[0]


def test_the_cap_is_the_trained_length_or_vllms_max_model_len():
    from omegaconf import OmegaConf

    assert context_cap(OmegaConf.create({"prompt_length": 100, "response_length": 50})) == 150
    assert (
        context_cap(OmegaConf.create({"prompt_length": 100, "response_length": 50, "max_model_len": 120}))
        == 120
    )
    assert (
        context_cap(OmegaConf.create({"prompt_length": 100, "response_length": 50, "max_model_len": None}))
        == 150
    )


async def test_a_call_over_the_cap_fails_the_rollout_before_the_server(tiny, sample):
    server = FakeServerManager(LocalEngine(tiny))
    loop = make_loop("memagent", server, server.engine.tokenizer, rollout={"prompt_length": 40, "response_length": 40},
                     chunk_tokens=64, memory_tokens=12, max_chunks=2, answer_tokens=10)  # fmt: skip
    with pytest.raises(RolloutFailed, match=r"exceeds the model's context of 80 tokens"):
        await loop.run(SAMPLING, **row_kwargs(read_rows(sample)[0]))
    assert server.calls == []  # vLLM never saw it


def test_a_sequence_over_the_trained_length_fails_instead_of_stopping_the_step():
    """verl's v1 worker keeps prompts whole; a multi-turn sequence (first prompt + every later turn) longer than
    prompt_length + response_length would stop the step at verl's dynamic-batch assertion."""
    from memrl.agents.trajectory import Step, Trajectory
    from memrl.integrations.verl.outputs import agent_loop_outputs

    first = Step([], "", prompt_ids=[1] * 50, completion_ids=[2] * 10, logprobs=[-0.1] * 10)
    second = Step(
        [], "", prompt_ids=[1] * 50 + [2] * 10 + [9] * 30, completion_ids=[3] * 10, logprobs=[-0.1] * 10
    )
    traj = Trajectory("memupdate", "q1", steps=[first, second], reward=0.5)
    (out,) = agent_loop_outputs(traj, response_length=50, max_seq_len=100)  # 50 + 50 tokens: fits
    assert len(out.prompt_ids) + len(out.response_ids) == 100
    with pytest.raises(
        RolloutFailed, match=r"a sequence of 100 tokens exceeds rollout.prompt_length \+ response_length = 90"
    ):
        agent_loop_outputs(traj, response_length=50, max_seq_len=90)
