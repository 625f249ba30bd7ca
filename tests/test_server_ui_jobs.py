"""The web browser's job pages over real HTTP, as a browser would use them: log in (CSRF), list a
namespace's jobs, open one (its events with before and after text), undo it with the form's CSRF token and
see the namespace reverted; another token sees no other namespace's jobs. The scripted LLM is the
boundary (a MemUpdate episode that moves Alice from Lisbon to Porto)."""

from __future__ import annotations

import re

import httpx

from memrl.agents.jobs import job_writer
from memrl.llm.scripted import ScriptedLLM
from memrl.memory.embedders.providers import HashingEmbedder
from memrl.memory.facade.memory import AsyncMemory
from memrl.server.http import ServerThread, Tokens
from memrl.server.memory_api import create_app
from tests.server_helpers import ALICE, BOB, ROOT, TOKENS
from tests.test_history_as_of import move_to_porto


def _csrf(html: str) -> str:
    return re.search(r'name="csrf" value="([0-9a-f]+)"', html).group(1)


def _login(url: str, token: str) -> httpx.Client:
    c = httpx.Client(base_url=url, follow_redirects=False, timeout=30)
    r = c.post("/login", data={"token": token, "next": "/", "csrf": _csrf(c.get("/login").text)})
    assert r.status_code == 303 and c.cookies.get("memrl_token") == token
    return c


def test_jobs_pages_events_and_undo_over_http(tmp_path) -> None:
    holder = {}
    memory = AsyncMemory(tmp_path / "m.db", embedder=HashingEmbedder(64),
                         writer=job_writer(ScriptedLLM(lambda *a: holder["rule"](*a))))  # fmt: skip
    with ServerThread(create_app(memory, Tokens.parse(TOKENS))) as server:
        api = httpx.Client(base_url=server.base_url, headers={"Authorization": f"Bearer {ALICE}"}, timeout=30)
        mid = api.post("/v1/namespaces/alice/memories", json={"content": "Alice lives in Lisbon"}).json()[
            "id"
        ]
        holder["rule"] = move_to_porto(mid)
        job = api.post("/v1/namespaces/alice/maintain?wait=true", json={"max_tool_calls": 5}).json()
        assert job["status"] == "succeeded", job

        c = _login(server.base_url, ALICE)
        assert 'href="/ns/alice/jobs"' in c.get("/ns/alice").text
        listing = c.get("/ns/alice/jobs")
        assert listing.status_code == 200 and f'href="/ns/alice/jobs/{job["id"]}"' in listing.text
        assert "maintain" in listing.text and "succeeded" in listing.text
        page = c.get(f"/ns/alice/jobs/{job['id']}").text
        assert "<del>Alice lives in Lisbon</del>" in page and "<ins>Alice lives in Porto</ins>" in page
        assert f'action="/ns/alice/jobs/{job["id"]}/undo"' in page

        undo = f"/ns/alice/jobs/{job['id']}/undo"
        assert c.post(undo, data={}).status_code == 403  # no CSRF token: nothing undone
        assert api.get(f"/v1/namespaces/alice/memories/{mid}").json()["content"] == "Alice lives in Porto"
        r = c.post(undo, data={"csrf": _csrf(page)})
        assert r.status_code == 303
        assert "every write of this job is reverted" in c.get(r.headers["location"]).text
        assert api.get(f"/v1/namespaces/alice/memories/{mid}").json()["content"] == "Alice lives in Lisbon"
        assert api.get(f"/v1/jobs/{job['id']}").json()["undone"] is True
        again = c.get(f"/ns/alice/jobs/{job['id']}").text
        assert "undone already" in again and f'action="{undo}"' not in again
        r = c.post(undo, data={"csrf": _csrf(again)})  # a second undo (a stale page) is refused, not applied
        assert "nothing to undo" in c.get(r.headers["location"]).text

        bob = _login(server.base_url, BOB)
        assert bob.get(f"/ns/alice/jobs/{job['id']}").status_code == 403
        assert bob.get("/ns/alice/jobs").status_code == 403
        assert bob.get(f"/ns/bob/jobs/{job['id']}").status_code == 404  # another namespace's job: no job
        r = bob.post(f"/ns/bob/jobs/{job['id']}/undo", data={"csrf": _csrf(bob.get("/ns/bob").text)})
        assert r.status_code == 303 and "no job" in bob.get(r.headers["location"]).text
        assert "No jobs yet" in bob.get("/ns/bob/jobs").text


def test_a_job_page_shows_the_conversation_it_was_sent(tmp_path) -> None:
    memory = AsyncMemory(tmp_path / "m.db", embedder=HashingEmbedder(64), writer=job_writer())
    with ServerThread(create_app(memory, Tokens.parse(TOKENS))) as server:
        api = httpx.Client(base_url=server.base_url, headers={"Authorization": f"Bearer {ALICE}"}, timeout=30)
        msgs = [{"role": "user", "name": "Alice", "content": "I moved to <Lisbon>"},
                {"role": "assistant", "content": [{"type": "text", "text": "Lovely."}]}]  # fmt: skip
        job = api.post(
            "/v1/namespaces/alice/remember?wait=true", json={"messages": msgs, "dry_run": True}
        ).json()
        assert job["status"] == "succeeded", job
        page = _login(server.base_url, ALICE).get(f"/ns/alice/jobs/{job['id']}").text
        inputs = page.split('<table class="input">', 1)[1].split("</table>", 1)[0]
        assert "<td>Alice</td><td>I moved to &lt;Lisbon&gt;</td>" in inputs  # escaped, speaker from name
        assert "<td>assistant</td><td>Lovely.</td>" in inputs


def test_runs_is_linked_only_for_a_token_that_may_open_it(tmp_path) -> None:
    memory = AsyncMemory(tmp_path / "m.db", embedder=HashingEmbedder(64))
    with ServerThread(create_app(memory, Tokens.parse(TOKENS))) as server:
        scoped = _login(server.base_url, ALICE)
        assert 'href="/runs"' not in scoped.get("/").text and scoped.get("/runs").status_code == 403
        admin = _login(server.base_url, ROOT)
        assert 'href="/runs"' in admin.get("/").text


def test_the_remember_form_with_a_dry_run_then_for_real(tmp_path) -> None:
    memory = AsyncMemory(tmp_path / "m.db", embedder=HashingEmbedder(64), writer=job_writer())
    with ServerThread(create_app(memory, Tokens.parse(TOKENS))) as server:
        c = _login(server.base_url, ALICE)
        page = c.get("/ns/alice/jobs").text
        assert 'action="/ns/alice/jobs/remember"' in page and 'name="dry_run"' in page
        form = {
            "csrf": _csrf(page),
            "conversation": "Alice: I moved to Lisbon last month\nLovely!",
            "dry_run": "1",
        }
        assert c.post("/ns/alice/jobs/remember", data={**form, "csrf": ""}).status_code == 403  # no CSRF
        r = c.post("/ns/alice/jobs/remember", data=form)
        assert r.status_code == 303 and "/ns/alice/jobs/" in r.headers["location"]
        shown = c.get(r.headers["location"]).text
        assert "the events below were not stored" in shown and "I moved to Lisbon last month" in shown
        api = httpx.Client(base_url=server.base_url, headers={"Authorization": f"Bearer {ALICE}"}, timeout=30)
        assert api.get("/v1/namespaces/alice/memories").json()["total"] == 0
        r = c.post("/ns/alice/jobs/remember", data={k: v for k, v in form.items() if k != "dry_run"})
        assert "Remembered." in c.get(r.headers["location"]).text
        job = api.get("/v1/namespaces/alice/jobs").json()[0]
        assert api.get("/v1/namespaces/alice/memories").json()["total"] == len(job["events"]) > 0
        assert [m.get("speaker") for m in job["request"]["messages"]] == ["Alice", None]
