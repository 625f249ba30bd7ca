"""Browser attacks on a loopback memory server, run in Debian's headless Chromium from a second origin (an
attacker's page on another loopback port, or a foreign name resolved to 127.0.0.1), each shown refused:

- a cross-origin ``<form enctype="text/plain">`` POST to ``/import?overwrite=true`` (no-token mode): it
  would replace the namespace with an empty export;
- DNS rebinding: ``evil.example`` resolving to 127.0.0.1 reads the API and posts an import, same-origin;
- a page on another port submitting the browser's delete form while the visitor is logged in (the
  SameSite cookie is sent: ports do not make another site);
- framing the browser (clickjacking).

Every check reads the database itself afterwards. Needs ``chromium`` and ``chromium-driver``.
"""

from __future__ import annotations

import shutil
import sqlite3
import time

import pytest

pytest.importorskip("fastapi", reason="the browser tests need the 'serve' extra: pip install 'memrl[serve]'")
pytest.importorskip("selenium", reason="the browser tests need selenium: pip install 'memrl[dev]'")
if not (shutil.which("chromium") and shutil.which("chromedriver")):
    pytest.skip("no browser: install Debian's packages chromium and chromium-driver "
                "(apt-get install chromium chromium-driver)", allow_module_level=True)  # fmt: skip

from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.support import expected_conditions as EC  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402
from starlette.applications import Starlette  # noqa: E402
from starlette.responses import HTMLResponse  # noqa: E402
from starlette.routing import Route  # noqa: E402

from memrl.memory.embedders.providers import HashingEmbedder  # noqa: E402
from memrl.memory.facade.blocking import Memory  # noqa: E402
from memrl.server.http import ServerThread  # noqa: E402
from tests.server_helpers import ALICE, chromium, memory_server, snapshot  # noqa: E402

#: A text/plain form body is ``name=value``: this name and value make it a header-only memrl export.
_HEADER_NAME = '{"kind": "header", "format": "memrl-export", "version": 1, "namespace": "alice", "pad": "'
_HEADER_VALUE = '"}'


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    with chromium(
        tmp_path_factory.mktemp("chromium-attacks"), "--host-resolver-rules=MAP evil.example 127.0.0.1"
    ) as driver:  # DNS rebinding, no DNS server
        yield driver


class Attacker:
    """The attacker's site: pages served from another loopback port (another origin, the same site)."""

    def __init__(self) -> None:
        self.pages: dict[str, str] = {}

        async def serve(request):
            return HTMLResponse(self.pages.get(request.path_params["name"], "none"))

        self.server = ServerThread(Starlette(routes=[Route("/{name}", serve)])).start()

    def page(self, name: str, html: str) -> str:
        self.pages[name] = f"<!doctype html><html><body>{html}</body></html>"
        return f"{self.server.base_url}/{name}"


@pytest.fixture(scope="module")
def attacker():
    a = Attacker()
    yield a
    a.server.stop()


def _store(db) -> str:
    with Memory(db, embedder=HashingEmbedder(128), namespace="alice") as m:
        m.add("Alice moved to Lisbon in May 2023", type="episodic", id="m1")
        m.add("Alice is a nurse", id="m2")
    return "m1"


def _items(db) -> list[tuple]:
    con = sqlite3.connect(db)
    try:
        return con.execute(
            "SELECT id, deleted FROM memories WHERE namespace = 'alice' ORDER BY id"
        ).fetchall()
    finally:
        con.close()


def _settle(browser, victim: str) -> None:
    """Wait until the auto-submitted form has left the attacker's page for the victim and its answer (or
    where that redirected) has loaded."""
    WebDriverWait(browser, 15).until(lambda d: d.current_url.startswith(victim))
    WebDriverWait(browser, 15).until(lambda d: d.execute_script("return document.readyState") == "complete")
    time.sleep(0.3)  # the server has answered once the page is complete; the write (if any) is committed


def test_cross_origin_text_plain_import_is_refused(browser, attacker, tmp_path) -> None:
    db = tmp_path / "m.db"
    _store(db)
    with memory_server(db, tokens=[]) as (url, _):  # no-token mode: loopback only, but any page can post
        before = snapshot(db)
        form = (
            f'<form method="post" enctype="text/plain" action="{url}/v1/namespaces/alice/import?overwrite=true">'
            f"<input name='{_HEADER_NAME}' value='{_HEADER_VALUE}'></form>"
            "<script>document.forms[0].submit()</script>"
        )
        browser.get(attacker.page("import", form))
        _settle(browser, url)
        assert snapshot(db) == before  # alice's items and history are all still there
        assert _items(db) == [("m1", 0), ("m2", 0)]
        assert "alice" in browser.page_source or "refused" in browser.page_source


def test_dns_rebinding_is_refused(browser, tmp_path) -> None:
    db = tmp_path / "m.db"
    _store(db)
    with memory_server(db, tokens=[]) as (url, _):
        port = url.rsplit(":", 1)[1]
        before = snapshot(db)
        browser.get(f"http://evil.example:{port}/v1/namespaces/alice/memories")  # the rebound name
        assert "Lisbon" not in browser.page_source  # nothing read
        # same-origin for the browser now: a script on the rebound page posts an overwriting import
        status = browser.execute_async_script(
            "const done = arguments[arguments.length - 1];"
            "fetch('/v1/namespaces/alice/import?overwrite=true', {method: 'POST', body: arguments[0],"
            " headers: {'content-type': 'application/x-ndjson'}}).then(r => done(r.status), e => done(String(e)));",
            _HEADER_NAME + _HEADER_VALUE,
        )
        assert status == 421
        browser.get(f"http://evil.example:{port}/")
        assert "alice" not in browser.find_element(By.TAG_NAME, "body").text
        assert snapshot(db) == before


def test_cross_port_delete_form_is_refused_while_logged_in(browser, attacker, tmp_path) -> None:
    db = tmp_path / "m.db"
    mid = _store(db)
    with memory_server(db) as (url, _):  # tokens configured: the browser keeps a SameSite=Strict cookie
        browser.delete_all_cookies()
        browser.get(url + "/ns/alice")
        browser.find_element(By.NAME, "token").send_keys(ALICE, Keys.ENTER)
        WebDriverWait(browser, 10).until(
            EC.text_to_be_present_in_element((By.TAG_NAME, "main"), "Core memory")
        )
        form = (
            f'<form method="post" action="{url}/ns/alice/item/{mid}/delete"></form>'
            "<script>document.forms[0].submit()</script>"
        )
        browser.get(attacker.page("delete", form))  # 127.0.0.1, another port: the same site
        _settle(browser, url)
        assert _items(db) == [("m1", 0), ("m2", 0)]  # not deleted
        # the same form without the attacker: the real page's own button still works
        browser.get(f"{url}/ns/alice/item/{mid}")
        browser.find_element(By.XPATH, "//button[text()='Delete']").click()
        WebDriverWait(browser, 10).until(EC.text_to_be_present_in_element((By.TAG_NAME, "main"), "Deleted"))
        assert _items(db) == [("m1", 1), ("m2", 0)]


def test_the_browser_cannot_be_framed(browser, attacker, tmp_path) -> None:
    db = tmp_path / "m.db"
    _store(db)
    with memory_server(db, tokens=[]) as (url, _):
        browser.get(
            attacker.page("frame", f'<iframe src="{url}/ns/alice" width="800" height="600"></iframe>')
        )
        frame = WebDriverWait(browser, 10).until(EC.presence_of_element_located((By.TAG_NAME, "iframe")))
        time.sleep(1.0)
        browser.switch_to.frame(frame)
        try:
            shown = browser.find_element(By.TAG_NAME, "body").text
        finally:
            browser.switch_to.default_content()
        assert "Lisbon" not in shown and "Core memory" not in shown
