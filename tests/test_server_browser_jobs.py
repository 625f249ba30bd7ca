"""The job pages driven in headless Chromium as a person would: from a namespace to its jobs, a job's
events, the undo button (its form's CSRF token, posted by the browser) and the namespace reverted.

Needs the packages ``chromium`` and ``chromium-driver``, like :mod:`tests.test_server_browser`; skipped
without them.
"""

from __future__ import annotations

import shutil

import httpx
import pytest

pytest.importorskip("selenium", reason="the browser tests need selenium: pip install 'memrl[dev]'")
if not (shutil.which("chromium") and shutil.which("chromedriver")):
    pytest.skip("no browser: install Debian's packages chromium and chromium-driver "
                "(apt-get install chromium chromium-driver)", allow_module_level=True)  # fmt: skip

from selenium.common.exceptions import StaleElementReferenceException  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

from tests.server_helpers import chromium, memory_server  # noqa: E402

MESSAGES = [{"role": "user", "speaker": "Alice", "content": "I moved to Lisbon in May."},
            {"role": "assistant", "content": "Lisbon is lovely."}]  # fmt: skip


def wait_text(driver, text: str) -> None:
    """Wait until <main> shows ``text`` (a page being replaced reads as "not yet"; :mod:`tests.test_server_browser`
    has the same helper, but importing it loads torch)."""

    def shown(d) -> bool:
        try:
            return text in d.find_element(By.TAG_NAME, "main").text
        except StaleElementReferenceException:
            return False

    WebDriverWait(driver, 15).until(shown)


def test_a_job_page_and_its_undo_button_in_chromium(tmp_path) -> None:
    with memory_server(tmp_path / "m.db", tokens=[]) as (url, _), chromium(tmp_path / "profile") as browser:
        r = httpx.post(url + "/v1/namespaces/alice/remember?wait=true",
                       json={"messages": MESSAGES, "agent": "raw"}, timeout=30)  # fmt: skip
        job = r.json()
        assert job["status"] == "succeeded" and job["events"], job
        browser.get(url + "/ns/alice")
        browser.find_element(By.LINK_TEXT, "Jobs").click()
        wait_text(browser, "succeeded")
        browser.find_element(By.LINK_TEXT, job["id"]).click()
        wait_text(browser, "I moved to Lisbon in May.")
        assert len(browser.find_elements(By.CSS_SELECTOR, "table.events tbody tr")) == len(job["events"])
        browser.find_element(By.XPATH, "//button[text()='Undo this job']").click()
        wait_text(browser, "every write of this job is reverted")
        wait_text(browser, "undone already")
        assert httpx.get(url + "/v1/namespaces/alice/memories").json()["total"] == 0


def test_long_unbroken_words_wrap_instead_of_widening_the_page(tmp_path) -> None:
    """A 400-letter word in a memory and in a job's events: the page stays as wide as the window."""
    word = "Lisbon" + "x" * 400
    msgs = [{"role": "user", "speaker": "Alice", "content": f"I moved to {word} in May."}]
    with memory_server(tmp_path / "m.db", tokens=[]) as (url, _), chromium(tmp_path / "profile") as browser:
        job = httpx.post(url + "/v1/namespaces/alice/remember?wait=true", json={"messages": msgs, "agent": "raw"},
                         timeout=30).json()  # fmt: skip
        assert job["status"] == "succeeded", job
        for page in ("/ns/alice", f"/ns/alice/jobs/{job['id']}"):
            browser.get(url + page)
            wait_text(browser, "xxxxxxxx")
            wide = browser.execute_script("return document.documentElement.scrollWidth - window.innerWidth")
            assert wide <= 1, (page, wide)


def test_the_remember_form_in_chromium(tmp_path) -> None:
    """Type a conversation, keep the dry run ticked, send it: the job's page shows its input and events, and
    the namespace is still empty."""
    with memory_server(tmp_path / "m.db", tokens=[]) as (url, _), chromium(tmp_path / "profile") as browser:
        browser.get(url + "/ns/alice/jobs")
        browser.find_element(By.NAME, "conversation").send_keys("Alice: I moved to Lisbon last month")
        assert browser.find_element(By.NAME, "dry_run").is_selected()
        browser.find_element(By.XPATH, "//button[text()='Remember']").click()
        wait_text(browser, "the events below were not stored")
        assert browser.find_elements(By.CSS_SELECTOR, "table.input tbody tr")
        assert browser.find_elements(By.CSS_SELECTOR, "table.events tbody tr")
        assert httpx.get(url + "/v1/namespaces/alice/memories").json()["total"] == 0
