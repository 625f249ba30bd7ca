"""memrl's three agent loops through verl 0.9.1's own v1 training pipeline, on CPU, for two steps.

What runs is verl's code: the config composed from configs/verl by Hydra, the dataset and dataloader
(``RLHFDataset`` over ``memrl data prepare`` rows, ``PPOTrainer._init_dataloader``), the v1 agent loop worker
(``AgentLoopWorkerTQ``: loads memrl's loops from the shipped agent-loop yaml, runs ``rollout.n`` sessions
per prompt, post-processes the outputs into TransferQueue), verl's ``LLMServerClient`` between the loops and
the rollout server, the synchronous ``ReplayBuffer``, ``PPOTrainer._compute_advantage`` (GRPO with the
multi-output broadcast) and ``PPOTrainer._compute_metrics``. Faked are only the pieces that need Ray or a
GPU (tests/verl_fakes.py): the rollout server replica (a tiny real model), the load balancer and
TransferQueue's storage service. The actor's log-prob recomputation and update need GPU workers and are
not run; no step of the pipeline before or after them is skipped.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

pytest.importorskip("verl")

from omegaconf import OmegaConf  # noqa: E402

from memrl.data import load_dataset  # noqa: E402
from memrl.integrations.verl.resources import resource  # noqa: E402
from memrl.integrations.verl.rows import build_rows, read_rows, update_rows, write_parquet  # noqa: E402
from memrl.llm.local import LocalEngine  # noqa: E402
from tests.tiny_lm import make_tiny_lm  # noqa: E402
from tests.verl_fakes import KVStore, LoadBalancer, TokenServer  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CONFIG = {"read": "memagent", "update": "memupdate", "build": "membuilder"}
#: the shipped loop options, made small enough for a random tiny model on CPU
SMALL = {"memagent": {"chunk_tokens": 64, "memory_tokens": 12, "max_chunks": 2, "answer_tokens": 10},
         "memupdate": {"max_tool_calls": 2, "max_turns": 3, "max_tokens": 48, "embedder": "hashing"},
         "membuilder": {"max_operations": 1, "max_item_chars": 20, "answer_tokens": 8, "embedder": "hashing"}}  # fmt: skip


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return str(make_tiny_lm(tmp_path_factory.mktemp("tiny")))


@pytest.fixture(scope="module")
def rows() -> dict[str, list[dict]]:
    """Two rows per task from the bundled conversation, written outside any event loop (as ``memrl data
    prepare`` does: the build rows run the annotation expert)."""
    convs = load_dataset("sample")[0]
    build = [r for r in build_rows(convs, types=["episodic"]) if r["extra_info"]["session"] in (2, 3)]
    return {"read": read_rows(convs)[:2], "update": update_rows(convs)[:2], "build": build}


def compose(task: str, rows: list[dict], tiny: str, tmp: Path) -> object:
    """memrl's config for ``task`` as verl's main_ppo composes it, sized for two prompts x two rollouts."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    loops = OmegaConf.load(resource("agent_loops.yaml"))
    for entry in loops:
        entry.update(SMALL[entry.name])
    OmegaConf.save(loops, tmp / "agent_loops.yaml")
    train = write_parquet(rows, tmp / f"{task}.parquet")
    overrides = [f"data.train_files={train}", f"data.val_files={train}", "data.train_batch_size=2",
                 "data.dataloader_num_workers=0", f"actor_rollout_ref.model.path={tiny}",
                 "actor_rollout_ref.rollout.n=2", "actor_rollout_ref.rollout.prompt_length=8192",
                 "actor_rollout_ref.rollout.response_length=4096", "actor_rollout_ref.actor.ppo_mini_batch_size=2",
                 f"actor_rollout_ref.rollout.agent.agent_loop_config_path={tmp / 'agent_loops.yaml'}",
                 "trainer.n_gpus_per_node=1", "trainer.nnodes=1"]  # fmt: skip
    with initialize_config_dir(version_base=None, config_dir=str(ROOT / "configs/verl")):
        cfg = hydra_compose(config_name=CONFIG[task], overrides=overrides)
    OmegaConf.resolve(cfg)
    return cfg


def make_trainer(cfg, tokenizer):
    """verl's synchronous v1 trainer (the default ``trainer.v1.trainer_mode``), built by its own constructor,
    with what ``PPOTrainer.init`` would add for the steps below: tokenizer and dataloaders; no Ray resource
    pools or GPU worker groups, no checkpoint manager (the weight-sync hooks are not called)."""
    from verl.trainer.ppo.v1 import get_trainer_cls

    cls = get_trainer_cls(cfg.trainer.v1.trainer_mode)
    assert cls.__name__ == "PPOTrainerSync"
    trainer = cls(cfg)
    trainer.global_steps, trainer.tokenizer, trainer.processor = 0, tokenizer, None
    trainer.train_dataloader_it = None
    trainer.resource_pool_manager = SimpleNamespace(get_n_gpus=lambda: 1)
    trainer._init_dataloader()
    return trainer


def actor_log_probs(batch, model) -> None:
    """What the actor's ``_compute_old_log_prob`` writes (on GPU workers in a real run): each response
    token's log-probability under the current policy at the rollout temperature (1.0), here by the same
    tiny model the server samples from."""
    import transfer_queue as tq
    from tensordict import TensorDict

    data = tq.kv_batch_get(keys=batch.keys, partition_id="train", select_fields=["prompts", "responses"])
    values = []
    for prompt, response in zip(data["prompts"].unbind(), data["responses"].unbind(), strict=True):
        with torch.no_grad():
            logits = model(torch.cat([prompt, response])[None]).logits[0].float()
        logp = torch.log_softmax(logits[len(prompt) - 1 : -1], dim=-1)
        values.append(logp.gather(-1, response[:, None])[:, 0])
    nested = torch.nested.as_nested_tensor(values, layout=torch.jagged)
    tq.kv_batch_put(keys=batch.keys, partition_id="train",
                    fields=TensorDict({"old_log_probs": nested}, batch_size=len(values)))  # fmt: skip


async def training_step(trainer, worker, server, step: int) -> tuple[dict, object]:
    """One step of verl's synchronous v1 loop (``PPOTrainer.fit`` / ``_step_once``) up to the actor."""
    import transfer_queue as tq

    trainer.global_steps = server.global_steps = step
    submitted = []
    trainer.agent_loop_manager = SimpleNamespace(generate_sequences=submitted.append)
    trainer._add_batch_to_generate()  # prompts from the dataloader, registered as pending in TransferQueue
    await worker.generate_sequences(submitted[0])  # what AgentLoopManagerTQ dispatches to its workers
    await asyncio.gather(*list(worker.background_tasks))
    batch, metrics = trainer.replay_buffer.sample(global_steps=step, partition_id="train",
                                                  batch_size=trainer.config.data.train_batch_size)  # fmt: skip
    actor_log_probs(batch, server.engine.hf)
    batch = trainer._compute_advantage(batch, metrics)
    data = tq.kv_batch_get(keys=batch.keys, partition_id="train",
                           select_fields=["uid", "advantages", "rm_scores", "response_mask"])  # fmt: skip
    timing = {"step": 1.0, "gen": 0.5, "adv": 0.1}
    trainer._compute_metrics(batch, metrics, timing, global_steps=step, epoch=0)
    tq.kv_clear(keys=batch.keys, partition_id=batch.partition_id)  # as fit() does after logging
    return metrics, (batch, data)


@pytest.mark.slow
@pytest.mark.parametrize("task", ["read", "update", "build"])
async def test_two_training_steps_of_verls_v1_pipeline_on_memrls_outputs(
    tiny, rows, tmp_path, monkeypatch, task
):
    from verl.trainer.ppo.v1.agent_loop_tq import AgentLoopWorkerTQ
    from verl.workers.rollout.llm_server import LLMServerClient

    store = KVStore().install(monkeypatch)
    cfg = compose(task, rows[task], tiny, tmp_path)
    server = TokenServer(LocalEngine(tiny))
    balancer = LoadBalancer(server)
    worker = AgentLoopWorkerTQ.__ray_metadata__.modified_class(
        cfg, LLMServerClient(cfg, load_balancer_handle=balancer), teacher_client=None,
        reward_loop_worker_handles=None,
    )  # fmt: skip
    trainer = make_trainer(cfg, worker.tokenizer)
    for step in (1, 2):
        metrics, (batch, data) = await training_step(trainer, worker, server, step)
        # every rollout of both prompts finished and was sampled: 2 prompts x 2 sessions
        sessions = {key.rsplit("_", 1)[0] for key in batch.keys}
        assert len(sessions) == 4 and not any(t.get("is_padding") for t in batch.tags)
        # the weight version each sample was generated on: this step's, as the server reported it
        assert (
            {t["min_global_steps"] for t in batch.tags}
            == {t["max_global_steps"] for t in batch.tags}
            == {step}
        )
        assert metrics["training/off_policy/trajectory_spans/mean"] == 1.0
        assert (
            metrics["training/off_policy/trajectory_staleness/mean"] == -1.0
        )  # generated on this step's weights
        assert metrics["training/global_step"] == step
        # the log-probs the loops returned are those of the tokens they returned: verl's rollout-correction
        # diagnostics find the actor's recomputation (same model, same temperature) equal to them
        assert metrics["rollout_corr/log_ppl_abs_diff"] < 1e-3, metrics["rollout_corr/log_ppl_abs_diff"]
        # the loops' rewards reached verl: each sample's score is its episode's reward
        scores = [float(r.sum()) for r in data["rm_scores"].unbind()]
        assert metrics["critic/score/mean"] == pytest.approx(float(np.mean(scores)), abs=1e-6)
        # GRPO over each prompt's sessions, broadcast to every output of a session (MemAgent: one per call)
        advantages = [a for a in data["advantages"].unbind()]
        by_session: dict[str, set] = {}
        for key, adv, mask in zip(batch.keys, advantages, data["response_mask"].unbind(), strict=True):
            values = adv[mask.bool()]
            assert values.numel() and torch.allclose(values, values[0])  # one value per sample
            by_session.setdefault(key.rsplit("_", 1)[0], set()).add(round(float(values[0]), 5))
        assert all(len(v) == 1 for v in by_session.values())  # one advantage per session
        finals = {}
        for key, score in zip(batch.keys, scores, strict=True):
            finals[key.rsplit("_", 1)[0]] = score
        for uid in {s.rsplit("_", 1)[0] for s in sessions}:
            group = [s for s in sessions if s.startswith(uid + "_")]
            rewards = [finals[s] for s in group]
            advs = [next(iter(by_session[s])) for s in group]
            if rewards[0] == rewards[1]:
                assert advs == [0.0, 0.0]
            else:  # the better session gets the positive advantage
                assert (advs[0] > advs[1]) == (rewards[0] > rewards[1])
        assert not store.rows["train"]  # everything sampled was cleared
    # every call of an episode went through verl's client with a request id of its own conversation
    assert len(server.calls) == len(balancer.request_ids) > 0
    if task == "read":  # MemAgent's calls never continue each other: one id each
        assert len(set(balancer.request_ids)) == len(balancer.request_ids)
    assert {c["step"] for c in server.calls} == {1, 2}


@pytest.mark.slow
async def test_a_failed_rollout_is_no_sample_and_its_group_trains_on_the_others(
    tiny, rows, tmp_path, monkeypatch
):
    """The first server call of the step is aborted: that MemAgent episode fails (memrl raises), verl marks
    its prompt ``failure`` and stores nothing for it; verl 0.9.1's synchronous replay buffer still samples
    the group, with the rollouts that finished (docs/verl.md, Failures)."""
    from verl.trainer.ppo.v1.agent_loop_tq import AgentLoopWorkerTQ
    from verl.workers.rollout.llm_server import LLMServerClient

    store = KVStore().install(monkeypatch)
    cfg = compose("read", rows["read"], tiny, tmp_path)
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
    prompts = {k: t["status"] for k, t in store.tags["train"].items() if t.get("is_prompt")}
    assert sorted(prompts.values()) == ["failure", "finished"]
    failed = next(k for k, v in prompts.items() if v == "failure")
    stored = {k.rsplit("_", 1)[0] for k in store.rows["train"]}
    assert len(stored) == 3 and stored <= {f"{uid}_{i}" for uid in prompts for i in (0, 1)}
    assert len(stored & {f"{failed}_0", f"{failed}_1"}) == 1  # the failed session stored nothing
    batch, metrics = trainer.replay_buffer.sample(global_steps=1, partition_id="train", batch_size=2)
    assert {k.rsplit("_", 1)[0] for k in batch.keys} == stored  # 3 sessions: the failed one is no sample
    actor_log_probs(batch, server.engine.hf)
    batch = trainer._compute_advantage(batch, metrics)
    trainer._compute_metrics(batch, metrics, {"step": 1.0, "gen": 0.5, "adv": 0.1}, global_steps=1, epoch=0)
    assert metrics["training/off_policy/trajectory_spans/mean"] == 1.0
