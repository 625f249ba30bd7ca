"""The trainer-side steps of verl's v1 step that run on the controller, on CPU, with memrl's outputs: batch
balancing over data-parallel ranks with verl's pad rows, advantages and metrics on the padded batch, the
mini-batch split that makes a ``read`` step (chunks + 1) optimizer updates, and one policy update with verl's
own loss functions (``core_algos``: the vanilla clipped policy loss, token-mean aggregation, the low-var KL)
on the tiny model.

What does NOT run here, because verl 0.9.1's workers refuse a CPU device (the FSDP engine is registered for
``device=["cuda", "npu"]`` only: ``verl/workers/engine/fsdp/transformer_impl.py`` line 1143, looked up by
``EngineRegistry.new`` from ``TrainingWorker.__init__``): the FSDP engine's forward for log-probs (its
``prepare_model_inputs``/``forward_step``), ``ppo_loss`` in ``verl/workers/utils/losses.py`` as the engine
calls it, the optimizer step under FSDP, weight sync to vLLM and the FSDP checkpoint manager. docs/verl.md
lists them.
"""

from __future__ import annotations

import asyncio
import math
from types import SimpleNamespace

import pytest
import torch

pytest.importorskip("verl")

from memrl.llm.local import LocalEngine  # noqa: E402
from tests import test_verl_pipeline as pipeline  # noqa: E402
from tests.test_verl_pipeline import actor_log_probs, compose, make_trainer  # noqa: E402
from tests.verl_fakes import KVStore, LoadBalancer, TokenServer  # noqa: E402

tiny, rows = pipeline.tiny, pipeline.rows  # the pipeline test's fixtures (the tiny model, two rows per task)


async def one_read_step_with_a_failed_rollout(cfg, tiny):
    """A ``read`` step whose first call is aborted: 3 finished sessions of 3 outputs (2 chunk calls + the
    answer) = 9 samples, which no data-parallel size of 2 divides."""
    from verl.trainer.ppo.v1.agent_loop_tq import AgentLoopWorkerTQ
    from verl.workers.rollout.llm_server import LLMServerClient

    server = TokenServer(LocalEngine(tiny))
    server.abort_calls = {0}
    client = LLMServerClient(cfg, load_balancer_handle=LoadBalancer(server))
    worker = AgentLoopWorkerTQ.__ray_metadata__.modified_class(cfg, client, teacher_client=None,
                                                               reward_loop_worker_handles=None)  # fmt: skip
    trainer = make_trainer(cfg, worker.tokenizer)
    trainer.global_steps = server.global_steps = 1
    submitted = []
    trainer.agent_loop_manager = SimpleNamespace(generate_sequences=submitted.append)
    trainer._add_batch_to_generate()
    await worker.generate_sequences(submitted[0])
    await asyncio.gather(*list(worker.background_tasks))
    batch, metrics = trainer.replay_buffer.sample(global_steps=1, partition_id="train", batch_size=2)
    return trainer, server, batch, metrics


@pytest.mark.slow
async def test_balance_with_pad_rows_advantages_metrics_and_one_policy_update(
    tiny, rows, tmp_path, monkeypatch
):
    import transfer_queue as tq
    from verl.trainer.ppo.core_algos import agg_loss, get_policy_loss_fn, kl_penalty
    from verl.utils.config import omega_conf_to_dataclass

    KVStore().install(monkeypatch)
    cfg = compose("read", rows["read"], tiny, tmp_path)
    trainer, server, batch, metrics = await one_read_step_with_a_failed_rollout(cfg, tiny)
    real = len(batch)
    assert real == 9

    # _balance_batch: the Ray worker group is the boundary; it reports 2 data-parallel ranks for the actor
    trainer.actor_rollout_wg = SimpleNamespace(_dispatch_info={"actor": [0, 1]})
    batch = trainer._balance_batch(batch, metrics)
    mini = (
        cfg.actor_rollout_ref.actor.ppo_mini_batch_size * cfg.actor_rollout_ref.rollout.n
    )  # samples per update
    assert len(batch) == 12 and len(batch) % math.lcm(2, mini) == 0  # verl's pad rows: 3
    pads = [k for k, t in zip(batch.keys, batch.tags, strict=True) if t.get("is_padding")]
    assert len(pads) == 3 and any(k.startswith("global_seqlen/") for k in metrics)
    # a read step is one optimizer update per mini-batch of ppo_mini_batch_size x n SAMPLES, and each
    # MemAgent session gives (chunks + 1) samples: here 12 / 4 = 3 updates = 2 chunks + 1
    assert len(batch) // mini == 3

    actor_log_probs(batch, server.engine.hf)  # the FSDP engine's job on a GPU (see the module docstring)
    batch = trainer._compute_advantage(batch, metrics)
    trainer._compute_metrics(batch, metrics, {"step": 1.0, "gen": 0.5, "adv": 0.1}, global_steps=1, epoch=0)
    data = tq.kv_batch_get(keys=batch.keys, partition_id="train",
                           select_fields=["prompts", "responses", "response_mask", "old_log_probs", "advantages",
                                          "rm_scores"])  # fmt: skip
    is_pad = torch.tensor([k in pads for k in batch.keys])
    scores = torch.stack([r.sum() for r in data["rm_scores"].unbind()])
    assert metrics["critic/score/mean"] == pytest.approx(
        float(scores[~is_pad].mean()), abs=1e-6
    )  # pads left out
    for adv, pad in zip(data["advantages"].unbind(), is_pad, strict=True):
        if pad:
            assert torch.count_nonzero(adv) == 0  # a pad row carries no advantage

    # one policy update with verl's loss functions on the tiny model (what ppo_loss computes inside the engine).
    # A random tiny model's rewards are all 0, so the advantages are set here: +1 for the first real sample,
    # -1 for the second; the update must raise the first response's log-probability and lower the second's.
    actor_cfg = omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)
    model = server.engine.hf
    real_idx = [i for i, pad in enumerate(is_pad.tolist()) if not pad][:2]
    prompts, responses = data["prompts"].unbind(), data["responses"].unbind()
    masks, olds = data["response_mask"].unbind(), data["old_log_probs"].unbind()

    def logp(i: int) -> torch.Tensor:
        logits = model(torch.cat([prompts[i], responses[i]])[None]).logits[0].float()
        return torch.log_softmax(logits[len(prompts[i]) - 1 : -1], -1).gather(-1, responses[i][:, None])[:, 0]

    with torch.no_grad():
        start = [float((logp(i) * masks[i]).sum()) for i in real_idx]
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-3)
    for i, sign in zip(real_idx, (1.0, -1.0), strict=True):
        mask = masks[i].bool()[None]
        adv = torch.full_like(olds[i], sign)[None]
        new = logp(i)[None]
        pg, pg_metrics = get_policy_loss_fn(actor_cfg.policy_loss.loss_mode)(
            old_log_prob=olds[i][None], log_prob=new, advantages=adv, response_mask=mask,
            loss_agg_mode=actor_cfg.loss_agg_mode, config=actor_cfg,
        )  # fmt: skip
        kl = agg_loss(kl_penalty(new, olds[i][None], actor_cfg.kl_loss_type), mask, actor_cfg.loss_agg_mode)
        loss = pg + actor_cfg.kl_loss_coef * kl
        assert math.isfinite(float(loss)) and "actor/pg_clipfrac" in pg_metrics
        (loss / 2).backward()
    opt.step()
    with torch.no_grad():
        end = [float((logp(i) * masks[i]).sum()) for i in real_idx]
    assert end[0] > start[0] and end[1] < start[1]
