"""GRPO step time: memrl's local trainer against TRL's ``GRPOTrainer``, same work, one process, one run.

Both train the offline SmolLM2-135M-Instruct (full fine-tuning, or LoRA with ``--lora-rank``) on the same
prompts: ``memrl train grpo --task answer`` prompts (LoCoMo conv-48's questions with their top-k memories
from a ``raw`` store), the same group size, completion length limit, temperature, learning rate, no KL,
one optimizer step per batch of ``prompts_per_step`` groups, for ``--steps`` steps; reward = the official
LoCoMo F1 of the answer (the same function for both). Time counts rollouts + update (model loading and
the store excluded); the first step of each is a warm-up and is reported apart.

    .venv/bin/python -m bench.grpo_step                       # needs the trl extra: pip install 'memrl[trl]'
    .venv/bin/python -m bench.grpo_step --steps 4 --lora-rank 16

Last line of stdout: one JSON object with ``memrl_s_per_step``, ``trl_s_per_step``, ``ratio`` (memrl / TRL;
<= 1 means memrl is no slower) and each side's completion tokens per step.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import time
from pathlib import Path


def answer_prompts(n: int, top_k: int, db: Path) -> tuple[list, list]:
    """``n`` answer-task items of LoCoMo conv-48 and their chat prompts (memrl eval's prompt)."""
    from memrl.eval.qa.config import QAEvalConfig, load_conversations
    from memrl.train.tasks import AnswerTasks

    convs = load_conversations(QAEvalConfig(dataset="locomo", conv_id=("conv-48",), questions=n))
    tasks = AnswerTasks(convs, db_path=str(db), top_k=top_k)
    asyncio.run(tasks.setup())
    return tasks.items, tasks.messages


def run_memrl(path: str, items: list, messages: list, args: argparse.Namespace, out: Path) -> dict:
    from memrl.llm.local import LocalLLM
    from memrl.train.loop import LoopConfig, train
    from memrl.train.tasks import AnswerTasks
    from memrl.train.trainer import TrainerConfig

    llm = LocalLLM(path, max_batch_size=args.group_size * args.prompts_per_step).load()
    tasks = AnswerTasks.from_prompts(items, messages, max_tokens=args.completion_tokens)
    loop = LoopConfig(steps=args.steps, group_size=args.group_size, tasks_per_step=args.prompts_per_step,
                      temperature=1.0, save_every=10**6, output_dir=str(out), tensorboard=False)  # fmt: skip
    cfg = TrainerConfig(lr=args.lr, lora_rank=args.lora_rank, dynamic_sampling=False,
                        micro_batch=args.group_size * args.prompts_per_step, micro_tokens=1 << 20)  # fmt: skip
    t0 = time.perf_counter()
    rows = train(llm, tasks, loop, cfg, progress=False)
    total = time.perf_counter() - t0
    steps = [r["seconds"] for r in rows]
    return {
        "total_s": total, "first_step_s": steps[0], "steady_s_per_step": sum(steps[1:]) / max(1, len(steps) - 1),
        "rollout_s_per_step": sum(r["rollout_seconds"] for r in rows[1:]) / max(1, len(rows) - 1),
        "completion_tokens_per_step": sum(r.get("n_tokens", 0) for r in rows) / len(rows),
        "reward_mean": sum(r["reward_mean"] for r in rows) / len(rows),
    }  # fmt: skip


def run_trl(path: str, items: list, messages: list, args: argparse.Namespace, out: Path) -> dict:
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from memrl.scoring.answer import clean_prediction
    from memrl.scoring.metrics import score

    index = {m[-1]["content"]: i for i, m in enumerate(messages)}

    def f1(prompts, completions, **_):
        out = []
        for p, c in zip(prompts, completions, strict=True):
            conv, q = items[index[p[-1]["content"]]]
            out.append(score(conv, q, clean_prediction(c[0]["content"]))["f1"])
        return out

    steps: list[float] = []
    tokens: list[float] = []

    class Clock(TrainerCallback):
        def on_step_begin(self, a, state, control, **kw):
            self.t = time.perf_counter()

        def on_step_end(self, a, state, control, **kw):
            steps.append(time.perf_counter() - self.t)

        def on_log(self, a, state, control, logs=None, **kw):
            if logs and "completions/mean_length" in logs:
                tokens.append(logs["completions/mean_length"] * args.group_size * args.prompts_per_step)

    n = args.steps * args.prompts_per_step
    data = Dataset.from_list([{"prompt": messages[i % len(messages)]} for i in range(n)])
    model = AutoModelForCausalLM.from_pretrained(path)
    tok = AutoTokenizer.from_pretrained(path)
    peft_config = None
    if args.lora_rank:
        from peft import LoraConfig

        peft_config = LoraConfig(
            r=args.lora_rank, lora_alpha=32, lora_dropout=0.0, target_modules="all-linear"
        )
    config = GRPOConfig(
        output_dir=str(out), use_cpu=True, per_device_train_batch_size=args.group_size * args.prompts_per_step,
        num_generations=args.group_size, max_completion_length=args.completion_tokens, max_steps=args.steps,
        learning_rate=args.lr, beta=0.0, temperature=1.0, num_iterations=1, gradient_accumulation_steps=1,
        logging_steps=1, report_to=[], save_strategy="no", bf16=False, seed=0, lr_scheduler_type="constant",
        warmup_steps=0, dataloader_num_workers=0, gradient_checkpointing=False,  # memrl recomputes nothing
    )  # fmt: skip
    trainer = GRPOTrainer(model=model, reward_funcs=f1, args=config, train_dataset=data, processing_class=tok,
                          peft_config=peft_config, callbacks=[Clock()])  # fmt: skip
    t0 = time.perf_counter()
    trainer.train()
    total = time.perf_counter() - t0
    return {
        "total_s": total, "first_step_s": steps[0], "steady_s_per_step": sum(steps[1:]) / max(1, len(steps) - 1),
        "completion_tokens_per_step": sum(tokens) / max(1, len(tokens)),
    }  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--prompts-per-step", type=int, default=2)
    ap.add_argument("--completion-tokens", type=int, default=24)
    ap.add_argument("--top-k", type=int, default=5)
    ap.add_argument("--lr", type=float, default=1e-6)
    ap.add_argument("--lora-rank", type=int, default=0)
    ap.add_argument("--out", type=Path, default=Path("/tmp/memrl-grpo-step"))
    ap.add_argument("--order", default="memrl,trl", help="which runs first")
    args = ap.parse_args()
    os.environ.setdefault("MEMRL_DATA_DIR", str(Path(__file__).resolve().parents[2] / "shared" / "data"))
    from memrl.llm.local.hf_models import ensure_local_model

    shutil.rmtree(args.out, ignore_errors=True)
    args.out.mkdir(parents=True)
    path = ensure_local_model(None)
    items, messages = answer_prompts(args.steps * args.prompts_per_step, args.top_k, args.out / "memory.db")
    result: dict = {"model": "SmolLM2-135M-Instruct", "steps": args.steps, "group_size": args.group_size,
                    "prompts_per_step": args.prompts_per_step, "max_completion_tokens": args.completion_tokens,
                    "lora_rank": args.lora_rank, "prompt_tokens_mean": None}  # fmt: skip
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(path)
    texts = [tok.apply_chat_template(m, add_generation_prompt=True, tokenize=False) for m in messages]
    lengths = [len(tok(t, add_special_tokens=False)["input_ids"]) for t in texts]
    result["prompt_tokens_mean"] = round(sum(lengths) / len(lengths), 1)
    for name in args.order.split(","):
        run = run_memrl if name == "memrl" else run_trl
        result[name] = {k: round(v, 3) for k, v in run(path, items, messages, args, args.out / name).items()}
        print(json.dumps({name: result[name]}), flush=True)
    result["memrl_s_per_step"] = result["memrl"]["steady_s_per_step"]
    result["trl_s_per_step"] = result["trl"]["steady_s_per_step"]
    result["ratio"] = round(result["memrl_s_per_step"] / result["trl_s_per_step"], 3)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
