"""RULER's multi-hop and aggregation tasks: variable tracking (vt), common words (cwe), frequent words (fwe).

- ``vt``: one chain of 4 hops, ``VAR ABCDE = 12345``, ``VAR FGHIJ = VAR ABCDE``, ... placed in order among
  noise sentences; the query is the value, the answer every variable of the chain (5).
- ``cwe``: a numbered list of words; 10 common words appear 30 times each, the others 3 times (below 4k
  tokens, where 300 common entries alone would not fit, 2 and 1 times); the answer is the 10 common words.
- ``fwe``: coded words (6 random letters) drawn from a Zipf law of exponent 2.0 over ``target // 50`` words;
  the most frequent is ``....``, which the prompt says to ignore; the answer is the 3 most frequent others,
  counted in the final text (a draw whose 3rd and 4th counts tie is redrawn).

Every answer is true of the text by construction. Called through
:func:`memrl.data.ruler.synthetic.generate`.
"""

from __future__ import annotations

import random
import string
from collections import Counter
from collections.abc import Callable
from itertools import accumulate

from memrl.data.ruler.tasks import NOISE, SyntheticItem, TaskSpec, WordLists, fit, make_item, prompt_of

__all__ = ["generate_cwe", "generate_fwe", "generate_vt"]

TokenCounter = Callable[[str], int]


def generate_vt(spec: TaskSpec, label: str, target: int, count: int, seed: int,
                count_tokens: TokenCounter) -> list[SyntheticItem]:  # fmt: skip
    hops, chains = spec.options["num_hops"], spec.options["num_chains"]
    items = []
    for index in range(count):
        rng = random.Random(f"vt:{seed}:{label}:{index}")
        names: list[str] = []
        while len(names) < chains * (hops + 1):
            v = "".join(rng.choices(string.ascii_uppercase, k=5))
            if v not in names:
                names.append(v)
        values = [str(rng.randint(10_000, 99_999)) for _ in range(chains)]
        statements, answers = [], []
        for c in range(chains):
            chain = names[c * (hops + 1) : (c + 1) * (hops + 1)]
            statements += [f"VAR {chain[0]} = {values[c]}"]
            statements += [f"VAR {b} = VAR {a}" for a, b in zip(chain, chain[1:], strict=False)]
            if c == 0:
                answers = chain
        # positions as fractions of the haystack, sorted, so a chain is always read in order
        where = sorted(rng.random() for _ in statements)

        def context(n: int, statements: list[str] = statements, where: list[float] = where) -> str:
            lines = [NOISE] * n
            for frac, s in sorted(zip(where, statements, strict=True), reverse=True):
                lines.insert(round(n * frac), s)
            return "\n".join(lines)

        query = values[0]
        n, tokens = fit(lambda n, c=context, q=query: prompt_of(spec, c(n), q, num_v=hops + 1), spec, target,
                        count_tokens, high=8)  # fmt: skip
        items.append(make_item(spec, label, target, index, context(n), query, answers, tokens,
                               statements=statements, haystack_units=n))  # fmt: skip
    return items


def generate_cwe(spec: TaskSpec, label: str, target: int, count: int, seed: int, count_tokens: TokenCounter,
                 words: WordLists) -> list[SyntheticItem]:  # fmt: skip
    o = spec.options
    freq_cw, freq_ucw = (o["freq_cw"], o["freq_ucw"]) if target >= 4096 else (2, 1)
    vocab = words.words()
    random.Random(f"cwe-vocab:{seed}").shuffle(vocab)
    items = []
    for index in range(count):
        rng = random.Random(f"cwe:{seed}:{label}:{index}")
        common = rng.sample(vocab, o["num_cw"])
        rest = [w for w in vocab if w not in set(common)]
        rng.shuffle(rest)
        order_seed = rng.random()

        def listing(
            n: int, common: list[str] = common, rest: list[str] = rest, order_seed: float = order_seed
        ) -> str:
            entries = common * freq_cw + [rest[i % len(rest)] for i in range(n)] * freq_ucw
            random.Random(order_seed).shuffle(entries)
            return "\n".join(f"{k}. {w}" for k, w in enumerate(entries, 1))

        high = min(64, len(rest))
        n, tokens = fit(lambda n, f=listing: prompt_of(spec, f(n), ""), spec, target, count_tokens, high=high)
        if n > len(rest):  # past the vocabulary, an "uncommon" word would repeat: cap at the vocabulary
            n = len(rest)
            tokens = count_tokens(prompt_of(spec, listing(n), ""))
        items.append(make_item(spec, label, target, index, listing(n), "", common, tokens,
                               freq_cw=freq_cw, freq_ucw=freq_ucw, uncommon=n))  # fmt: skip
    return items


def generate_fwe(spec: TaskSpec, label: str, target: int, count: int, seed: int,
                 count_tokens: TokenCounter) -> list[SyntheticItem]:  # fmt: skip
    alpha, size = spec.options["alpha"], spec.options["coded_wordlen"]
    vocab_size = max(32, target // 50)
    cum = list(accumulate(k**-alpha for k in range(1, vocab_size + 1)))
    items = []
    for index in range(count):
        for attempt in range(100):
            rng = random.Random(f"fwe:{seed}:{label}:{index}:{attempt}")
            vocab = ["...."]
            while len(vocab) < vocab_size:
                w = "".join(rng.choices(string.ascii_lowercase, k=size))
                if w not in vocab:
                    vocab.append(w)
            drawn: list[int] = []  # ranks, drawn in blocks: prefix-stable, so text(n) depends on n only

            def text(
                n: int, drawn: list[int] = drawn, rng: random.Random = rng, vocab: list[str] = vocab
            ) -> str:
                while len(drawn) < n:
                    drawn.extend(rng.choices(range(vocab_size), cum_weights=cum, k=1024))
                return " ".join(vocab[r] for r in drawn[:n])

            n, tokens = fit(lambda n, t=text: prompt_of(spec, t(n), ""), spec, target, count_tokens, high=64)
            counts = Counter(w for w in text(n).split() if w != "....").most_common(4)
            if len(counts) >= 4 and counts[2][1] > counts[3][1]:
                answers = [w for w, _ in counts[:3]]
                items.append(make_item(spec, label, target, index, text(n), "", answers, tokens,
                                       counts=dict(counts[:3]), words=n, attempt=attempt))  # fmt: skip
                break
        else:  # pragma: no cover - 100 tied draws in a row does not happen at these lengths
            raise RuntimeError(f"fwe: no draw without a tie for item {index} at {label}")
    return items
