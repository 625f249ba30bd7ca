"""The API reference page (``/docs``, memrl/server/apidocs.py) in Debian's headless Chromium: Swagger UI
from the server's own files renders the operations of ``/openapi.json``, the browser's "API" link opens
it, and the console holds no Content-Security-Policy violation (nor any other error). Needs ``chromium``
and ``chromium-driver`` (``.ci/run`` installs them); the page's plain-HTTP checks need neither."""

from __future__ import annotations

import shutil

import pytest

pytest.importorskip("fastapi", reason="the server tests need the 'serve' extra: pip install 'memrl[serve]'")

import httpx  # noqa: E402

from memrl.server.apidocs import swagger_folder  # noqa: E402
from memrl.server.guard import OWN_FILES_CSP  # noqa: E402
from tests.server_helpers import chromium, memory_server  # noqa: E402

SEARCH = "/v1/namespaces/{namespace}/search"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with memory_server(tmp_path_factory.mktemp("docs") / "m.db", tokens=[]) as (url, _):
        yield url


def test_the_page_and_its_files_come_from_the_server_under_a_strict_policy(server) -> None:
    r = httpx.get(server + "/docs")
    assert r.status_code == 200 and r.headers["content-security-policy"] == OWN_FILES_CSP
    assert "<script>" not in r.text and "http" not in r.text.replace('href="/', "").split("<body>")[1]
    assert "script-src 'self';" in OWN_FILES_CSP and "unsafe-eval" not in OWN_FILES_CSP
    assert swagger_folder() is not None  # the serve extra installs fastapi-offline
    js = httpx.get(server + "/docs/assets/swagger-ui-bundle.js")
    assert js.status_code == 200 and js.headers["content-type"].startswith("text/javascript")
    assert len(js.content) > 100_000 and "SwaggerUIBundle" in js.text
    assert httpx.get(server + "/docs/assets/swagger-ui.css").headers["content-type"].startswith("text/css")
    assert "/openapi.json" in httpx.get(server + "/docs/assets/start.js").text
    assert httpx.get(server + "/docs/assets/..%2Fconsts.py").status_code == 404
    # every other page keeps the guard's policy: scripts by hash only
    assert "script-src 'sha256-" in httpx.get(server + "/").headers["content-security-policy"]


needs_browser = pytest.mark.skipif(
    not (shutil.which("chromium") and shutil.which("chromedriver")),
    reason="no browser: install Debian's packages chromium and chromium-driver",
)


@needs_browser
def test_swagger_ui_renders_the_operations_offline_with_no_csp_violation(server, tmp_path) -> None:
    pytest.importorskip("selenium", reason="the browser tests need selenium: pip install 'memrl[dev]'")
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as EC
    from selenium.webdriver.support.ui import WebDriverWait

    # --disable-background-networking and no network at all: any CDN the page asked for would fail
    with chromium(tmp_path / "chromium") as driver:
        driver.get(server + "/")
        driver.get_log("browser")  # the console from here on is the reference page's
        driver.find_element(By.LINK_TEXT, "API").click()  # the browser's API link opens the reference
        WebDriverWait(driver, 30).until(EC.url_to_be(server + "/docs"))
        path = WebDriverWait(driver, 60).until(
            EC.visibility_of_element_located(
                (By.CSS_SELECTOR, f'.opblock-summary-path[data-path="{SEARCH}"]')
            )
        )
        assert path.is_displayed() and SEARCH in path.text.replace("\u200b", "")
        title = driver.find_element(By.CSS_SELECTOR, ".info .title").text
        assert title.startswith("memrl memory API")
        # the bearer scheme is declared: an Authorize button asks for the token "Try it out" sends
        assert driver.find_element(By.CSS_SELECTOR, ".auth-wrapper .authorize").is_displayed()
        logs = driver.get_log("browser")
        csp = [e for e in logs if "Content Security Policy" in e["message"]]
        assert not csp, csp
        assert not [e for e in logs if e["level"] == "SEVERE"], logs
