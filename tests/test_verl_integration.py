"""memrl on verl 0.9, tested up to the GPU boundary (verl's own ``*_on_cpu.py`` tests are the pattern):
the agent loops run against a fake ``server_manager`` backed by real generation with the tiny model, and
verl's own registry, dataset, config composition, reward manager and GRPO code are the real thing."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("verl")

from omegaconf import OmegaConf  # noqa: E402
from verl.experimental.agent_loop.agent_loop import DictConfigWrap, _agent_loop_registry  # noqa: E402
from verl.workers.rollout.replica import TokenOutput  # noqa: E402

from memrl.data import load_dataset  # noqa: E402
from memrl.integrations.verl.rows import RowTask, build_rows, read_rows, update_rows, write_parquet  # noqa: E402
from memrl.llm.base import SamplingParams  # noqa: E402
from memrl.llm.local import LocalEngine  # noqa: E402
from memrl.llm.tokens import TokenRequest  # noqa: E402
from memrl.rewards.memagent import memagent_reward  # noqa: E402
from tests.tiny_lm import make_tiny_lm  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SAMPLING = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0, "logprobs": True}


class FakeServerManager:
    """verl's ``LLMServerClient.generate`` contract on real generation: SGLang's ``ebnf`` is enforced."""

    def __init__(self, engine: LocalEngine) -> None:
        self.engine = engine.load()
        self.calls: list[dict] = []

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kw):
        p = dict(sampling_params)
        sampling = SamplingParams(temperature=p["temperature"], top_p=p["top_p"], max_tokens=p["max_tokens"],
                                  stop=tuple(p.get("stop") or ()) or None)  # fmt: skip
        constraint = {"grammar": p["ebnf"]} if "ebnf" in p else None
        res = await self.engine.generate(TokenRequest(tuple(prompt_ids), sampling, constraint))
        out = TokenOutput(token_ids=res.completion_ids, log_probs=res.logprobs if p.get("logprobs") else None,
                          stop_reason="completed")  # fmt: skip
        self.calls.append({"request_id": request_id, "prompt_ids": list(prompt_ids), "params": p, "out": out})
        return out


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return str(make_tiny_lm(tmp_path_factory.mktemp("tiny")))


@pytest.fixture(scope="module")
def sample():
    return load_dataset("sample")[0]


def make_loop(name: str, server, tokenizer, *, trainer: dict | None = None, rollout: dict | None = None,
              **options):  # fmt: skip
    """Instantiate a registered loop exactly as verl's AgentLoopWorker does (hydra.utils.instantiate)."""
    import hydra
    from verl.utils.dataset.rl_dataset import RLHFDataset

    import memrl.integrations.verl.plugin  # noqa: F401  (what the verl.plugins entry point imports)

    lengths = rollout or {"prompt_length": 4096, "response_length": 4096}
    cfg = OmegaConf.create({"actor_rollout_ref": {"rollout": lengths},
                            "data": {"apply_chat_template_kwargs": {}}, "trainer": trainer or {"use_v1": True}})  # fmt: skip
    return hydra.utils.instantiate(
        config={**_agent_loop_registry[name], **options}, trainer_config=DictConfigWrap(cfg),
        server_manager=server, tokenizer=tokenizer, processor=None, hf_model_type=None,
        dataset_cls=RLHFDataset, data_config=DictConfigWrap(cfg.data),
    )  # fmt: skip


def row_kwargs(row: dict) -> dict:
    return {**row, "raw_prompt": row["prompt"], "index": row["extra_info"]["index"]}


def check_tokens(outputs, server):
    """Every model token of the outputs is exactly a token the server returned, with its log-prob."""
    sampled = [t for c in server.calls for t in c["out"].token_ids]
    lps = [x for c in server.calls for x in c["out"].log_probs]
    got = [t for o in outputs for t, m in zip(o.response_ids, o.response_mask, strict=True) if m == 1]
    got_lp = [x for o in outputs for x, m in zip(o.response_logprobs, o.response_mask, strict=True) if m == 1]
    assert got == sampled and got_lp == lps
    for o in outputs:
        assert len(o.response_ids) == len(o.response_mask) == len(o.response_logprobs)


async def test_memagent_loop_one_output_per_call_and_the_episode_reward_on_the_last(tiny, sample):
    server = FakeServerManager(LocalEngine(tiny))
    loop = make_loop("memagent", server, server.engine.tokenizer, chunk_tokens=64, memory_tokens=12,
                     max_chunks=2, answer_tokens=10)  # fmt: skip
    row = read_rows(sample)[0]
    outputs = await loop.run(SAMPLING, **row_kwargs(row))
    assert len(outputs) == len(server.calls) == 3  # two chunks read, one answer
    for o, call in zip(outputs, server.calls, strict=True):
        assert o.prompt_ids == call["prompt_ids"] and o.response_ids == call["out"].token_ids
        assert set(o.response_mask) == {1}
    ids = [c["request_id"] for c in server.calls]  # each call starts a new conversation: its own id,
    assert len(set(ids)) == len(ids) and len({i.rsplit("-", 1)[0] for i in ids}) == 1  # one episode prefix
    check_tokens(outputs, server)
    final = server.engine.tokenizer.decode(outputs[-1].response_ids, skip_special_tokens=True)
    golds = json.loads(row["reward_model"]["ground_truth"])
    assert outputs[-1].reward_score == memagent_reward(final, golds)
    assert outputs[-1].extra_fields["reward_extra_info"]["score"] == outputs[-1].reward_score
    assert all(o.reward_score is None for o in outputs[:-1])  # verl's v1 worker copies the final one
    assert all(c["params"]["temperature"] == 1.0 and "ebnf" not in c["params"] for c in server.calls)


async def test_memupdate_loop_one_sequence_with_tool_tokens_masked_and_memupdates_reward(tiny, sample):
    server = FakeServerManager(LocalEngine(tiny))
    loop = make_loop("memupdate", server, server.engine.tokenizer, max_tool_calls=2, max_turns=3,
                     max_tokens=160, tool_choice="required", sample_size=2, question_hits=1,
                     embedder="hashing", constraints="sglang")  # fmt: skip
    row = update_rows(sample)[0]
    outputs = await loop.run(SAMPLING, **row_kwargs(row))
    assert all("ebnf" in c["params"] for c in server.calls)  # memrl's tool grammar went to the server
    check_tokens(outputs, server)
    # every turn is shown back to the model as the text it wrote (a call cut off by max_tokens too), so
    # each turn continues the previous one: the whole episode is one sequence
    assert len(outputs) == 1 and len(server.calls) > 1
    # one request id per conversation: a continued turn keeps its sequence's id (verl's sticky routing)
    assert len({c["request_id"] for c in server.calls}) == len(outputs)
    (o,) = outputs  # the tool results sit between the model's turns, masked
    context = [t for t, m in zip(o.response_ids, o.response_mask, strict=True) if m == 0]
    assert "tool" in server.engine.tokenizer.decode(context)
    info = outputs[-1].extra_fields["reward_extra_info"]
    assert outputs[-1].reward_score == pytest.approx((info["p_new"] - info["p_old"]) * info["efficiency"])


@pytest.fixture(scope="module")
def build_row(sample):  # rows are written outside any event loop, as memrl data prepare does
    return next(r for r in build_rows(sample, types=["episodic"]) if r["extra_info"]["session"] == 2)


async def test_membuilder_loop_trains_the_rows_agent_with_its_adrpo_reward(tiny, build_row):
    server = FakeServerManager(LocalEngine(tiny))
    loop = make_loop("membuilder", server, server.engine.tokenizer, embedder="hashing", constraints="sglang",
                     max_operations=1, max_item_chars=20, answer_tokens=7)  # fmt: skip
    row = build_row
    assert RowTask.from_kwargs(row).memory_lines()  # session 2 starts from the expert's memory of session 1
    outputs = await loop.run(SAMPLING, **row_kwargs(row))
    assert len(outputs) == 1 and set(outputs[0].response_mask) == {1}
    episodic = [
        c for c in server.calls if "EPISODIC memory" in server.engine.tokenizer.decode(c["prompt_ids"])
    ]
    assert outputs[0].response_ids == episodic[0]["out"].token_ids
    info = outputs[0].extra_fields["reward_extra_info"]
    assert -1.0 <= outputs[0].reward_score <= 1.0 and info["score"] == outputs[0].reward_score
    assert outputs[0].extra_fields["advantage_weight"] in (1.0, 4.0)
    # the scoring questions are answered greedily within answer_tokens, whatever the rollout temperature;
    # the agents' own calls sample at verl's temperature
    answers = [c for c in server.calls if c["params"]["max_tokens"] == 7]
    assert answers and all(c["params"]["temperature"] == 0.0 for c in answers)
    # the session's one question and the decoy `memrl data prepare` wrote into the row (one conversation:
    # its later question), which takes back what the memory answers by chance
    decoys = RowTask.from_kwargs(row).decoys()
    assert [d.id for d in decoys] == ["decoy:sample-1:q4"] and len(answers) == 2
    assert all(c["params"]["temperature"] == 1.0 for c in server.calls if c not in answers)
    # ADRPO's length penalty compares with the expert's reply for this session, written into the row
    expert = json.loads(row["extra_info"]["expert_chars"])["episodic"]
    assert expert > 0 and info["expert_length"] == expert


async def test_tool_episodes_in_a_database_file_delete_their_clone_when_dropped(tmp_path):
    from memrl.integrations.verl.tools import EpisodeStores
    from memrl.memory.facade.memory import AsyncMemory

    db = str(tmp_path / "memory.db")
    seed = AsyncMemory(db, embedder="hashing")
    await seed.add("Lena has a dog named Biscuit", namespace="initial")
    episodes = EpisodeStores(max_episodes=1)
    first = await episodes.get("episode-aaaaaaaa", {"db": db, "namespace": "initial"}, "hashing")
    names = {n["name"] for n in await seed.namespaces()}
    assert first.namespace in names
    await episodes.get("episode-bbbbbbbb", {"db": db, "namespace": "initial"}, "hashing")  # evicts the first
    names = {n["name"] for n in await seed.namespaces()}
    assert first.namespace not in names and "initial" in names  # the clone is gone, the original kept
    await seed.close()


async def test_memrl_tools_load_from_the_yaml_through_verls_registry(tmp_path, sample):
    from verl.tools.tool_registry import initialize_tools_from_config

    from memrl.tools.memupdate import MEMUPDATE_TOOLS

    text = (
        (ROOT / "memrl/resources/verl/memupdate_tools.yaml")
        .read_text()
        .replace("embedder: minilm", "embedder: hashing")
    )
    (tmp_path / "tools.yaml").write_text(text)
    tools = {t.name: t for t in initialize_tools_from_config(str(tmp_path / "tools.yaml"))}
    assert sorted(tools) == sorted(MEMUPDATE_TOOLS.by_name)
    for name, tool in tools.items():
        fn = MEMUPDATE_TOOLS.by_name[name].schema["function"]
        assert tool.tool_schema.function.description == fn["description"]
        assert sorted(tool.tool_schema.function.parameters.properties) == sorted(
            fn["parameters"]["properties"]
        )

    class AgentData:  # what verl's ToolAgentLoop passes to execute
        request_id = "episode-1"

    kwargs = {"create_kwargs": {"conversation": json.dumps(sample[0].to_dict())}}
    for step in (
        {"operation": "create", "content": "Zebra Quokka likes violins", "memory_type": "semantic"},
    ):
        iid, _ = await tools["manage_memory"].create(create_kwargs=kwargs["create_kwargs"])
        response, _, metrics = await tools["manage_memory"].execute(iid, step, agent_data=AgentData())
        await tools["manage_memory"].release(iid)
        assert metrics["ok"] == 1.0
    iid, _ = await tools["search_memory"].create(create_kwargs=kwargs["create_kwargs"])
    response, _, _ = await tools["search_memory"].execute(
        iid, {"query": "Zebra Quokka violins"}, agent_data=AgentData()
    )
    assert "Zebra Quokka likes violins" in response.text  # the episode's store outlived create/release


def test_prepared_parquet_loads_through_verls_dataset_with_short_prompts(tmp_path, tiny, sample):
    from transformers import AutoTokenizer
    from verl.utils.dataset.rl_dataset import RLHFDataset

    rows = read_rows(sample)
    path = write_parquet(rows, tmp_path / "read.parquet")
    cfg = OmegaConf.create({"prompt_key": "prompt", "max_prompt_length": 128, "filter_overlong_prompts": True,
                            "filter_overlong_prompts_workers": 1})  # fmt: skip
    data = RLHFDataset([str(path)], AutoTokenizer.from_pretrained(tiny), cfg)
    assert len(data) == len(rows)  # the long document is not in the prompt, so nothing is filtered
    item = data[3]
    assert item["agent_name"] == "memagent" and item["raw_prompt"] == rows[3]["prompt"]
    assert item["extra_info"]["document"] == rows[3]["extra_info"]["document"] and item["index"] == 3


def test_configs_compose_with_hydra_on_verls_ppo_trainer():
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(version_base=None, config_dir=str(ROOT / "configs/verl")):
        cfg = compose(config_name="memagent", overrides=["data.train_files=x.parquet"])
        update = compose(config_name="memupdate")
    assert cfg.algorithm.adv_estimator == "grpo" and cfg.algorithm.norm_adv_by_std_in_grpo is False
    assert cfg.trainer.use_v1 and cfg.actor_rollout_ref.rollout.n == 16
    assert cfg.reward.custom_reward_function.path == "pkg://memrl.integrations.verl.reward"
    assert cfg.actor_rollout_ref.actor.ppo_mini_batch_size  # verl's own defaults are there
    assert update.actor_rollout_ref.rollout.agent.default_agent_loop == "memupdate"
    loops = OmegaConf.load(ROOT / cfg.actor_rollout_ref.rollout.agent.agent_loop_config_path)
    assert {entry.name for entry in loops} == {"memagent", "memupdate", "membuilder"}


async def test_compute_score_returns_memrls_reward_through_verls_reward_manager(tiny):
    from hydra import compose, initialize_config_dir
    from transformers import AutoTokenizer
    from verl import DataProto
    from verl.experimental.reward_loop.reward_manager.naive import NaiveRewardManager
    from verl.trainer.ppo.reward import get_custom_reward_fn

    with initialize_config_dir(version_base=None, config_dir=str(ROOT / "configs/verl")):
        cfg = compose(config_name="memagent")
    tok = AutoTokenizer.from_pretrained(tiny)
    manager = NaiveRewardManager(cfg, tok, get_custom_reward_fn(cfg))
    scores = []
    for text in ("so \\boxed{Biscuit}", "it is \\boxed{a cat}"):
        ids = torch.tensor(tok(text)["input_ids"])
        data = DataProto.from_dict(
            tensors={"responses": ids[None], "attention_mask": torch.ones(1, len(ids), dtype=torch.long)},
            non_tensors={"data_source": np.array(["memrl/sample/read"], dtype=object),
                         "reward_model": np.array([{"ground_truth": json.dumps(["Biscuit"])}], dtype=object),
                         "extra_info": np.array([{"task": "read"}], dtype=object)},
        )  # fmt: skip
        result = await manager.run_single(data)
        assert result["reward_score"] == memagent_reward(text, ["Biscuit"])
        scores.append(result["reward_score"])
        assert result["reward_extra_info"]["has_boxed"] == 1.0
    assert scores == [1.0, 0.0]


@pytest.mark.parametrize("normalize", [False, True])
def test_verls_grpo_with_the_multi_output_broadcast_equals_memrls_advantages(normalize):
    from verl import DataProto
    from verl.trainer.ppo.core_algos import AdvantageEstimator
    from verl.trainer.ppo.v1.utils import compute_advantage_for_multi_trajectories

    from memrl.train.advantages import grpo_advantages

    rng = np.random.default_rng(0)
    episodes = [
        (g, s, int(rng.integers(1, 4)), float(rng.integers(0, 3))) for g in ("q1", "q2") for s in range(4)
    ]
    rows, keys, length = [], [], 5
    for g, s, n_out, reward in episodes:  # a MemAgent episode: n outputs, the reward on the last
        for i in range(n_out):
            rows.append((g, reward if i == n_out - 1 else 0.0))
            keys.append(f"{g}_{s}_{i}")
    scores = torch.zeros(len(rows), length)
    scores[:, -1] = torch.tensor([r for _, r in rows])
    data = DataProto.from_dict(
        tensors={
            "token_level_rewards": scores,
            "response_mask": torch.ones(len(rows), length, dtype=torch.long),
        },
        non_tensors={"uid": np.array([g for g, _ in rows], dtype=object)},
    )
    out = compute_advantage_for_multi_trajectories(data, keys, AdvantageEstimator.GRPO,
                                                   norm_adv_by_std_in_grpo=normalize)  # fmt: skip
    mine = grpo_advantages(
        [r for _, _, _, r in episodes], [g for g, _, _, _ in episodes], normalize_std=normalize
    )
    expected = torch.tensor([float(mine[k]) for k, (_, _, n, _) in enumerate(episodes) for _ in range(n)])
    assert torch.allclose(out.batch["advantages"][:, 0], expected, atol=1e-5)
    assert torch.allclose(out.batch["advantages"], expected[:, None].expand(-1, length), atol=1e-5)


def test_the_plugin_is_found_through_the_verl_plugins_entry_point():
    import subprocess
    import sys

    code = ("import verl\nfrom verl.experimental.agent_loop.agent_loop import _agent_loop_registry as r\n"
            "print(sorted(k for k in r if k.startswith('mem')))")  # fmt: skip
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=300
    )
    assert out.stdout.strip().splitlines()[-1] == "['memagent', 'membuilder', 'memupdate']"


def test_loops_refuse_verls_legacy_trainer_and_share_one_embedder_per_process(tiny):
    from hydra.errors import InstantiationException

    tok = FakeServerManager(LocalEngine(tiny)).engine.tokenizer
    with pytest.raises(
        InstantiationException, match="trainer.use_v1=true"
    ):  # Hydra wraps memrl's ConfigError
        make_loop("memupdate", None, tok, trainer={"use_v1": False})
    a, b = (make_loop("memupdate", None, tok, embedder="hashing:16") for _ in range(2))  # two samples
    assert a.memory().embedder is b.memory().embedder  # built once, not per episode


def test_reward_server_override_needs_no_plus():
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(version_base=None, config_dir=str(ROOT / "configs/verl")):
        cfg = compose(config_name="memagent",
                      overrides=["reward.custom_reward_function.reward_kwargs.reward_server=http://h:8765"])  # fmt: skip
    assert cfg.reward.custom_reward_function.reward_kwargs.reward_server == "http://h:8765"


def test_sequences_join_continued_calls_and_mask_what_the_model_did_not_write():
    from memrl.agents.trajectory import Step
    from memrl.integrations.verl.outputs import sequences

    steps = [
        Step([], "", prompt_ids=[1, 2], completion_ids=[3, 4], logprobs=[-0.1, -0.2]),
        Step([], "", prompt_ids=[1, 2, 3, 4, 9, 9], completion_ids=[5], logprobs=[-0.3]),  # tool tokens 9, 9
        Step([], "", prompt_ids=[7], completion_ids=[8], logprobs=[-0.4]),  # a new conversation
        Step([], "", error="provider down"),
    ]
    first, second = sequences(steps)
    assert first.prompt_ids == [1, 2] and first.response_ids == [3, 4, 9, 9, 5]
    assert first.response_mask == [1, 1, 0, 0, 1] and first.response_logprobs == [-0.1, -0.2, 0.0, 0.0, -0.3]
    assert (second.prompt_ids, second.response_ids, second.response_mask) == ([7], [8], [1])
