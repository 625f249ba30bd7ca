"""The web memory browser, served at ``/`` by ``memrl serve memory`` and opened by ``memrl ui --db PATH``.

Pages: namespaces; a namespace's core memory and items by type; an item with its evidence and its history
as a timeline (undo, restore, delete buttons); a search playground showing each hit's fused, dense and
BM25 scores and ranks; evaluation runs (report, per-category plot, every question with its retrieved
memories, prediction, gold and score, filterable by category and wrong answers) and training runs (reward
curve, metrics, each rollout's messages, tool calls and results, and reward) from ``--runs`` folders.

With tokens configured, the browser asks for one (kept in a same-site, HTTP-only cookie) and shows only
the namespaces it may touch; evaluation and training runs need a token for every namespace (``*``).
"""

import json
from typing import Any
from urllib.parse import parse_qs, quote

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse, HTMLResponse, RedirectResponse

from memrl.errors import MemrlError
from memrl.memory.facade import AsyncMemory
from memrl.memory.types import ITEM_TYPES
from memrl.server import runs as R
from memrl.server.http import HTTPError, Principal, Tokens
from memrl.server.pages import esc, markdown, num, page, post_button, pretty, seg, table, url, when

COOKIE = "memrl_token"
PAGE_SIZE = 100


def _snip(text: str, n: int = 220) -> str:
    return esc(text if len(text) <= n else text[: n - 1] + "…")


def ui_router(memory: AsyncMemory, tokens: Tokens, run_roots: list[str]) -> APIRouter:
    router = APIRouter(include_in_schema=False)

    def who(request: Request) -> Principal:
        if not tokens.enabled:
            return tokens.principal(None)
        cookie = request.cookies.get(COOKIE)
        header = request.headers.get("authorization") or (f"Bearer {cookie}" if cookie else None)
        return tokens.principal(header)

    def html(title: str, body: str, request: Request, p: Principal) -> HTMLResponse:
        q = request.query_params
        user = p.name if tokens.enabled else None
        return HTMLResponse(page(title, body, flash=q.get("done", ""), error=q.get("error", ""), user=user))

    async def guarded(request: Request, render: Any) -> Any:
        """Render a page, or send the visitor to the login form when the server wants a token."""
        try:
            p = who(request)
        except HTTPError:
            return RedirectResponse(url("/login", next=request.url.path), status_code=303)
        try:
            return await render(p)
        except HTTPError as e:
            return HTMLResponse(
                page("Not allowed" if e.status == 403 else "Error", "", error=e.message), e.status
            )
        except MemrlError as e:
            status = 404 if isinstance(e, KeyError) else 422
            return HTMLResponse(page("Not found" if status == 404 else "Error", "", error=str(e)), status)

    # ---------------------------------------------------------------------------------------- login
    @router.get("/login")
    async def login_form(request: Request, next: str = "/") -> HTMLResponse:
        body = f"""<form method="post" action="/login"><input type="hidden" name="next" value="{esc(next)}">
<label>Bearer token <input type="password" name="token" autofocus required></label>
<button class="primary">Open</button></form>"""
        return HTMLResponse(page("Log in", body, error=request.query_params.get("error", "")))

    @router.post("/login")
    async def login(request: Request) -> RedirectResponse:
        form = parse_qs((await request.body()).decode("utf-8", "replace"))
        token, nxt = form.get("token", [""])[0], form.get("next", ["/"])[0]
        nxt = nxt if nxt.startswith("/") and not nxt.startswith("//") else "/"
        try:
            tokens.principal(f"Bearer {token}")
        except HTTPError as e:
            return RedirectResponse(url("/login", next=nxt, error=e.message), status_code=303)
        resp = RedirectResponse(nxt, status_code=303)
        resp.set_cookie(COOKIE, token, httponly=True, samesite="strict")
        return resp

    @router.get("/logout")
    async def logout() -> RedirectResponse:
        resp = RedirectResponse("/login", status_code=303)
        resp.delete_cookie(COOKIE)
        return resp

    # ---------------------------------------------------------------------------------------- memory
    @router.get("/")
    async def home(request: Request) -> Any:
        async def render(p: Principal) -> HTMLResponse:
            rows = [
                (f'<a href="/ns/{seg(n["name"])}">{esc(n["name"])}</a>', num(n["items"]), esc(n["parent"] or ""),
                 esc(when(n["created_at"])))
                for n in await memory.namespaces() if p.allows(n["name"])
            ]  # fmt: skip
            body = table(["namespace", "items", "cloned from", "created"], rows, num_cols=[1])
            if not rows:
                body = '<p class="muted">No namespaces yet: add memories with the API or <code>memrl memory add</code>.</p>'
            return html("Namespaces", body, request, p)

        return await guarded(request, render)

    @router.get("/ns/{ns}")
    async def namespace(
        request: Request, ns: str, type: str = "", deleted: bool = False, offset: int = 0
    ) -> Any:
        async def render(p: Principal) -> HTMLResponse:
            p.check(ns)
            store = memory.store
            types = [type] if type else None
            items = store.list(
                ns, types=types, include_deleted=deleted, limit=PAGE_SIZE, offset=max(offset, 0)
            )
            tabs = [("", "all", store.count(ns))] + [
                (t.value, t.value, store.count(ns, types=[t])) for t in ITEM_TYPES
            ]
            nav = " ".join(
                f'<a href="{url(f"/ns/{seg(ns)}", type=v, deleted=deleted)}"'
                f"{' aria-current=page' if v == type else ''}>{esc(label)} ({n})</a>"
                for v, label, n in tabs
            )
            toggle = url(f"/ns/{seg(ns)}", type=type, deleted=not deleted)
            core = await memory.core(namespace=ns)
            rows = [
                (f'<a href="/ns/{seg(ns)}/item/{seg(i.id)}">{esc(i.id)}</a>', f'<span class="chip">{i.type.value}</span>',
                 _snip(i.content) + (' <span class="bad">(deleted)</span>' if i.deleted else ""),
                 esc(", ".join(i.evidence[:4]) + (" …" if len(i.evidence) > 4 else "")), esc(when(i.updated_at)))
                for i in items
            ]  # fmt: skip
            more = ""
            if len(items) == PAGE_SIZE:
                more = f'<p><a href="{url(f"/ns/{seg(ns)}", type=type, deleted=deleted, offset=offset + PAGE_SIZE)}">next page</a></p>'
            body = f"""<p><a href="/ns/{seg(ns)}/search">Search this namespace</a> ·
<a href="/v1/namespaces/{seg(ns)}/export">Export (JSONL)</a></p>
<h2>Core memory</h2><pre>{esc(core) or '<span class="muted">(empty)</span>'}</pre>
<h2>Items</h2><p class="tabs">{nav} <a href="{toggle}">{"hide" if deleted else "show"} deleted</a></p>
{table(["id", "type", "content", "evidence", "updated"], rows)}{more}"""
            return html(f"Namespace {ns}", body, request, p)

        return await guarded(request, render)

    @router.get("/ns/{ns}/item/{mid}")
    async def item(request: Request, ns: str, mid: str) -> Any:
        async def render(p: Principal) -> HTMLResponse:
            p.check(ns)
            it = await memory.get(mid, namespace=ns, include_deleted=True)
            entries = memory.store.history(ns, mid)
            evidence = []
            for ev in it.evidence:
                try:
                    src = await memory.get(ev, namespace=ns, include_deleted=True)
                    evidence.append(
                        f'<li><a href="/ns/{seg(ns)}/item/{seg(ev)}">{esc(ev)}</a>: {_snip(src.content, 400)}</li>'
                    )
                except MemrlError:
                    evidence.append(f"<li>{esc(ev)}</li>")
            steps = []
            for e in reversed(entries):
                old, new = e.old_content, e.new_content
                change = ""
                if old != new:
                    change = (f"<div><del>{esc(old)}</del></div>" if old else "") + (
                        f"<div><ins>{esc(new)}</ins></div>" if new else ""
                    )
                flags = [k for k in ("deleted",) if (e.new or {}).get(k) and not (e.old or {}).get(k)]
                steps.append(
                    f'<li class="{"undone" if e.undone else ""}"><strong>{esc(e.op)}</strong> '
                    f'<span class="muted">#{e.seq} · {esc(when(e.at))}{" · " + esc(e.actor) if e.actor else ""}'
                    f"{' · undone' if e.undone else ''}{' · ' + ', '.join(flags) if flags else ''}</span>{change}</li>"
                )
            base = f"/ns/{seg(ns)}/item/{seg(mid)}"
            actions = [post_button(base + "/undo", "Undo latest change", primary=True)]
            actions.append(
                post_button(base + "/restore", "Restore")
                if it.deleted
                else post_button(base + "/delete", "Delete")
            )
            state = (
                '<p class="bad">This memory is deleted: search never returns it until it is restored.</p>'
                if it.deleted
                else ""
            )
            body = f"""<p><a href="/ns/{seg(ns)}">← {esc(ns)}</a></p>{state}
<div class="card"><p><span class="chip">{it.type.value}</span> <span class="muted">session {esc(it.session or "–")} ·
created {esc(when(it.created_at))} · updated {esc(when(it.updated_at))}</span></p>
<p id="content">{esc(it.content)}</p></div><p>{" ".join(actions)}</p>
<h2>Evidence</h2>{"<ul>" + "".join(evidence) + "</ul>" if evidence else '<p class="muted">none recorded</p>'}
<h2>Metadata</h2>{pretty(it.metadata)}
<h2>History</h2><ol class="timeline" reversed>{"".join(steps)}</ol>"""
            return html(f"Memory {mid}", body, request, p)

        return await guarded(request, render)

    def action(name: str) -> Any:
        async def run(request: Request, ns: str, mid: str) -> Any:
            async def render(p: Principal) -> RedirectResponse:
                p.check(ns)
                back = f"/ns/{seg(ns)}/item/{seg(mid)}"
                try:
                    if name == "undo":
                        done = memory.store.undo(ns, mid, actor=f"ui:{p.name}")
                        msg = "Undid " + ", ".join(f"#{e.seq} {e.op}" for e in done)
                    elif name == "restore":
                        await memory.restore(mid, namespace=ns, actor=f"ui:{p.name}")
                        msg = "Restored."
                    else:
                        await memory.delete(mid, namespace=ns, actor=f"ui:{p.name}")
                        msg = "Deleted (restore or undo brings it back)."
                except MemrlError as e:
                    return RedirectResponse(url(back, error=str(e)), status_code=303)
                return RedirectResponse(url(back, done=msg), status_code=303)

            return await guarded(request, render)

        return run

    for name in ("undo", "restore", "delete"):
        router.add_api_route(f"/ns/{{ns}}/item/{{mid}}/{name}", action(name), methods=["POST"])

    @router.get("/ns/{ns}/search")
    async def search(
        request: Request, ns: str, q: str = "", mode: str = "hybrid", top_k: int = 10, type: str = ""
    ) -> Any:
        async def render(p: Principal) -> HTMLResponse:
            p.check(ns)
            opts = "".join(
                f"<option{' selected' if m == mode else ''}>{m}</option>" for m in ("hybrid", "dense", "bm25")
            )
            topts = '<option value="">all types</option>' + "".join(
                f"<option{' selected' if t.value == type else ''}>{t.value}</option>" for t in ITEM_TYPES
            )
            form = f"""<form method="get" role="search"><input type="search" name="q" value="{esc(q)}" aria-label="query"
placeholder="Search memories (press / to focus)" autofocus> <select name="mode" aria-label="mode">{opts}</select>
<select name="type" aria-label="type">{topts}</select> <label>top <input type="number" name="top_k" min="1" max="100"
value="{max(1, min(top_k, 100))}" style="width:4.5rem"></label> <button class="primary">Search</button></form>"""
            out = ""
            if q.strip():
                hits = await memory.search(q, namespace=ns, top_k=max(1, min(top_k, 100)), mode=mode,  # type: ignore[arg-type]
                                           types=[type] if type else None)  # fmt: skip
                rows = [
                    (str(r), num(h.score, 4), num(h.dense_score), esc(h.dense_rank or "–"), num(h.bm25_score), esc(h.bm25_rank or "–"),
                     f'<span class="chip">{h.item.type.value}</span>',
                     f'<a href="/ns/{seg(ns)}/item/{seg(h.item.id)}">{esc(h.item.id)}</a> {_snip(h.item.content)}')
                    for r, h in enumerate(hits, 1)
                ]  # fmt: skip
                out = f"""<p class="muted">Fused score: reciprocal-rank fusion of the dense and BM25 lists (plus query
priors) in hybrid mode, the retriever's own score otherwise. Dense: cosine similarity. BM25: score with this namespace's own statistics (higher
is better). Rank: the hit's place in each retriever's list (– = not in it).</p>
{table(["#", "fused", "dense", "dense rank", "bm25", "bm25 rank", "type", "memory"], rows, num_cols=[0, 1, 2, 3, 4, 5], cls="hits")}"""
                if not hits:
                    out = '<p class="muted">No memories matched.</p>'
            body = f'<p><a href="/ns/{seg(ns)}">← {esc(ns)}</a></p>{form}{out}'
            return html(f"Search {ns}", body, request, p)

        return await guarded(request, render)

    # ---------------------------------------------------------------------------------------- runs
    def run_ref(p: Principal, rid: str) -> R.RunRef:
        if not p.admin:
            raise HTTPError(403, "runs are shown only to a token for every namespace (*)", "forbidden")
        ref = R.find_runs(run_roots).get(rid)
        if ref is None:
            raise HTTPError(404, f"no run {rid!r} under {', '.join(run_roots) or '(no --runs folder given)'}")
        return ref

    @router.get("/runs")
    async def runs_page(request: Request) -> Any:
        async def render(p: Principal) -> HTMLResponse:
            if not p.admin:
                raise HTTPError(403, "runs are shown only to a token for every namespace (*)", "forbidden")
            found = R.find_runs(run_roots)
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
                    f'<p class="muted">No runs found under {esc(", ".join(run_roots) or "(no --runs folder given)")}.</p>'
                )
            )
            return html("Runs", body, request, p)

        return await guarded(request, render)

    @router.get("/runs/plot")
    async def plot(request: Request, id: str) -> Any:
        async def render(p: Principal) -> Any:
            ref = run_ref(p, id)
            png = ref.path / ("scores.png" if ref.kind == "eval" else "reward.png")
            if not png.exists():
                raise HTTPError(404, "this run has no plot")
            return FileResponse(png, media_type="image/png")

        return await guarded(request, render)

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
            return html(f"Evaluation {name}", body, request, p)

        return await guarded(request, render)

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
            return html(f"Training {name}", body, request, p)

        return await guarded(request, render)

    return router


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
