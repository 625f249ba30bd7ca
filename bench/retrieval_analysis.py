"""Where retrieval misses, from a retrieval run's per-question output (no model, no search).

    memrl eval retrieval --dataset locomo --output-dir runs/retrieval
    python -m bench.retrieval_analysis runs/retrieval/questions.jsonl [--mode hybrid]

Prints, for categories 1-4:

- recall@10 by how many evidence turns a question has (1, 2, 3, 4, 5+), per category: questions whose
  evidence is spread over many turns are the ones missed;
- a simulated session-diversity re-order for list-like questions ("What activities...", "How many
  times...", "both", "in common"): the first 20 hits of each such question are re-picked greedily, each
  earlier pick from the same session pushing a hit down by ``penalty`` ranks, and recall@10 is recomputed
  over all questions. It only re-orders what search returned (the first 20), so it shows whether the
  missing evidence is among those hits at all.

The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import collections
import json
import re
from typing import Any

LIST_QUESTION = re.compile(
    r"\b(what|which)\b.*\b(activities|hobbies|things|events|ways|places|books|items|types|kinds|sports|pets|"
    r"games|instruments|countries|cities|causes|gifts|foods|songs|movies|artists|bands|people|organizations|"
    r"symbols|art|classes|projects|issues|challenges|methods|martial|shoes|paintings|recipes)\b"
    r"|\bhow many\b|\bboth\b|\bin common\b",
    re.IGNORECASE,
)
CORE = (1, 2, 3, 4)


def session_of(turn_id: str) -> str:
    return turn_id.split(":")[0]


def diversify(hits: list[str], penalty: float) -> list[str]:
    """Greedy re-pick: rank + ``penalty`` per earlier pick from the same session."""
    picked: list[str] = []
    used: collections.Counter[str] = collections.Counter()
    rest = list(enumerate(hits))
    while rest:
        best = min(rest, key=lambda t: t[0] + penalty * used[session_of(t[1])])
        rest.remove(best)
        picked.append(best[1])
        used[session_of(best[1])] += 1
    return picked


def recall10(row: dict[str, Any], hits: list[str]) -> float:
    evidence = set(row["evidence"])
    return len(evidence & set(hits[:10])) / len(evidence)


def analyse(rows: list[dict[str, Any]], mode: str, penalties: list[float]) -> dict[str, Any]:
    rows = [r for r in rows if r["category_id"] in CORE and r["evidence"] and mode in r["retrieved"]]
    by_count: dict[str, dict[str, list[float]]] = collections.defaultdict(
        lambda: collections.defaultdict(list)
    )
    for r in rows:
        n = len(r["evidence"])
        by_count[r["category"]]["5+" if n >= 5 else str(n)].append(recall10(r, r["retrieved"][mode]))
    list_like = [r for r in rows if LIST_QUESTION.search(r["question"])]
    base = sum(recall10(r, r["retrieved"][mode]) for r in rows) / len(rows)
    sims = {}
    for p in penalties:
        vals = [
            recall10(
                r,
                diversify(r["retrieved"][mode], p)
                if LIST_QUESTION.search(r["question"])
                else r["retrieved"][mode],
            )
            for r in rows
        ]
        sims[str(p)] = round(sum(vals) / len(vals) - base, 4)
    return {
        "mode": mode,
        "questions": len(rows),
        "recall_at_10": round(base, 4),
        "by_evidence_count": {
            cat: {k: {"n": len(v), "recall_at_10": round(sum(v) / len(v), 3)} for k, v in sorted(c.items())}
            for cat, c in sorted(by_count.items())
        },
        "list_like_questions": len(list_like),
        "list_like_by_category": dict(collections.Counter(r["category"] for r in list_like)),
        "diversify_delta_by_penalty": sims,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("questions", help="questions.jsonl of `memrl eval retrieval --output-dir DIR`")
    ap.add_argument("--mode", default="hybrid")
    ap.add_argument("--penalties", default="1,2,4", help="session penalties (ranks) to simulate")
    args = ap.parse_args()
    with open(args.questions) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    out = analyse(rows, args.mode, [float(p) for p in args.penalties.split(",")])
    for cat, counts in out["by_evidence_count"].items():
        print(cat, ", ".join(f"{k} turns: {v['recall_at_10']} (n={v['n']})" for k, v in counts.items()))
    print(f"list-like questions: {out['list_like_questions']} {out['list_like_by_category']}")
    print(
        f"recall@10 change from a session-diversity re-order of their first 20 hits: {out['diversify_delta_by_penalty']}"
    )
    print(json.dumps(out))


if __name__ == "__main__":
    main()
