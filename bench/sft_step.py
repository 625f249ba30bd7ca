"""SFT step time on this machine: float32 against bfloat16 autocast, one example at a time against batched.

MemBuilder's SFT examples (the annotation expert's trajectories that ``memrl train sft-membuilder`` keeps in
``OUTPUT_DIR/expert.jsonl``) train the offline SmolLM2-135M-Instruct with LoRA (rank 16) through
:class:`memrl.train.sft.SFTTrainer`, the code the command runs. For the first ``--examples`` examples it
times a forward pass without gradients (per example, fp32 and under bf16 autocast) and one optimizer step
over all of them in each setting of ``--settings`` (``fp32-mb1``: float32, micro-batch 1; ``fp32-mb4``;
``bf16-mb1``: bf16 autocast). Whether bf16 pays depends on the CPU (native on AVX-512 BF16 / AMX,
emulated on AVX2: :mod:`memrl.llm.cpu`), so the report names the CPU's capability::

    memrl train sft-membuilder --dataset locomo --split train --val-conv conv-44 --val-conv conv-48 \\
        --expert annotations --lora-rank 16 --max-steps 0 --output-dir runs/sft-expert   # the examples
    .venv/bin/python -m bench.sft_step --expert runs/sft-expert/expert.jsonl --examples 4

Last line of stdout: one JSON object: ``cpu_capability``, ``bf16_native``, ``tokens`` (prompt + reply of the
examples), ``forward_s_per_example`` per precision, ``step_s`` per setting, ``bf16_over_fp32`` (the forward
and the step, > 1 means bf16 is slower).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

SETTINGS = {"fp32-mb1": ("none", 1), "fp32-mb4": ("none", 4), "bf16-mb1": ("bf16", 1)}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--expert", type=Path, required=True, help="expert.jsonl of memrl train sft-membuilder")
    ap.add_argument("--examples", type=int, default=4, help="examples timed (one optimizer step over them)")
    ap.add_argument("--settings", default="fp32-mb1,fp32-mb4,bf16-mb1", help=", ".join(SETTINGS))
    ap.add_argument("--lora-rank", type=int, default=16)
    ap.add_argument("--model", help="the student (default: the offline SmolLM2-135M-Instruct)")
    args = ap.parse_args(argv)
    import torch

    from memrl.agents.trajectory import Trajectory
    from memrl.llm.cpu import cpu_bf16_native
    from memrl.llm.local import LocalLLM
    from memrl.train.sft import SFTConfig, SFTTrainer, sft_samples

    settings = [s.strip() for s in args.settings.split(",") if s.strip()]
    unknown = set(settings) - set(SETTINGS)
    if unknown:
        ap.error(f"unknown settings {sorted(unknown)}: choose among {', '.join(SETTINGS)}")
    rows = [json.loads(x) for x in args.expert.read_text().splitlines()[1:] if x.strip()]
    trajs = [Trajectory.from_dict(r["trajectory"]) for r in rows if r["split"] == "train"]
    samples, _ = sft_samples(LocalLLM(args.model).load(), trajs[: 4 * args.examples], 4096)
    samples = samples[: args.examples]
    if len(samples) < args.examples:
        ap.error(f"{args.expert}: only {len(samples)} usable examples")
    tokens = sum(len(s.prompt_ids) + len(s.completion_ids) for s in samples)

    forward: dict[str, float] = {}
    step: dict[str, float] = {}
    for name in settings:
        autocast, micro = SETTINGS[name]
        llm = LocalLLM(args.model).load()  # every setting starts from the base weights with fresh adapters
        trainer = SFTTrainer(llm, SFTConfig(lora_rank=args.lora_rank, lr=1e-4, batch_size=len(samples),
                                            micro_batch=micro, autocast=autocast))  # fmt: skip
        precision = "bf16" if autocast == "bf16" else "fp32"
        if precision not in forward:
            t0 = time.perf_counter()
            with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
                for s in samples:
                    trainer.token_logprobs(trainer.model, [s])
            forward[precision] = (time.perf_counter() - t0) / len(samples)
            print(f"forward {precision}: {forward[precision]:.2f} s an example", flush=True)
        row = trainer._step(list(samples), 1, 1)
        step[name] = row["seconds"]
        print(
            f"step {name}: {row['seconds']:.1f} s for {len(samples)} examples ({tokens} tokens)", flush=True
        )
    ratio = {}
    if "bf16" in forward and "fp32" in forward:
        ratio["forward"] = round(forward["bf16"] / forward["fp32"], 2)
    if "bf16-mb1" in step and "fp32-mb1" in step:
        ratio["step"] = round(step["bf16-mb1"] / step["fp32-mb1"], 2)
    out = {
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "bf16_native": cpu_bf16_native(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "examples": len(samples),
        "tokens": tokens,
        "forward_s_per_example": {k: round(v, 3) for k, v in forward.items()},
        "step_s": step,
        "bf16_over_fp32": ratio,
    }
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main()
