"""Does batching change what the local model computes? One prompt alone vs batched with a longer one.

    HF_HUB_OFFLINE=1 python -m bench.research.batch_logprobs [--model MODEL] [--max-tokens 60]

The local back-end left-pads a batch, so the same prompt meets different tensor shapes alone and in a
batch. Greedy decoding of the same prompt both ways: whether the text is the same, and the largest
difference between the per-token log-probs over the common prefix. The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json

SHORT = [
    {"role": "user", "content": "List three facts about Lena's dog Biscuit, a beagle mix adopted in March."}
]
LONG = [
    {
        "role": "user",
        "content": "Write a long careful summary of a conversation where two friends discuss marathons, swimming, "
        "dogs, bread recipes, work at a bakery, travel to Lisbon and plans for the summer holidays with family.",
    }
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=None, help="local model (default: the offline SmolLM2-135M-Instruct)")
    ap.add_argument("--max-tokens", type=int, default=60)
    args = ap.parse_args()
    from memrl.llm import SamplingParams
    from memrl.llm.local import LocalLLM

    llm = LocalLLM(args.model)
    sampling = SamplingParams(max_tokens=args.max_tokens, temperature=0.0)
    alone = llm.generate_sync([SHORT], sampling=sampling)[0]
    batched = llm.generate_sync([SHORT, LONG], sampling=sampling)[0]
    n = min(len(alone.logprobs), len(batched.logprobs))
    diff = max(
        (abs(a - b) for a, b in zip(alone.logprobs[:n], batched.logprobs[:n], strict=True)), default=0.0
    )
    out = {
        "same_text": alone.text == batched.text,
        "tokens_compared": n,
        "max_abs_logprob_diff": diff,
        "alone": alone.text,
        "batched": batched.text,
    }
    print(f"same text: {out['same_text']}; max |log-prob difference| over {n} tokens: {diff:.3g}")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
