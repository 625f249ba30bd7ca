"""The web browser's forms and what they post to: add a memory, edit one, undo, restore, delete.

Every form carries the visitor's CSRF token (:meth:`memrl.server.ui.UI.form` refuses a missing or wrong
one with 403). Input goes through the same validation as the REST API, MCP and imports
(:mod:`memrl.memory.records.models`), so a bad field comes back as a message on the page naming it, and nothing
is written. Undo says what it will revert, acts only on the change the page showed (a second click
after the history moved on is refused, not applied to the next older change), and asks first when
reverting would remove the memory (undoing its creation).
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from memrl.errors import MemrlError, ValidationError
from memrl.memory.records import ITEM_TYPES, HistoryEntry, MemoryItem
from memrl.server.http import Principal
from memrl.server.offload import call_on
from memrl.server.ui.pages import esc, post_button, seg


def _type_options(selected: str) -> str:
    return "".join(
        f"<option{' selected' if t.value == selected else ''}>{t.value}</option>" for t in ITEM_TYPES
    )


def add_form(ui: Any, request: Request, ns: str) -> str:
    token = esc(ui.csrf_field(request)["csrf"])
    return f"""<details><summary>Add a memory</summary>
<form method="post" action="/ns/{seg(ns)}/add" class="card"><input type="hidden" name="csrf" value="{token}">
<p><label>Content<br><textarea name="content" rows="3" cols="80" required></textarea></label></p>
<p><label>Type <select name="type">{_type_options("semantic")}</select></label>
<label>Session <input type="text" name="session" size="10"></label>
<label>Evidence ids (comma-separated) <input type="text" name="evidence" size="30"></label></p>
<p><label>Metadata (JSON object, optional) <input type="text" name="metadata" size="60"></label></p>
<button class="primary">Add</button></form></details>"""


def edit_form(ui: Any, request: Request, ns: str, it: MemoryItem) -> str:
    token = esc(ui.csrf_field(request)["csrf"])
    return f"""<details><summary>Edit this memory</summary>
<form method="post" action="/ns/{seg(ns)}/item/{seg(it.id)}/edit" class="card">
<input type="hidden" name="csrf" value="{token}">
<p><label>Content<br><textarea name="content" rows="4" cols="80" required>{esc(it.content)}</textarea></label></p>
<p><label>Type <select name="type">{_type_options(it.type.value)}</select></label>
<button class="primary">Save</button> <span class="muted">the old version stays in the history</span></p>
</form></details>"""


def next_undo(entries: list[HistoryEntry]) -> HistoryEntry | None:
    """The change an undo of this item reverts: its latest change not undone (undo entries excluded)."""
    return next((e for e in reversed(entries) if not e.undone and e.op != "UNDO"), None)


#: What the undo button says, by the operation it reverts (anything else: "Undo latest change").
UNDO_LABELS = {
    "ADD": "Undo its creation", "UPDATE": "Undo the latest edit", "DELETE": "Undo the deletion",
    "RESTORE": "Undo the restore", "MERGE": "Undo the merge", "SPLIT": "Undo the split",
}  # fmt: skip


def undo_button(ui: Any, request: Request, base: str, entries: list[HistoryEntry]) -> str:
    """The item's undo button, worded for the change it reverts; the main button unless that change is the
    item's creation (undoing it removes the memory: the page asks first)."""
    target = next_undo(entries)
    if target is None:
        return '<button class="primary" disabled>Undo latest change</button>'
    label = UNDO_LABELS.get(target.op, "Undo latest change")
    return ui.button(request, base + "/undo", label, primary=target.op != "ADD", seq=str(target.seq))


def _fields(form: dict[str, str], *, new: bool) -> dict[str, Any]:
    """Form fields -> memory fields, with errors naming the field."""
    out: dict[str, Any] = {"content": form.get("content", ""), "type": form.get("type") or "semantic"}
    if new:
        evidence = [e.strip() for e in form.get("evidence", "").split(",") if e.strip()]
        out["evidence"] = evidence
        out["session"] = form.get("session") or None
        raw = form.get("metadata", "").strip()
        if raw:
            try:
                out["metadata"] = json.loads(raw)
            except json.JSONDecodeError as e:
                raise ValidationError(f"metadata: not valid JSON ({e.msg})") from None
    return out


def add_edit_routes(router: APIRouter, ui: Any) -> None:
    """The POST routes of the browser's forms (see the module docstring)."""
    memory = ui.memory

    back = ui.back

    @router.post("/ns/{ns}/add")
    async def add(request: Request, ns: str) -> Any:
        async def render(p: Principal) -> Any:
            p.check(ns)
            form = await ui.form(request)
            try:
                item = await memory.add(namespace=ns, actor=f"ui:{p.name}", **_fields(form, new=True))
            except MemrlError as e:
                return back(f"/ns/{seg(ns)}", error=str(e))
            return back(f"/ns/{seg(ns)}/item/{seg(item.id)}", done="Added.")

        return await ui.guarded(request, render)

    @router.post("/ns/{ns}/item/{mid:path}/edit")
    async def edit(request: Request, ns: str, mid: str) -> Any:
        async def render(p: Principal) -> Any:
            p.check(ns)
            form = await ui.form(request)
            path = f"/ns/{seg(ns)}/item/{seg(mid)}"
            try:
                f = _fields(form, new=False)
                before = await memory.get(mid, namespace=ns)
                if f["content"] == before.content and f["type"] == before.type.value:
                    return back(path, done="Nothing changed.")
                await memory.update(mid, f["content"], namespace=ns, type=f["type"], actor=f"ui:{p.name}")
            except MemrlError as e:
                return back(path, error=str(e))
            return back(path, done="Saved (the old version is in the history).")

        return await ui.guarded(request, render)

    @router.post("/ns/{ns}/item/{mid:path}/undo")
    async def undo(request: Request, ns: str, mid: str) -> Any:
        async def render(p: Principal) -> Any:
            p.check(ns)
            form = await ui.form(request)
            path = f"/ns/{seg(ns)}/item/{seg(mid)}"
            try:
                target = next_undo(await call_on(memory, (ns,), memory.store.history, ns, mid))
                if target is None:
                    return back(path, error="nothing to undo")
                if form.get("seq") and form["seq"] != str(target.seq):
                    return back(
                        path, error="the history changed since this page was shown: look again, then undo"
                    )
                if target.old is None and form.get("confirm") != "yes":
                    return _confirm(ui, request, p, path, target)
                done = await call_on(memory, (ns,), memory.store.undo, ns, mid, actor=f"ui:{p.name}")
            except MemrlError as e:
                return back(path, error=str(e))
            return back(path, done="Undid " + ", ".join(f"#{e.seq} {e.op}" for e in done))

        return await ui.guarded(request, render)

    def action(name: str) -> Any:
        async def run(request: Request, ns: str, mid: str) -> Any:
            async def render(p: Principal) -> Any:
                p.check(ns)
                await ui.form(request)
                path = f"/ns/{seg(ns)}/item/{seg(mid)}"
                try:
                    if name == "restore":
                        await memory.restore(mid, namespace=ns, actor=f"ui:{p.name}")
                        msg = "Restored."
                    else:
                        await memory.delete(mid, namespace=ns, actor=f"ui:{p.name}")
                        msg = "Deleted (restore or undo brings it back)."
                except MemrlError as e:
                    return back(path, error=str(e))
                return back(path, done=msg)

            return await ui.guarded(request, render)

        return run

    for name in ("restore", "delete"):
        router.add_api_route(f"/ns/{{ns}}/item/{{mid:path}}/{name}", action(name), methods=["POST"])


def _confirm(ui: Any, request: Request, p: Principal, path: str, target: HistoryEntry) -> HTMLResponse:
    hidden = {"seq": str(target.seq), "confirm": "yes", **ui.csrf_field(request)}
    body = f"""<p>The latest change of this memory is its creation (#{target.seq} {esc(target.op)}). Undoing it
removes the memory (it can be restored afterwards).</p>
<p>{post_button(path + "/undo", "Yes, undo and remove it", hidden=hidden, primary=True)}
<a href="{esc(path)}">Cancel</a></p>"""
    return ui.html("Undo removes this memory", body, request, p)
