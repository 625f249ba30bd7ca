"""The web browser's pages for evaluation and training runs (``--runs`` folders): a list of runs, an
evaluation's report, plot and questions (filter by category, wrong answers only), a training run's
metrics per step and each rollout's trajectory. Shown only to a token for every namespace (``*``)."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse, HTMLResponse

from memrl.server.http import HTTPError, Principal
from memrl.server.ui import run_files as R
from memrl.server.ui.pages import esc, markdown, num, pretty, table, url


def _snip(text: str, n: int = 220) -> str:
    return esc(text if len(text) <= n else text[: n - 1] + "…")


def add_run_routes(router: APIRouter, ui: Any) -> None:
    """The ``/runs`` pages, rendered through ``ui`` (:class:`memrl.server.ui.UI`)."""

    # ---------------------------------------------------------------------------------------- runs
    def run_ref(p: Principal, rid: str) -> R.RunRef:
        if not p.admin:
            raise HTTPError(403, "runs are shown only to a token for every namespace (*)", "forbidden")
        ref = R.find_runs(ui.run_roots).get(rid)
        if ref is None:
            raise HTTPError(
                404, f"no run {rid!r} under {', '.join(ui.run_roots) or '(no --runs folder given)'}"
            )
        return ref

    @router.get("/runs")
    async def runs_page(request: Request) -> Any:
        async def render(p: Principal) -> HTMLResponse:
            if not p.admin:
                raise HTTPError(403, "runs are shown only to a token for every namespace (*)", "forbidden")
            found = R.find_runs(ui.run_roots)
            rows = [
                (
                    f'<a href="/runs/{quote(rid, safe="/")}">{esc(ref.name)}</a>',
                    esc(ref.kind),
                    esc(str(ref.path)),
                )
                for rid, ref in found.items()
            ]
            body = (
                table(["run", "kind", "folder"], rows)
                if rows
                else (
                    f'<p class="muted">No runs found under {esc(", ".join(ui.run_roots) or "(no --runs folder given)")}.</p>'
                )
            )
            return ui.html("Runs", body, request, p)

        return await ui.guarded(request, render)

    @router.get("/runs/plot")
    async def plot(request: Request, id: str) -> Any:
        async def render(p: Principal) -> Any:
            ref = run_ref(p, id)
            png = ref.path / ("scores.png" if ref.kind == "eval" else "reward.png")
            if not png.exists():
                raise HTTPError(404, "this run has no plot")
            return FileResponse(png, media_type="image/png")

        return await ui.guarded(request, render)

    @router.get("/runs/eval/{name:path}")
    async def eval_run(request: Request, name: str, category: str = "", wrong: bool = False) -> Any:
        async def render(p: Principal) -> HTMLResponse:
            rid = f"eval/{name}"
            run = R.load_eval(run_ref(p, rid).path)
            rows = R.filter_questions(run.rows, category=category or None, wrong_only=wrong)
            cats = '<option value="">all categories</option>' + "".join(
                f"<option{' selected' if c == category else ''}>{esc(c)}</option>" for c in run.categories
            )
            form = f"""<form method="get" class="filters"><label>Category <select name="category">{cats}</select></label>
<label><input type="checkbox" name="wrong" value="true"{" checked" if wrong else ""}> wrong answers only</label>
<button class="primary">Filter</button></form>"""
            qrows = []
            for r in rows:
                bad = R.is_wrong(r)
                mark = {True: '<span class="bad">wrong</span>', False: '<span class="good">right</span>'}.get(
                    bad, "unscored"
                )
                mems = R.retrieved_memories(run, r)
                listing = "".join(
                    f"<li><span class=chip>{esc(m['type'])}</span> {_snip(m['content'], 300)}"
                    f' <span class="muted">{esc(", ".join(m["evidence"]))}</span></li>'
                    for m in mems
                )
                retrieved = (f"<details><summary>{len(mems)} memories</summary><ol>{listing}</ol></details>" if mems
                             else f'<span class="muted">{len(r.get("retrieved_ids") or [])} ids</span>')  # fmt: skip
                gold = "; ".join(str(a) for a in r.get("answers") or [])
                pred = r.get("prediction")
                pred_html = (
                    esc(pred)
                    if pred is not None
                    else f'<span class="bad">failed: {esc(r.get("error"))}</span>'
                )
                qrows.append((esc(r.get("question_id")), esc(r.get("category")), esc(r.get("question")), esc(gold),
                              pred_html, num(r.get("f1")), mark, retrieved))  # fmt: skip
            plot_html = (
                f'<img class="plot" src="{url("/runs/plot", id=rid)}" alt="scores per category">'
                if run.plot
                else ""
            )
            body = f"""<p><a href="/runs">← runs</a> · <span class="muted">{esc(run.path)}</span></p>
{plot_html}<details open><summary>Report</summary>{markdown(run.report_md) if run.report_md else pretty(run.summary)}</details>
<h2>Questions ({len(rows)} of {len(run.rows)})</h2>{form}
{table(["id", "category", "question", "gold", "prediction", "F1", "verdict", "retrieved"], qrows, num_cols=[5], cls="questions")}"""
            return ui.html(f"Evaluation {name}", body, request, p)

        return await ui.guarded(request, render)

    @router.get("/runs/train/{name:path}")
    async def train_run(request: Request, name: str, step: int = 0) -> Any:
        async def render(p: Principal) -> HTMLResponse:
            rid = f"train/{name}"
            run = R.load_train(run_ref(p, rid).path)
            cols = [
                "step",
                "reward_mean",
                "groups_kept",
                "samples",
                "pg_loss",
                "approx_kl",
                "grad_norm",
                "seconds",
            ]
            mrows = [
                [f'<a href="{url(f"/runs/{rid}", step=m.get("step"))}">{esc(m.get("step"))}</a>']
                + [num(m.get(c), 4) for c in cols[1:]]
                for m in run.metrics
            ]
            steps = sorted({int(r.get("step", 0)) for r in run.rollouts})
            chosen = step or (steps[-1] if steps else 0)
            cards = [_rollout_card(i, r) for i, r in enumerate(run.rollouts_of(chosen), 1)]
            plot_html = (
                f'<img class="plot" src="{url("/runs/plot", id=rid)}" alt="reward per step">'
                if run.plot
                else ""
            )
            body = f"""<p><a href="/runs">← runs</a> · <span class="muted">{esc(run.path)}</span></p>{plot_html}
<h2>Metrics per step</h2>{table(cols, mrows, num_cols=range(1, len(cols)))}
<h2>Rollouts of step {chosen}</h2>{"".join(cards) or '<p class="muted">no rollouts recorded</p>'}"""
            return ui.html(f"Training {name}", body, request, p)

        return await ui.guarded(request, render)


def _rollout_card(i: int, r: dict[str, Any]) -> str:
    """One rollout: task, reward (or failure), then its trajectory when recorded (messages, tool calls and
    results), else its final reply."""
    reward = (
        f'<span class="bad">failed: {esc(r.get("failure"))}</span>'
        if r.get("failure")
        else f"reward {num(r.get('reward'))}"
    )
    parts = []
    for s in r.get("steps") or []:
        msgs = "".join(
            f"<li><strong>{esc(m.get('role'))}</strong>: {esc(m.get('content'))}</li>"
            for m in s.get("messages", [])[-3:]
        )
        calls = "".join(
            f"<li><code>{esc(c.get('name'))}({esc(json.dumps(c.get('arguments'), ensure_ascii=False))})</code></li>"
            for c in s.get("tool_calls", [])
        )
        results = "".join(f"<li>{esc(x.get('content', x))}</li>" for x in s.get("tool_results", []))
        parts.append(
            f"<details><summary>LLM call {esc(s.get('role') or '')}</summary><ul>{msgs}</ul>"
            f"<p><strong>reply</strong>: {esc(s.get('response'))}</p>"
            + (f"<p>tool calls</p><ol>{calls}</ol>" if calls else "")
            + (f"<p>tool results</p><ol>{results}</ol>" if results else "")
            + "</details>"
        )
    final = (
        f"<p><strong>final reply</strong>: {esc(r.get('final'))}</p>" if r.get("final") is not None else ""
    )
    metrics = f'<p class="muted">{esc(json.dumps(r.get("metrics") or {}))}</p>' if r.get("metrics") else ""
    return f'<div class="card rollout"><p><strong>#{i}</strong> task {esc(r.get("task"))} · {reward}</p>{"".join(parts)}{final}{metrics}</div>'
