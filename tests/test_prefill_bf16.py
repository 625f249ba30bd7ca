"""The evaluation-only bf16 prefill of the local back-end: it generates, leaves the model in fp32, is
switched off after an evaluation, and the trainer refuses to draw rollouts with it on (the rollouts would
not come from the policy the trainer scores)."""

from __future__ import annotations

import pytest

from memrl.errors import ConfigError
from memrl.llm.base import SamplingParams
from memrl.llm.local import LocalLLM
from memrl.train.loop import LoopConfig, train
from memrl.train.tasks import ReadTasks
from tests.tiny_lm import make_tiny_lm


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> str:
    return str(make_tiny_lm(tmp_path_factory.mktemp("tiny") / "lm"))


def test_prefill_in_bf16_generates_with_an_fp32_model(tiny):
    import torch

    llm = LocalLLM(tiny).load()
    msgs = [[{"role": "user", "content": "Where did Anna move? Lisbon, Porto, May 2024."}],
            [{"role": "user", "content": "The lighthouse keeper was named Ana."}]]  # fmt: skip
    sampling = SamplingParams(temperature=0.0, max_tokens=6)
    full = llm.generate_sync(msgs, sampling=sampling)
    llm.engine.prefill_bf16 = True
    mixed = llm.generate_sync(msgs, sampling=sampling)
    assert all(0 < len(r.completion_ids) <= 6 for r in mixed)
    # the first token's log-probability comes from the bf16 prompt pass: close to fp32's, not equal
    assert all(abs(a.logprobs[0] - b.logprobs[0]) < 0.1 for a, b in zip(full, mixed, strict=True))
    assert all(p.dtype == torch.float32 for p in llm.hf_model.parameters())


def test_training_refuses_a_back_end_that_prefills_in_bf16(tiny, tmp_path):
    from memrl.data import load_dataset

    llm = LocalLLM(tiny).load()
    llm.engine.prefill_bf16 = True
    with pytest.raises(ConfigError, match="bfloat16"):
        train(
            llm,
            ReadTasks([load_dataset("sample")[0][0]]),
            LoopConfig(steps=1, output_dir=str(tmp_path)),
            progress=False,
        )
    assert not (tmp_path / "metrics.jsonl").exists()
