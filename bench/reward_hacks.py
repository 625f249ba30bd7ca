"""Red team of memrl's rewards: scripted cheats beside an honest policy on real LoCoMo items.

    HF_HUB_OFFLINE=1 .venv/bin/python -m bench.reward_hacks                 # docs/rewards.md's table
    .venv/bin/python -m bench.reward_hacks --per-category 3 --update-questions 4 --sessions 2 --embedder hashing

Every reward memrl trains with (the training answer rewards, MemAgent's boxed match, verl's compute_score,
the reward server, MemUpdate's reward, MemBuilder's ADRPO per agent) is computed for each fixed policy of
:mod:`memrl.eval.redteam` on LoCoMo's training conversations (``read``'s value-set reward on generated
niah_multivalue items, :mod:`memrl.eval.redteam.values`); then the search
(:mod:`memrl.eval.redteam.search`) explores compositions of edits per family, starting from the cheats an
outside red team found (the regressions). Prints a markdown table of the fixed policies' mean rewards
(``!`` marks a cheat that reaches the honest policy, or earns a positive mean on a delta reward), then one
JSON line: ``rewards``, ``policies``, ``means`` (reward -> policy -> mean), ``cheats_at_or_above_honest``
(fixed policies; empty when every reward resists every cheat), ``cheats_found_by_search`` (empty when no
composition crossed a bar within the budget), ``search`` (per family: genomes evaluated, the honest means,
the best genomes, the regressions against honest with paired 95% intervals), item counts and wall time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--per-category", type=int, default=15, help="answer rewards: questions per category")
    p.add_argument("--update-questions", type=int, default=10, help="MemUpdate: questions per category")
    p.add_argument("--sessions", type=int, default=3, help="ADRPO: sessions per conversation")
    p.add_argument("--conversations", type=int, default=7, help="training conversations used (1-7)")
    p.add_argument("--max-tool-calls", type=int, default=30, help="MemUpdate: tool calls per episode")
    p.add_argument("--embedder", default="minilm", help="store embedder (hashing: fast, for smoke runs)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data-path", help="LoCoMo file or folder (default: $MEMRL_DATA_DIR)")
    p.add_argument("--markdown", help="also write the table to this file")
    p.add_argument("--parts", default="answers,values,update,build,search", help="which rewards to red-team "
                   "(values: read's value-set reward on niah_multivalue items; search: the search over "
                   "compositions of edits, memrl.eval.redteam.search)")  # fmt: skip
    p.add_argument("--value-items", type=int, default=24, help="values: generated niah_multivalue items")
    p.add_argument("--search-budget", type=int, default=150, help="search: evaluations per family")
    p.add_argument(
        "--search-per-category", type=int, default=15, help="search: answer questions per category"
    )
    p.add_argument(
        "--search-update-per-category", type=int, default=5, help="search: MemUpdate questions per category"
    )
    p.add_argument("--search-sessions", type=int, default=6, help="search: ADRPO sessions per conversation")
    p.add_argument("--search-families", default="answers,memupdate,adrpo", help="search: which families")
    args = p.parse_args(argv)
    out = asyncio.run(run(args))
    print(out.pop("table"))
    if args.markdown:
        Path(args.markdown).write_text(out["markdown"] + "\n")
    out.pop("markdown")
    print(json.dumps(out))
    return 0


async def run(args: argparse.Namespace) -> dict:
    from memrl.agents.memupdate import init_from_observations
    from memrl.data import load_dataset
    from memrl.data.splits import LOCOMO_UPDATE_SPLIT
    from memrl.eval.redteam import RewardTable, markdown, verdict
    from memrl.eval.redteam.answers import answer_rows, score_answer_rows
    from memrl.eval.redteam.build import score_builds
    from memrl.eval.redteam.campaign import search_all
    from memrl.eval.redteam.items import pick_questions, priors
    from memrl.eval.redteam.update import score_updates
    from memrl.memory.facade.memory import AsyncMemory

    t0 = time.perf_counter()
    loaded = load_dataset("locomo", args.data_path, include_adversarial=True)[0]  # adversarial: the search's
    convs = [c for c in loaded if c.id in LOCOMO_UPDATE_SPLIT["train"]]
    convs = convs[: args.conversations]
    frequent = priors(convs)  # per conversation: the other conversations' frequent answers
    memory = AsyncMemory(":memory:", embedder=args.embedder)
    try:
        for conv in convs:
            await init_from_observations(memory, f"{conv.id}@obs", conv)
        table = RewardTable()
        parts = set(args.parts.split(","))
        answer_items = pick_questions(convs, args.per_category, args.seed) if "answers" in parts else []
        if answer_items:
            rows = await answer_rows(memory, answer_items, frequent)
            table.merge(score_answer_rows(rows))
            table.merge(await engine_scores(rows))
            print(
                f"answers: {len(answer_items)} questions ({time.perf_counter() - t0:.0f} s)", file=sys.stderr
            )
        n_value_items = 0
        if "values" in parts:
            from memrl.eval.redteam.values import multivalue_items, score_value_sets

            value_items = multivalue_items(args.value_items, seed=args.seed)
            n_value_items = len(value_items)
            table.merge(score_value_sets(value_items))
            print(f"values: {n_value_items} niah_multivalue items ({time.perf_counter() - t0:.0f} s)",
                  file=sys.stderr)  # fmt: skip
        update_items = (
            pick_questions(convs, args.update_questions, args.seed + 1) if "update" in parts else []
        )
        if update_items:
            table.merge(
                await score_updates(memory, update_items, frequent, max_tool_calls=args.max_tool_calls)
            )
            print(f"memupdate: {len(update_items)} episodes per policy ({time.perf_counter() - t0:.0f} s)",
                  file=sys.stderr)  # fmt: skip
        if "build" in parts:
            table.merge(await score_builds(memory, convs, args.sessions))
            print(f"adrpo: done ({time.perf_counter() - t0:.0f} s)", file=sys.stderr)
        searched: dict = {}
        if "search" in parts:
            searched = await search_all(
                memory, convs, budget=args.search_budget, seed=args.seed, per_category=args.search_per_category,
                update_per_category=args.search_update_per_category, sessions=args.search_sessions,
                max_tool_calls=args.max_tool_calls, families=args.search_families.split(","),
                log=lambda m: print(f"{m} ({time.perf_counter() - t0:.0f} s)", file=sys.stderr),
            )  # fmt: skip
    finally:
        await memory.close()
    means = table.means()
    md = markdown(table)
    return {
        "table": md,
        "markdown": md,
        "rewards": table.rewards,
        "policies": table.policies,
        "means": {
            r: {p: (None if m is None else round(m, 4)) for p, m in row.items()} for r, row in means.items()
        },
        "cheats_at_or_above_honest": [list(x) for x in verdict(table)],
        "cheats_found_by_search": searched.get("found", []),
        "search_unconfirmed": searched.get("unconfirmed", 0),
        "search": searched.get("families", {}),
        "failures": table.failures,
        "n_answer_questions": len(answer_items),
        "n_update_episodes_per_policy": len(update_items),
        "n_value_items": n_value_items,
        "conversations": [c.id for c in convs],
        "embedder": args.embedder,
        "wall_time_s": round(time.perf_counter() - t0, 1),
    }


async def engine_scores(rows: list) -> object:
    """The same answers through verl's ``compute_score`` and the reward server's ASGI app (real routes)."""
    import httpx

    from memrl.eval.redteam import RewardTable
    from memrl.eval.redteam.answers import boxed
    from memrl.integrations.verl.reward import compute_score
    from memrl.scoring.metrics import boxed_answer
    from memrl.server.reward_api import create_reward_app

    table = RewardTable()
    items, keys = [], []
    for r in rows:
        table.add("verl compute_score", r.policy, compute_score("memrl/read", boxed(r.text), json.dumps(r.golds),
                                                               {"task": "read"})["score"])  # fmt: skip
        for metric, body in (
            ("answer_f1", {"prediction": r.text, "answers": r.golds, "category": r.category}),
            ("sub_em", {"prediction": boxed_answer(boxed(r.text)) or "", "answers": r.golds}),
            ("memagent", {"response": boxed(r.text), "answers": r.golds}),
            ("locomo_f1", {"prediction": r.text, "answer": r.answer, "category": r.category}),
        ):
            items.append({"metric": metric, **body})
            keys.append((f"server:{metric}" + (" (official)" if metric == "locomo_f1" else ""), r.policy))
    app = create_reward_app(max_batch=256)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1"
    ) as client:  # a loopback Host: the guard refuses others
        scores = []
        for k in range(0, len(items), 256):
            resp = await client.post("/v1/score", json={"items": items[k : k + 256]})
            resp.raise_for_status()
            scores += [res["score"] for res in resp.json()["results"]]
    for (name, policy), value in zip(keys, scores, strict=True):
        table.add(name, policy, value)
    return table


if __name__ == "__main__":
    raise SystemExit(main())
