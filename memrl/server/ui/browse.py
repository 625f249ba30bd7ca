"""The web memory browser, served at ``/`` by ``memrl serve memory`` and opened by ``memrl ui --db PATH``.

Pages: namespaces; a namespace's core memory and items by type, with a form to add one; its agent jobs
with their events and an undo button (:mod:`memrl.server.ui.jobs`); an item with its
evidence, an edit form and its history as a timeline (undo, restore, delete buttons); a search playground
showing each hit's fused, dense and BM25 scores and ranks; evaluation and training runs from ``--runs``
folders (:mod:`memrl.server.ui.runs`). The forms and their handlers are in :mod:`memrl.server.ui.edit`.

With tokens configured, the browser asks for one (kept in a SameSite=Strict, HTTP-only cookie) and shows
only the namespaces it may touch; evaluation and training runs need a token for every namespace (``*``).
Every form carries a CSRF token (:class:`~memrl.server.guard.CsrfTokens`) and the whole app sits behind
:class:`~memrl.server.guard.BrowserGuard` (Host, Origin, frame and content-security checks).
"""

from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse

from memrl.errors import MemrlError, NotFoundError
from memrl.memory import AsyncMemory
from memrl.memory.records import ITEM_TYPES
from memrl.server.guard import CsrfTokens
from memrl.server.http import HTTPError, Principal, Tokens
from memrl.server.offload import call_on
from memrl.server.ui.pages import esc, num, page, post_button, pretty, seg, table, url, when

COOKIE = "memrl_token"
PAGE_SIZE = 100
#: What the login page may say after a failed attempt (``?error=`` carries the code, never the text).
LOGIN_ERRORS = {
    "invalid": "invalid bearer token",
    "missing": "missing bearer token: paste the token the server was started with",
}


def _snip(text: str, n: int = 220) -> str:
    return esc(text if len(text) <= n else text[: n - 1] + "…")


class UI:
    """What every page and form handler of the browser shares: the store, who the visitor is, CSRF."""

    def __init__(
        self,
        memory: AsyncMemory,
        tokens: Tokens,
        run_roots: list[str],
        csrf: CsrfTokens,
        notice: Callable[[], str] | None = None,
    ) -> None:
        self.memory, self.tokens, self.run_roots, self.csrf = memory, tokens, run_roots, csrf
        self.notice = notice or (lambda: "")  # the server's own state (the embedder loading), on every page

    def session(self, request: Request) -> str:
        """The visitor's session for CSRF tokens: the login cookie, or "" in no-token mode."""
        return request.cookies.get(COOKIE, "") if self.tokens.enabled else ""

    def csrf_field(self, request: Request) -> dict[str, str]:
        return {CsrfTokens.FIELD: self.csrf.token(self.session(request))}

    def button(
        self, request: Request, action: str, label: str, *, primary: bool = False, **hidden: str
    ) -> str:
        """A POST button carrying the visitor's CSRF token (and ``hidden`` fields)."""
        return post_button(action, label, hidden={**hidden, **self.csrf_field(request)}, primary=primary)

    async def form(self, request: Request) -> dict[str, str]:
        """The posted form's fields (first value each), after checking its CSRF token (403 otherwise)."""
        raw = await request.body()
        fields = {
            k: v[0] for k, v in parse_qs(raw.decode("utf-8", "replace"), keep_blank_values=True).items()
        }
        if not self.csrf.valid(self.session(request), fields.get(CsrfTokens.FIELD)):
            raise HTTPError(
                403, "the form's CSRF token is missing or stale: reload the page and retry", "forbidden"
            )
        return fields

    def who(self, request: Request) -> Principal:
        if not self.tokens.enabled:
            return self.tokens.principal(None)
        cookie = request.cookies.get(COOKIE)
        header = request.headers.get("authorization") or (f"Bearer {cookie}" if cookie else None)
        return self.tokens.principal(header)

    def back(self, path: str, *, done: str = "", error: str = "") -> RedirectResponse:
        """Redirect to ``path`` showing a note there (signed: see :meth:`notes`)."""
        sig = self.csrf.sign(f"{done}\x00{error}")
        return RedirectResponse(url(path, done=done, error=error, note=sig), status_code=303)

    def notes(self, request: Request) -> tuple[str, str]:
        """(done, error) notes of the page's query, only when the server signed them (:meth:`back`): a link
        from elsewhere cannot make a page say something (``?error=call this number``)."""
        q = request.query_params
        done, error = q.get("done", ""), q.get("error", "")
        return (done, error) if self.csrf.signed(f"{done}\x00{error}", q.get("note")) else ("", "")

    def html(
        self, title: str, body: str, request: Request, p: Principal, status: int = 200, *, error: str = ""
    ) -> HTMLResponse:
        """A page for visitor ``p`` (its header names the token and has the log-out button); ``error``: the
        server's own error text (else the signed ``?error=`` note, if any)."""
        done, note = self.notes(request)
        user = p.name if self.tokens.enabled else None
        logout = self.button(request, "/logout", "log out") if user else ""
        return HTMLResponse(
            page(
                title,
                body,
                flash=done,
                error=error or note,
                user=user,
                logout=logout,
                runs=p.admin,
                notice=self.notice(),
            ),
            status,
        )

    async def guarded(self, request: Request, render: Any) -> Any:
        """Render a page, or send the visitor to the login form when the server wants a token."""
        try:
            p = self.who(request)
        except HTTPError:
            return RedirectResponse(url("/login", next=request.url.path), status_code=303)
        try:
            return await render(p)
        except HTTPError as e:
            title = "Not allowed" if e.status == 403 else "Error"
            return self.html(title, "", request, p, e.status, error=e.message)
        except MemrlError as e:
            status = 404 if isinstance(e, NotFoundError) else 422
            return self.html("Not found" if status == 404 else "Error", "", request, p, status, error=str(e))


def ui_router(
    memory: AsyncMemory,
    tokens: Tokens,
    run_roots: list[str],
    csrf: CsrfTokens | None = None,
    jobs: Any = None,
    notice: Callable[[], str] | None = None,
) -> APIRouter:
    """``jobs``: the server's job runner (undo of a job goes through it; default: the memory's writer).
    ``notice``: what every page says about the server's state (the embedder loading: :mod:`.warmup`)."""
    from memrl.server.ui.edit import add_edit_routes, add_form, edit_form, undo_button
    from memrl.server.ui.jobs import add_job_routes
    from memrl.server.ui.runs import add_run_routes

    router = APIRouter(include_in_schema=False)
    ui = UI(memory, tokens, run_roots, csrf or CsrfTokens(), notice)
    html, guarded = ui.html, ui.guarded

    # ---------------------------------------------------------------------------------------- login
    @router.get("/login")
    async def login_form(request: Request, next: str = "/") -> HTMLResponse:
        csrf_input = f'<input type="hidden" name="csrf" value="{esc(ui.csrf.token("login"))}">'
        body = f"""<form method="post" action="/login"><input type="hidden" name="next" value="{esc(next)}">{csrf_input}
<label>Bearer token <input type="password" name="token" autofocus required></label>
<button class="primary">Open</button></form>"""
        # the error is a code: the page says only what the server wrote, whatever a link puts in ?error=
        error = LOGIN_ERRORS.get(request.query_params.get("error", ""), "")
        return HTMLResponse(page("Log in", body, error=error))

    @router.post("/login")
    async def login(request: Request) -> Any:
        form = {k: v[0] for k, v in parse_qs((await request.body()).decode("utf-8", "replace")).items()}
        if not ui.csrf.valid("login", form.get("csrf")):
            return HTMLResponse(
                page("Log in", "", error="the login form's CSRF token is missing or stale"), 403
            )
        token, nxt = form.get("token", ""), form.get("next", "/")
        nxt = nxt if nxt.startswith("/") and not nxt.startswith("//") else "/"
        try:
            tokens.principal(f"Bearer {token}")
        except HTTPError:
            code = "invalid" if token.strip() else "missing"
            return RedirectResponse(url("/login", next=nxt, error=code), status_code=303)
        resp = RedirectResponse(nxt, status_code=303)
        resp.set_cookie(COOKIE, token, httponly=True, samesite="strict")
        return resp

    @router.get("/logout")
    async def logout_page(request: Request) -> HTMLResponse:
        """Asks (a GET changes nothing: a link or an image elsewhere must not log the visitor out)."""
        body = f'<p>{ui.button(request, "/logout", "Log out", primary=True)} <a href="/">Cancel</a></p>'
        return HTMLResponse(page("Log out", body))

    @router.post("/logout")
    async def logout(request: Request) -> Any:
        await ui.form(request)  # the visitor's CSRF token (and the guard's Origin check) or 403
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

            def read() -> tuple[list, list]:
                items = store.list(
                    ns,
                    types=types,
                    include_deleted=deleted,
                    limit=PAGE_SIZE,
                    offset=min(max(offset, 0), 10**9),
                )
                tabs = [("", "all", store.count(ns))] + [
                    (t.value, t.value, store.count(ns, types=[t])) for t in ITEM_TYPES
                ]
                return items, tabs

            items, tabs = await call_on(memory, (ns,), read)
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
            body = f"""<p><a href="/ns/{seg(ns)}/search">Search this namespace</a> · <a href="/ns/{seg(ns)}/jobs">Jobs</a> ·
<a href="/v1/namespaces/{seg(ns)}/export">Export (JSONL)</a></p>
<h2>Core memory</h2><pre>{esc(core) or '<span class="muted">(empty)</span>'}</pre>
<h2>Items</h2><p class="tabs">{nav} <a href="{toggle}">{"hide" if deleted else "show"} deleted</a></p>
{table(["id", "type", "content", "evidence", "updated"], rows)}{more}
{add_form(ui, request, ns)}"""
            return html(f"Namespace {ns}", body, request, p)

        return await guarded(request, render)

    @router.get("/ns/{ns}/item/{mid:path}")
    async def item(request: Request, ns: str, mid: str) -> Any:
        async def render(p: Principal) -> HTMLResponse:
            p.check(ns)
            it = await memory.get(mid, namespace=ns, include_deleted=True)
            entries = await call_on(memory, (ns,), memory.store.history, ns, mid)
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
            actions = [undo_button(ui, request, base, entries)]
            actions.append(
                ui.button(request, base + "/restore", "Restore")
                if it.deleted
                else ui.button(request, base + "/delete", "Delete")
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
{"" if it.deleted else edit_form(ui, request, ns, it)}
<h2>Evidence</h2>{"<ul>" + "".join(evidence) + "</ul>" if evidence else '<p class="muted">none recorded</p>'}
<h2>Metadata</h2>{pretty(it.metadata)}
<h2>History</h2><ol class="timeline" reversed>{"".join(steps)}</ol>"""
            return html(f"Memory {mid}", body, request, p)

        return await guarded(request, render)

    add_edit_routes(router, ui)
    add_job_routes(router, ui, jobs or memory.writer)

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
                    (str(r), num(h.score, 4), num(h.dense_score), esc(h.dense_rank or "–"), num(h.bm25_score, 4, significant=True), esc(h.bm25_rank or "–"),
                     f'<span class="chip">{h.item.type.value}</span>',
                     f'<a href="/ns/{seg(ns)}/item/{seg(h.item.id)}">{esc(h.item.id)}</a> {_snip(h.item.content)}')
                    for r, h in enumerate(hits, 1)
                ]  # fmt: skip
                out = f"""<p class="muted">Fused score: reciprocal-rank fusion of the dense and BM25 lists (plus query
priors) in hybrid mode, the retriever's own score otherwise. Dense: cosine similarity. BM25: score with this namespace's own statistics (higher
is better; a word in more than half of the namespace's memories adds almost nothing). Rank: the hit's place in each retriever's list (– = not in it).</p>
{table(["#", "fused", "dense", "dense rank", "bm25", "bm25 rank", "type", "memory"], rows, num_cols=[0, 1, 2, 3, 4, 5], cls="hits")}"""
                if not hits:
                    out = '<p class="muted">No memories matched.</p>'
            body = f'<p><a href="/ns/{seg(ns)}">← {esc(ns)}</a></p>{form}{out}'
            return html(f"Search {ns}", body, request, p)

        return await guarded(request, render)

    add_run_routes(router, ui)
    return router
