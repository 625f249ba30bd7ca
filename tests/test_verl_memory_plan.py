"""The memory plan of every shipped verl config holds (memrl.integrations.verl.memory_plan), and a call over
the prompt-length cap fails its rollout, clearly, instead of reaching vLLM's max_model_len check.

The estimate's arithmetic is checked by hand on a small config; the shipped configs are composed by Hydra
from configs/verl exactly as verl's main_ppo composes them."""

from __future__ import annotations

import json

import pytest

from memrl.integrations.verl.memory_plan import (
    GB,
    MODELS,
    estimate,
    launch_report,
    model_spec,
    planned_estimate,
)


def small_cfg(**actor) -> dict:
    return {"actor_rollout_ref": {
        "rollout": {"prompt_length": 1000, "response_length": 1000, "gpu_memory_utilization": 0.5,
                    "log_prob_micro_batch_size_per_gpu": 2, "log_prob_use_dynamic_bsz": False},
        "ref": {"log_prob_micro_batch_size_per_gpu": 2, "log_prob_use_dynamic_bsz": False},
        "actor": {"use_dynamic_bsz": False, "ppo_micro_batch_size_per_gpu": 1, "ppo_max_token_len_per_gpu": 4000,
                  "fsdp_config": {"model_dtype": "fp32", "param_offload": False, "optimizer_offload": False},
                  **actor}}}  # fmt: skip


def test_estimate_by_hand():
    model = MODELS["Qwen2.5-7B-Instruct"]
    e = estimate(small_cfg(), model, gpus=2, gpu_gb=80)
    half = model.params / 2
    assert (e.weights, e.grads, e.optimizer) == (4 * half, 4 * half, 8 * half)  # fp32 master, grads, AdamW
    # the largest micro-batch: log-probs of 2 x 2000 tokens (the update's 1 x 2000 keeps logits + gradient)
    assert e.logits == 4000 * model.vocab * 4
    assert e.vllm == 40 * GB and e.resident_in_rollout == 12 * half  # no offload: the actor stays beside vLLM
    offloaded = estimate(small_cfg(fsdp_config={"model_dtype": "fp32", "param_offload": True,
                                                "optimizer_offload": True}), model, gpus=2, gpu_gb=80)  # fmt: skip
    assert offloaded.resident_in_rollout == 0 and offloaded.training == e.training


def test_the_plan_memrl_shipped_before_does_not_fit_and_the_estimate_says_so():
    """Issue 37: a 7B fp32 actor on one GPU (~122 GB of states) and 24k-token log-prob micro-batches of 2
    (~29 GB of fp32 logits)."""
    cfg = small_cfg()
    cfg["actor_rollout_ref"]["rollout"].update(prompt_length=16384, response_length=8192)
    e = estimate(cfg, MODELS["Qwen2.5-7B-Instruct"], gpus=1, gpu_gb=80)
    assert not e.fits and e.weights + e.grads + e.optimizer > 120 * GB
    assert e.logits == pytest.approx(29.9 * GB, rel=0.01)
    assert "DOES NOT FIT" in e.line()


def test_model_spec_from_a_model_folder(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"num_hidden_layers": 2, "hidden_size": 64, "vocab_size": 100,
                                                      "intermediate_size": 128, "tie_word_embeddings": True}))  # fmt: skip
    spec = model_spec(str(tmp_path))
    assert spec.params == 2 * (4 * 64 * 64 + 3 * 64 * 128) + 100 * 64 and spec.layers == 2
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": 2000}}))
    assert model_spec(str(tmp_path)).params == 1000  # bf16 bytes / 2
    assert model_spec("/nowhere/Qwen2.5-3B-Instruct") == MODELS["Qwen2.5-3B-Instruct"]
    with pytest.raises(FileNotFoundError):
        model_spec("/nowhere/unknown-model")


# --- the shipped configs, composed by Hydra (imports verl) -------------------------------------------------


@pytest.fixture(scope="module")
def shipped_configs():
    pytest.importorskip("verl")
    from memrl.integrations.verl.memory_plan import compose, shipped

    return {name: compose(name) for name in shipped()}


def test_every_shipped_config_fits_the_gpu_memory_it_claims(shipped_configs):
    assert set(shipped_configs) >= {"memagent", "memupdate", "membuilder", "memupdate_locomo"}
    for name, cfg in shipped_configs.items():
        e = planned_estimate(cfg)
        assert e.fits, f"{name}: {e.line()}"
        arr = cfg["actor_rollout_ref"]
        seq = arr["rollout"]["prompt_length"] + arr["rollout"]["response_length"]
        # dynamic batch size, as MemAgent: one sequence must fit a micro-batch (verl asserts it)
        assert arr["actor"]["use_dynamic_bsz"] and arr["ref"]["log_prob_use_dynamic_bsz"], name
        assert arr["actor"]["ppo_max_token_len_per_gpu"] >= seq, name
        assert arr["ref"]["log_prob_max_token_len_per_gpu"] >= seq, name
        fsdp = arr["actor"]["fsdp_config"]
        assert fsdp["param_offload"] and fsdp["optimizer_offload"] and fsdp["dtype"] == "bfloat16", name


def test_seven_b_on_one_gpu_is_refused_by_the_estimate_but_fits_eight(shipped_configs):
    cfg = shipped_configs["memupdate_locomo"]
    seven = MODELS["Qwen2.5-7B-Instruct"]
    assert not estimate(cfg, seven, gpus=1, gpu_gb=80).fits
    assert estimate(cfg, seven, gpus=8, gpu_gb=80).fits
    report = launch_report(cfg, "Qwen2.5-7B-Instruct", 1, 80.0)
    assert "DOES NOT FIT" in report[0] and "more GPUs" in report[-1]


def test_the_memory_table_command_lists_every_config(shipped_configs, capsys):
    from memrl.integrations.verl.memory_plan import main

    assert main([]) == 0
    out = capsys.readouterr().out
    assert all(f"| {name} |" in out for name in shipped_configs)
