"""A made-up HotpotQA dev file in the published distractor format, whose answers can be read off the gold
paragraphs: question ``q`` asks for the code of thing ``q``, which its first gold paragraph states
("The code of Thing 3 is maple-3."). Scripted models in the tests answer by finding that sentence."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

WORDS = "river stone cloud maple lantern harbor violet copper meadow signal orbit quartz".split()
ANSWER = re.compile(r"The code of (Thing \d+) is ([a-z]+-\d+)\.")


def hotpot_split(n_questions: int = 12, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    records = []
    for q in range(n_questions):
        answer = f"{WORDS[q % len(WORDS)]}-{q}"
        context = []
        for p in range(10):
            filler = [" ".join(rng.choices(WORDS, k=rng.randint(8, 20))).capitalize() + "." for _ in range(3)]
            if p == 0:
                filler.insert(1, f"The code of Thing {q} is {answer}.")
            context.append([f"Title {q}-{p}", [filler[0]] + [" " + s for s in filler[1:]]])
        records.append(
            {
                "_id": f"hq{q:03d}",
                "question": f"What is the code of Thing {q}?",
                "answer": answer,
                "type": "bridge" if q % 2 else "comparison",
                "level": "hard",
                "supporting_facts": [[f"Title {q}-0", 1], [f"Title {q}-1", 0]],
                "context": context,
            }
        )
    return records


def write_hotpot(folder: Path, n_questions: int = 12) -> Path:
    """``folder/hotpotqa/hotpot_dev_distractor_v1.json``, as `memrl data download hotpotqa` leaves it."""
    path = folder / "hotpotqa" / "hotpot_dev_distractor_v1.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(hotpot_split(n_questions)))
    return path


def code_in(text: str, thing: str) -> str | None:
    """The code ``text`` states for ``thing`` ("Thing 3"), if it does."""
    for m in ANSWER.finditer(text):
        if m[1] == thing:
            return m[2]
    return None
