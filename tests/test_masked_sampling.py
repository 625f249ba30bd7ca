"""Policy-gradient maths under masked sampling, on the tiny real model through the real local back-end.

A reply drawn under a grammar and a temperature was drawn from the masked, renormalised,
temperature-scaled distribution. The trainer must compute exactly that distribution (replaying the
recorded grammar over the completion), so its log-probabilities equal the sampler's, the PPO ratio is 1
before any update and the KL to the (initial) reference is 0; the unconstrained softmax would not."""

from __future__ import annotations

import asyncio

import pytest
import torch

from memrl.agents.trajectory import Step, Trajectory
from memrl.errors import ProviderError
from memrl.llm.base import SamplingParams
from memrl.llm.decoding import replay_masks, sampling_logprobs
from memrl.llm.local import LocalLLM
from memrl.train.logprobs import Sample
from memrl.train.trainer import PolicyTrainer, TrainerConfig
from tests.tiny_lm import make_tiny_lm

SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12}}, "required": ["name"]}
GRAMMAR = 'root ::= "\\\\boxed{" [a-zA-Z ]{1,8} "}"'  # MemAgent's final answer, e.g. \boxed{Ana}
TOOLS = [{"type": "function", "function": {"name": "save", "description": "save a fact",
          "parameters": {"type": "object", "properties": {"fact": {"type": "string", "maxLength": 10}},
                         "required": ["fact"]}}}]  # fmt: skip
MSGS = [{"role": "user", "content": "Who keeps the lighthouse?"}]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> str:
    return str(make_tiny_lm(tmp_path_factory.mktemp("tiny") / "lm"))


def replies(llm: LocalLLM, n: int, temperature: float, **constraint):
    async def go():
        sampling = [SamplingParams(temperature=temperature, max_tokens=24, seed=s) for s in range(n)]
        return await asyncio.gather(*(llm.chat(MSGS, sampling=p, **constraint) for p in sampling))

    return asyncio.run(go())


def group(rs, rewards) -> list[Trajectory]:
    out = []
    for r, reward in zip(rs, rewards, strict=True):
        t = Trajectory("toy", "t", reward=reward)
        t.steps.append(Step.from_response(MSGS, r))
        out.append(t)
    return out


@pytest.mark.parametrize(
    "constraint", [{"json_schema": SCHEMA}, {"grammar": GRAMMAR}, {"tools": TOOLS, "tool_choice": "required"}]
)
def test_the_trainer_recomputes_the_samplers_masked_tempered_logprobs(tiny, constraint):
    llm = LocalLLM(tiny).load()
    rs = replies(llm, 4, 0.7, **constraint)
    for r in rs:  # every reply records what produced it
        assert r.temperature == 0.7 and r.constraint == constraint | (
            {"tool_choice": "required"} if "tools" in constraint else {}
        )
    trajs = group(rs, [1.0, 0.0, 1.0, 0.0])
    assert all(t.steps[0].constraint == rs[0].constraint for t in trajs)
    trainer = PolicyTrainer(llm, TrainerConfig(lr=1e-3, kl_coef=0.1))
    samples, _ = trainer.samples([trajs])
    lp, mask = trainer.token_logprobs(trainer.model, samples)
    for i, r in enumerate(rs):
        mine = lp[i][mask[i].bool()]
        assert torch.allclose(mine, torch.tensor(r.logprobs), atol=1e-5)
    # the unconstrained, untempered softmax is a different distribution (the mistake this guards against)
    raw = [Sample(s.prompt_ids, s.completion_ids, 0.0) for s in samples]
    lp_raw, _ = trainer.token_logprobs(trainer.model, raw)
    assert (lp_raw - lp)[mask.bool()].abs().max() > 0.1
    # before any update: ratio 1, nothing clipped, policy = reference so KL 0; the sampler agrees
    m = trainer.step([trajs])
    assert m["ratio_mean"] == pytest.approx(1.0, abs=1e-6) and m["clip_frac"] == 0.0
    assert m["kl"] == pytest.approx(0.0, abs=1e-6) and m["rollout_logprob_diff"] < 1e-5


def test_a_separate_old_pass_gives_ratio_one_on_the_first_mini_batch(tiny):
    llm = LocalLLM(tiny).load()
    trajs = group(replies(llm, 4, 1.3, json_schema=SCHEMA), [1.0, 0.0, 0.0, 1.0])
    trainer = PolicyTrainer(llm, TrainerConfig(lr=1e-3, mini_batches=2, micro_batch=1))
    samples, _ = trainer.samples([trajs])
    with torch.no_grad():
        old, mask = trainer.token_logprobs(trainer.model, samples)
    m = trainer.step([trajs])
    assert m["optimizer_steps"] == 2 and m["rollout_logprob_diff"] < 1e-5
    with torch.no_grad():
        new, _ = trainer.token_logprobs(trainer.model, samples)
    assert (new - old)[mask.bool()].abs().max() > 0  # the policy moved


def test_masks_replay_exactly_and_the_behaviour_distribution_lives_on_them(tiny):
    llm = LocalLLM(tiny).load()
    (r,) = replies(llm, 1, 1.0, grammar=GRAMMAR)
    assert r.text.startswith("\\boxed{") and r.text.endswith("}")
    book = llm.grammars
    allowed = replay_masks(book.matcher(book.for_constraint(r.constraint)), r.completion_ids, book.vocab_size)
    assert allowed.shape[0] == len(r.completion_ids) and allowed.sum(-1).min() >= 1
    logits = torch.randn(len(r.completion_ids), book.vocab_size)
    p = sampling_logprobs(logits, 0.5, allowed).exp()
    assert torch.allclose(p.sum(-1), torch.ones(len(p))) and float(p[~allowed].sum()) == 0.0
    # a completion the grammar forbids cannot be replayed: it was not sampled under this constraint
    bad = llm.tokenizer.encode("hello")
    with pytest.raises(ProviderError, match="rejects token"):
        replay_masks(book.matcher(book.for_constraint(r.constraint)), bad, book.vocab_size)


def test_a_shared_prompt_gives_the_same_logprobs_and_gradients_as_separate_sequences(tiny):
    llm = LocalLLM(tiny).load()
    trainer = PolicyTrainer(llm, TrainerConfig(lr=1e-3))
    prompt = llm.prompt_ids(MSGS)
    comps = [llm.tokenizer.encode(t) for t in ("Ana", "Biscuit the dog", "May 2024")]
    shared = [Sample(prompt, c, 1.0, temperature=0.8) for c in comps]

    def grads(samples_per_pass):
        trainer.model.zero_grad()
        lps = []
        for batch in samples_per_pass:
            lp, mask = trainer.token_logprobs(trainer.model, batch)
            (lp * mask).sum().backward()
            lps += [lp[i][mask[i].bool()].detach() for i in range(len(batch))]
        return lps, [p.grad.clone() for p in trainer.model.parameters()]

    lp_a, g_a = grads([shared])  # the prompt runs once for the three completions
    lp_b, g_b = grads([[s] for s in shared])  # three separate sequences
    assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(lp_a, lp_b, strict=True))
    assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(g_a, g_b, strict=True))
    # and both equal the plain full-sequence forward pass
    ids = torch.tensor([prompt + comps[1]])
    full = torch.log_softmax(trainer.model(input_ids=ids).logits[0, len(prompt) - 1 : -1] / 0.8, -1)
    assert torch.allclose(full.gather(-1, ids[0, len(prompt) :, None]).squeeze(-1), lp_a[1], atol=1e-5)


def test_identical_prompts_are_prefilled_once_with_the_same_result(tiny):
    llm = LocalLLM(tiny).load()
    greedy = SamplingParams(temperature=0.0, max_tokens=10)
    alone = llm.generate_sync([MSGS], sampling=greedy)[0]
    other = [{"role": "user", "content": "Where did Anna move?"}]
    batch = llm.generate_sync([MSGS, other, MSGS, MSGS], sampling=greedy)
    for r in (batch[0], batch[2], batch[3]):
        assert r.completion_ids == alone.completion_ids
        assert r.logprobs == pytest.approx(alone.logprobs, abs=1e-5)


SECTION = "Lena has a dog named Biscuit. The lighthouse keeper was named Ana. " * 6


def _memory_last(memory: str) -> list[dict[str, str]]:
    """MemAgent's chunk prompt with the memory after the section: G rollouts share all but the memory."""
    return [
        {
            "role": "user",
            "content": f"Question: Who keeps the lighthouse?\nSection: {SECTION}\nMemory: {memory}",
        }
    ]


def test_prompts_sharing_a_prefix_are_prefilled_once_with_the_same_result(tiny):
    llm = LocalLLM(tiny).load()
    greedy = SamplingParams(temperature=0.0, max_tokens=10)
    prompts = [_memory_last(m) for m in ("none", "Ana keeps it.", "Biscuit is a dog, Lena's", "none")]
    ids = [llm.prompt_ids(p) for p in prompts]
    from memrl.llm.decoding import prefix_groups

    groups = prefix_groups(ids)
    assert len(groups) == 1 and groups[0][0] >= 40  # one shared prefix, the section included
    alone = [llm.generate_sync([p], sampling=greedy)[0] for p in prompts]
    batch = llm.generate_sync([*prompts, MSGS], sampling=greedy)  # and an unrelated prompt beside them
    for a, b in zip(alone, batch, strict=False):
        assert b.completion_ids == a.completion_ids
        assert b.logprobs == pytest.approx(a.logprobs, abs=1e-5)
    assert batch[-1].completion_ids == llm.generate_sync([MSGS], sampling=greedy)[0].completion_ids


def test_a_shared_prefix_gives_the_same_logprobs_and_gradients_as_separate_sequences(tiny):
    llm = LocalLLM(tiny).load()
    trainer = PolicyTrainer(llm, TrainerConfig(lr=1e-3))
    prompts = [llm.prompt_ids(_memory_last(m)) for m in ("none", "Ana keeps it, Biscuit", "Lena")]
    comps = [llm.tokenizer.encode(t) for t in ("Ana", "Biscuit the dog", "May 2024")]
    samples = [Sample(p, c, 1.0, temperature=0.7) for p, c in zip(prompts, comps, strict=True)]

    def grads(samples_per_pass):
        trainer.model.zero_grad()
        lps = []
        for batch in samples_per_pass:
            lp, mask = trainer.token_logprobs(trainer.model, batch)
            (lp * mask).sum().backward()
            lps += [lp[i][mask[i].bool()].detach() for i in range(len(batch))]
        return lps, [p.grad.clone() for p in trainer.model.parameters()]

    lp_a, g_a = grads([samples])  # the shared prefix runs once
    lp_b, g_b = grads([[s] for s in samples])
    assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(lp_a, lp_b, strict=True))
    assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(g_a, g_b, strict=True))
    ids = torch.tensor([prompts[1] + comps[1]])
    full = torch.log_softmax(trainer.model(input_ids=ids).logits[0, len(prompts[1]) - 1 : -1] / 0.7, -1)
    assert torch.allclose(full.gather(-1, ids[0, len(prompts[1]) :, None]).squeeze(-1), lp_a[1], atol=1e-5)


@pytest.mark.parametrize(
    "bad",
    [
        {"tools": TOOLS, "json_schema": SCHEMA},
        {"grammar": GRAMMAR, "tools": TOOLS},
        {"grammar": GRAMMAR, "json_schema": SCHEMA},
        {"tool_choice": "always"},
        {"messages": [{"content": "hi"}]},
    ],
)
def test_the_trainers_sync_path_checks_requests_as_chat_does(tiny, bad):
    """``generate_sync`` (what trainers call) refuses what ``chat`` refuses, with the same one-line error."""
    from memrl.errors import ValidationError

    llm = LocalLLM(tiny).load()
    kw = dict(bad)
    msgs = kw.pop("messages", MSGS)
    with pytest.raises(ValidationError) as chat_error:
        llm.chat_sync(msgs, **kw)
    with pytest.raises(ValidationError) as sync_error:
        llm.generate_sync([MSGS, msgs], **kw)
    assert str(sync_error.value) == str(chat_error.value) and "\n" not in str(sync_error.value)
    assert llm.generate_sync([MSGS], sampling=SamplingParams(max_tokens=3))[0].completion_ids
