"""The web browser's job pages: a namespace's agent jobs (remember, maintain, read) with their status, a
job's input (the conversation, document or question it was sent), its events (what it added, updated, merged,
deleted, skipped or refused, before and after), and an undo button.

Undo is a POST carrying the visitor's CSRF token, like every form of the browser (:mod:`memrl.server.ui.edit`),
and reverts exactly that job's writes through the server's job runner (``POST /v1/jobs/{id}/undo``'s
code): refused, with the page saying which items, when a later change touched one of them.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from memrl.errors import MemrlError, NotFoundError
from memrl.memory.jobs import Job, JobTable
from memrl.server.http import Principal
from memrl.server.offload import call_on
from memrl.server.ui.pages import esc, num, pretty, seg, table, when


async def _job_of(ui: Any, ns: str, job_id: str) -> Job:
    """The job ``job_id`` of namespace ``ns`` (another namespace's job is "no job", as in the API)."""
    job = await call_on(ui.memory, (), JobTable(ui.memory.store).get, job_id)
    if job.namespace != ns:
        raise NotFoundError(f"no job {job_id!r}")
    return job


def _status(job: Job) -> str:
    cls = {"succeeded": "good", "failed": "bad", "cancelled": "bad"}.get(job.status, "muted")
    extra = " · undone" if job.undone else (" · dry run" if job.dry_run else "")
    return f'<span class="{cls}">{esc(job.status)}</span><span class="muted">{extra}</span>'


def _events(ns: str, job: Job) -> str:
    rows = []
    for e in job.events:
        mid = e.get("id") or ""
        link = (
            f'<a href="/ns/{seg(ns)}/item/{seg(mid)}">{esc(mid)}</a>'
            if mid and mid != "__core__"
            else esc(mid)
        )
        before = f"<del>{esc(e['before'])}</del>" if e.get("before") else ""
        after = f"<ins>{esc(e['after'])}</ins>" if e.get("after") else ""
        rows.append((f'<span class="chip">{esc(e.get("event"))}</span>', link, esc(e.get("type") or ""),
                     before, after, esc(e.get("reason") or e.get("op") or "")))  # fmt: skip
    if not rows:
        return '<p class="muted">No events.</p>'
    return table(["event", "memory", "type", "before", "after", "op / reason"], rows, cls="events")


def _input(job: Job) -> str:
    """What the job was sent: a remember's conversation, a read's document, a maintain's question."""
    req = job.request or {}
    if job.kind == "remember":
        rows = [(esc(m.get("speaker") or m.get("role") or ""), esc(m.get("content") or ""), esc(m.get("timestamp") or ""))
                for m in req.get("messages") or []]  # fmt: skip
        when_ = (
            f'<p class="muted">session time {esc(req["session_time"])}</p>' if req.get("session_time") else ""
        )
        return when_ + table(["speaker", "said", "time"], rows, cls="input")
    if job.kind == "read":
        doc = str(req.get("document") or "")
        cut = f'<p class="muted">the first 5,000 of {len(doc):,} characters</p>' if len(doc) > 5000 else ""
        return f"<pre>{esc(doc[:5000])}</pre>{cut}" + (
            f"<p>Question: {esc(req['question'])}</p>" if req.get("question") else ""
        )
    return pretty({k: v for k, v in req.items()})


def _remember_form(ui: Any, request: Request, ns: str) -> str:
    token = esc(ui.csrf_field(request)["csrf"])
    return f"""<details open><summary>Remember a conversation</summary>
<form method="post" action="/ns/{seg(ns)}/jobs/remember" class="card">
<input type="hidden" name="csrf" value="{token}">
<p><label>One turn a line, <code>speaker: what was said</code><br>
<textarea name="conversation" rows="5" cols="80" required placeholder="Alice: I moved to Lisbon last month"></textarea></label></p>
<p><label><input type="checkbox" name="dry_run" value="1" checked> dry run: show the events, store nothing</label>
<button class="primary">Remember</button></p></form></details>"""


def parse_conversation(text: str) -> list[dict[str, str]]:
    """The form's lines as messages: ``speaker: text`` (a line without a speaker is the user's)."""
    out = []
    for line in text.splitlines():
        if line.strip():
            who, sep, said = line.partition(":")
            named = sep and who.strip() and len(who) <= 60 and said.strip()
            out.append({"role": "user", "speaker": who.strip(), "content": said.strip()} if named
                       else {"role": "user", "content": line.strip()})  # fmt: skip
    return out


def add_job_routes(router: APIRouter, ui: Any, jobs: Any) -> None:
    """The job pages and the undo form's handler (see the module docstring). ``jobs``: the server's job
    runner (a :class:`~memrl.memory.jobs.table.JobWriter`), which undo goes through."""

    @router.get("/ns/{ns}/jobs")
    async def job_list(request: Request, ns: str) -> Any:
        async def render(p: Principal) -> HTMLResponse:
            p.check(ns)
            rows = [
                (f'<a href="/ns/{seg(ns)}/jobs/{seg(j.id)}">{esc(j.id)}</a>', esc(j.kind), _status(j),
                 num(len(j.events)), esc(when(j.created_at)), num(j.seconds, 1))
                for j in await ui.memory.jobs(namespace=ns)
            ]  # fmt: skip
            body = f'<p><a href="/ns/{seg(ns)}">← {esc(ns)}</a></p>'
            body += (
                table(["job", "kind", "status", "events", "created", "seconds"], rows, num_cols=[3, 5])
                if rows
                else '<p class="muted">No jobs yet: POST /v1/namespaces/{ns}/remember (or maintain, read).</p>'
            )
            if jobs is not None:
                body = _remember_form(ui, request, ns) + body
            return ui.html(f"Jobs of {ns}", body, request, p)

        return await ui.guarded(request, render)

    @router.post("/ns/{ns}/jobs/remember")
    async def remember(request: Request, ns: str) -> Any:
        async def render(p: Principal) -> Any:
            p.check(ns)
            form = await ui.form(request)
            back = f"/ns/{seg(ns)}/jobs"
            if jobs is None:
                return ui.back(back, error="this server runs no jobs")
            try:
                request_ = {"messages": parse_conversation(form.get("conversation", ""))}
                job, _ = await jobs.submit(ns, "remember", request_, dry_run=bool(form.get("dry_run")))
                job = await jobs.wait(job.id, 30)
            except MemrlError as e:
                return ui.back(back, error=str(e))
            done = "Dry run: the events below were not stored." if job.dry_run else "Remembered."
            return ui.back(
                f"{back}/{seg(job.id)}", done=done if job.finished else "Queued: reload to follow it."
            )

        return await ui.guarded(request, render)

    @router.get("/ns/{ns}/jobs/{job_id}")
    async def job_page(request: Request, ns: str, job_id: str) -> Any:
        async def render(p: Principal) -> HTMLResponse:
            p.check(ns)
            job = await _job_of(ui, ns, job_id)
            base = f"/ns/{seg(ns)}/jobs/{seg(job.id)}"
            if job.batch and not job.undone:
                undo = ui.button(request, base + "/undo", "Undo this job", primary=True)
            else:
                why = "undone already" if job.undone else "it changed nothing"
                undo = f'<button class="primary" disabled>Undo this job</button> <span class="muted">{why}</span>'
            error = f'<p class="bad">{esc(job.error)}</p>' if job.error else ""
            body = f"""<p><a href="/ns/{seg(ns)}/jobs">← jobs of {esc(ns)}</a></p>
<div class="card"><p><strong>{esc(job.kind)}</strong> {_status(job)} <span class="muted">created
{esc(when(job.created_at))} · finished {esc(when(job.finished_at) or "–")} · {num(job.seconds, 1)} s</span></p>
{error}<p>{undo}</p></div>
<h2>Input</h2>{_input(job)}
<h2>Events</h2>{_events(ns, job)}
<h2>Progress, stats and tokens</h2>{pretty({k: job.result.get(k) for k in ("progress", "stats", "tokens")})}"""
            return ui.html(f"Job {job.id}", body, request, p)

        return await ui.guarded(request, render)

    @router.post("/ns/{ns}/jobs/{job_id}/undo")
    async def undo(request: Request, ns: str, job_id: str) -> Any:
        async def render(p: Principal) -> Any:
            p.check(ns)
            await ui.form(request)
            path = f"/ns/{seg(ns)}/jobs/{seg(job_id)}"
            try:
                await _job_of(ui, ns, job_id)
                if jobs is None:
                    return ui.back(path, error="this server runs no jobs, so it cannot undo one")
                await jobs.undo(job_id, actor=f"ui:{p.name}")
            except MemrlError as e:
                return ui.back(path, error=str(e))
            return ui.back(path, done="Undone: every write of this job is reverted.")

        return await ui.guarded(request, render)
