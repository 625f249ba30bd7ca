"""The web memory browser driven as a person would, in Debian's headless Chromium (Selenium + chromedriver)
on loopback: open a store, search, open an item's history, undo an edit and see it reverted in the
database, open an evaluation run and filter wrong answers, open a training run, log in with a token.

Needs the packages ``chromium`` and ``chromium-driver`` (``.ci/run`` installs them). With
``MEMRL_SCREENSHOTS=DIR`` the main pages are saved as PNGs there (the docs' screenshots come from
``scripts/screenshots.py``).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

pytest.importorskip("fastapi", reason="the browser tests need the 'serve' extra: pip install 'memrl[serve]'")
pytest.importorskip("selenium", reason="the browser tests need selenium: pip install 'memrl[dev]'")
if not (shutil.which("chromium") and shutil.which("chromedriver")):
    pytest.skip("no browser: install Debian's packages chromium and chromium-driver "
                "(apt-get install chromium chromium-driver)", allow_module_level=True)  # fmt: skip

from selenium.common.exceptions import StaleElementReferenceException, WebDriverException  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.support import expected_conditions as EC  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

from memrl.eval.qa import QAEvaluation  # noqa: E402
from memrl.llm import ScriptedLLM  # noqa: E402
from memrl.memory.embedders.providers import HashingEmbedder  # noqa: E402
from memrl.memory.facade.blocking import Memory  # noqa: E402
from memrl.server.ui.run_files import is_wrong, load_train  # noqa: E402
from memrl.train.run_report import write_report as _report  # noqa: E402
from tests.server_helpers import ROOT, chromium, memory_server  # noqa: E402
from tests.test_qa_eval import config, oracle, question_of  # noqa: E402
from tests.tiny_lm import make_tiny_lm  # noqa: E402

SHOTS = os.environ.get("MEMRL_SCREENSHOTS")


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    with chromium(tmp_path_factory.mktemp("chromium")) as driver:
        yield driver


def shot(driver, name: str) -> None:
    if SHOTS:
        Path(SHOTS).mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(Path(SHOTS) / f"{name}.png"))


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    """A real evaluation run (memrl's QA evaluation, a scripted model that gets every other question wrong)
    and a training run folder in the loop's format, with its own report and plot."""
    import asyncio

    root = tmp_path_factory.mktemp("runs")

    def half_right(messages, tools, schema):
        return oracle(messages, tools, schema) if len(question_of(messages)) % 2 else "purple elephants"

    asyncio.run(QAEvaluation(config(root), llm=ScriptedLLM(half_right), progress=False).run())
    train = root / "train-memagent"
    train.mkdir()
    metrics = [{"step": s, "reward_mean": r, "groups_kept": 1, "samples": 4, "pg_loss": 0.1 / s, "approx_kl": 0.0,
                "grad_norm": 1.0, "seconds": 2.0} for s, r in ((1, 0.25), (2, 0.5), (3, 0.75))]  # fmt: skip
    (train / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in metrics))
    step = {"messages": [{"role": "user", "content": "Read this chunk and update your memory."}],
            "response": "", "tool_calls": [{"name": "search_memory", "arguments": {"query": "dog"}}],
            "tool_results": [{"content": "[D1:3] (episodic) Lena has a dog named Bruno"}], "role": "reader"}  # fmt: skip
    rollouts = [{"step": 3, "task": "sample/q1", "reward": 1.0, "failure": None, "final": "\\boxed{Bruno}",
                 "metrics": {"reward": 1.0}, "steps": [step]},
                {"step": 3, "task": "sample/q1", "reward": None, "failure": "provider: timeout", "final": ""}]  # fmt: skip
    (train / "rollouts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rollouts))
    _report(train, metrics)
    # and a real training run: `memrl train grpo --task read` on the tiny model (one step, a group of 2)
    from memrl.cli.main import main

    tiny = make_tiny_lm(tmp_path_factory.mktemp("tiny") / "lm")
    assert main(["train", "grpo", "--task", "read", "--dataset", "sample", "--model", str(tiny), "--group-size", "2",
                 "--steps", "1", "--embedder", "hashing", "--no-dynamic-sampling", "--no-tensorboard", "--json",
                 "--agent-option", "chunk_tokens=600", "--agent-option", "memory_tokens=16",
                 "--agent-option", "answer_tokens=16", "--output-dir", str(root / "train-read")]) == 0  # fmt: skip
    return root


@pytest.fixture(scope="module")
def site(tmp_path_factory, runs):
    db = tmp_path_factory.mktemp("store") / "memory.db"
    with Memory(db, embedder=HashingEmbedder(128), namespace="alice") as m:
        turn = m.add("Alice: I moved to Lisbon last May!", type="episodic", id="D1:3")
        fact = m.add("Alice moved to Lisbon in May 2023", type="episodic", evidence=[turn.id], session="1")
        m.add("Alice is a nurse", type="semantic", evidence=["D1:5"])
        m.add("To reach Alice, call after 6 pm", type="procedural")
        m.update(fact.id, "Alice moved to Porto in June 2023")
        m.core_append("Name: Alice. Lives in Portugal.")
        m.add("Bob plays chess", namespace="bob")
    with memory_server(db, tokens=[], runs=[str(runs)]) as (url, memory):
        yield url, db, fact.id


def wait_text(driver, text: str) -> None:
    """Wait until the page's <main> shows ``text``. A page that is being replaced (a form posted, a
    redirect followed) can drop the element between finding and reading it: Chromium then answers "node
    does not belong to the document", which only means "not yet"; any other error is raised."""

    def shown(d) -> bool:
        try:
            return text in d.find_element(By.TAG_NAME, "main").text
        except WebDriverException as e:  # StaleElementReferenceException is one
            if isinstance(e, StaleElementReferenceException) or "does not belong to the document" in str(e):
                return False
            raise

    WebDriverWait(driver, 10).until(shown)


def sign_in(driver, token: str) -> None:
    """Type ``token`` into the login form once the form is there: after a click that navigates (the log-out
    button posts, then redirects) the old page can still be the document for a moment, so finding the box
    at once can fail (it did on CI: NoSuchElementException right after "log out")."""
    box = WebDriverWait(driver, 10, ignored_exceptions=(StaleElementReferenceException,)).until(
        EC.presence_of_element_located((By.NAME, "token"))
    )
    box.send_keys(token, Keys.ENTER)


def test_browse_search_history_and_undo(browser, site) -> None:
    url, db, fact_id = site
    browser.get(url + "/")
    # Read the first page inside a wait: chromedriver can answer a read of a fresh browser's first document
    # with "node does not belong to the document" while that document is still being committed (seen once).
    names = WebDriverWait(browser, 10, ignored_exceptions=(WebDriverException,)).until(
        lambda d: [a.text for a in d.find_elements(By.CSS_SELECTOR, "main td a")] or None
    )
    assert names == ["alice", "bob"]
    shot(browser, "namespaces")
    browser.find_element(By.LINK_TEXT, "alice").click()
    wait_text(browser, "Core memory")
    assert "Lives in Portugal" in browser.find_element(By.TAG_NAME, "pre").text
    browser.find_element(By.PARTIAL_LINK_TEXT, "semantic (1)").click()
    rows = browser.find_elements(By.CSS_SELECTOR, "main tbody tr")
    assert len(rows) == 1 and "nurse" in rows[0].text
    browser.find_element(By.PARTIAL_LINK_TEXT, "all (4)").click()
    shot(browser, "namespace")

    browser.find_element(By.LINK_TEXT, "Search this namespace").click()
    box = browser.find_element(By.CSS_SELECTOR, "input[type=search]")
    box.send_keys("Alice moved Porto", Keys.ENTER)  # the keyboard alone
    WebDriverWait(browser, 10).until(EC.presence_of_element_located((By.CSS_SELECTOR, "table.hits tbody tr")))
    first = browser.find_elements(By.CSS_SELECTOR, "table.hits tbody tr")[0].find_elements(By.TAG_NAME, "td")
    assert first[7].text.startswith(fact_id) and "Porto" in first[7].text
    assert (
        float(first[1].text) > 0 and float(first[2].text) > 0 and first[5].text == "1"
    )  # fused, dense, bm25 rank
    shot(browser, "search")

    first[7].find_element(By.TAG_NAME, "a").click()
    wait_text(browser, "History")
    timeline = browser.find_elements(By.CSS_SELECTOR, ".timeline li")
    assert [li.text.split()[0] for li in timeline] == ["UPDATE", "ADD"]
    assert "D1:3: Alice: I moved to Lisbon last May!" in browser.find_element(By.TAG_NAME, "main").text
    shot(browser, "item")
    undo = browser.find_element(By.XPATH, "//button[text()='Undo the latest edit']")
    undo.send_keys(Keys.ENTER)  # a focused button, pressed from the keyboard
    wait_text(browser, "Undid")
    assert browser.find_element(By.ID, "content").text == "Alice moved to Lisbon in May 2023"
    assert browser.find_elements(By.CSS_SELECTOR, ".timeline li")[0].text.startswith("UNDO")
    with Memory(db, embedder=HashingEmbedder(128)) as m:  # reverted in the database itself
        assert m.get(fact_id, namespace="alice").content == "Alice moved to Lisbon in May 2023"

    browser.find_element(By.XPATH, "//button[text()='Delete']").click()
    wait_text(browser, "search never returns it")
    browser.find_element(By.XPATH, "//button[text()='Restore']").click()
    wait_text(browser, "Restored")


def test_evaluation_run_filter_wrong_answers(browser, site, runs) -> None:
    url, _, _ = site
    rows = [json.loads(x) for x in (runs / "run" / "predictions.jsonl").read_text().splitlines()]
    wrong = [r for r in rows if is_wrong(r)]
    assert 0 < len(wrong) < len(rows)
    browser.get(url + "/runs")
    browser.find_element(By.PARTIAL_LINK_TEXT, "/run").click()
    wait_text(browser, f"Questions ({len(rows)} of {len(rows)})")
    assert browser.find_element(By.CSS_SELECTOR, "img.plot").get_attribute("naturalWidth") != "0"
    assert browser.find_elements(By.CSS_SELECTOR, "main table")[0].text  # the report's tables
    shot(browser, "eval-run")
    browser.find_element(By.NAME, "wrong").click()
    browser.find_element(By.XPATH, "//button[text()='Filter']").click()
    wait_text(browser, f"Questions ({len(wrong)} of {len(rows)})")
    shown = browser.find_elements(By.CSS_SELECTOR, "table.questions tbody tr")
    assert len(shown) == len(wrong) and all("wrong" in tr.text for tr in shown)
    browser.execute_script(
        "document.querySelector('details').open = false; [...document.querySelectorAll('main > h2')].pop().scrollIntoView()"
    )
    shot(browser, "eval-wrong")
    assert all("purple elephants" in tr.text for tr in shown)
    details = shown[0].find_element(By.TAG_NAME, "summary")
    details.click()  # the retrieved memories, from the run's own store
    assert shown[0].find_elements(By.CSS_SELECTOR, "details li")
    category = wrong[0]["category"]
    browser.get(url + f"/runs/eval/{runs.name}/run?category={category}&wrong=true")
    n = sum(1 for r in wrong if r["category"] == category)
    assert len(browser.find_elements(By.CSS_SELECTOR, "table.questions tbody tr")) == n


def test_training_run(browser, site, runs) -> None:
    url, _, _ = site
    browser.get(url + "/runs")
    browser.find_element(By.PARTIAL_LINK_TEXT, "train-memagent").click()
    wait_text(browser, "Rollouts of step 3")
    text = browser.find_element(By.TAG_NAME, "main").text
    assert "failed: provider: timeout" in text and "reward 1.000" in text
    browser.find_element(By.CSS_SELECTOR, ".rollout summary").click()
    assert "search_memory" in browser.find_element(By.CSS_SELECTOR, ".rollout details").text
    assert len(browser.find_elements(By.CSS_SELECTOR, "main table tbody tr")) == 3
    shot(browser, "train-run")


def test_a_real_training_runs_trajectories(browser, site, runs) -> None:
    """The page of a real `memrl train` run shows each rollout's LLM calls: prompt messages and replies."""
    url, _, _ = site
    run = load_train(runs / "train-read")
    shown = run.rollouts_of(1)
    assert len(shown) == 2 and all(
        len(r["steps"]) > 1 for r in shown
    )  # a group of 2; MemAgent reads in chunks
    browser.get(url + "/runs")
    browser.find_element(By.PARTIAL_LINK_TEXT, "train-read").click()
    wait_text(browser, "Rollouts of step 1")
    cards = browser.find_elements(By.CSS_SELECTOR, ".rollout")
    assert len(cards) == 2
    for card, rollout in zip(cards, shown, strict=True):
        calls = card.find_elements(By.CSS_SELECTOR, "details")
        assert len(calls) == len(rollout["steps"])
        calls[-1].find_element(By.TAG_NAME, "summary").click()
        prompt = " ".join(rollout["steps"][-1]["messages"][-1]["content"].split())
        assert prompt[:60] in " ".join(calls[-1].text.split())
    shot(browser, "train-run-real")


def test_tokens_in_the_browser(browser, tmp_path) -> None:
    db = tmp_path / "m.db"
    with Memory(db, embedder=HashingEmbedder(128)) as m:
        m.add("Alice fact", namespace="alice")
        m.add("Bob fact", namespace="bob")
    with memory_server(db) as (url, _):
        browser.delete_all_cookies()
        browser.get(url + "/ns/bob")
        assert "/login" in browser.current_url
        sign_in(browser, "wrong-token")
        wait_text(browser, "invalid bearer token")
        sign_in(browser, "alice-secret-1")
        wait_text(browser, "may not access namespace 'bob'")
        browser.get(url + "/")
        assert [a.text for a in browser.find_elements(By.CSS_SELECTOR, "main td a")] == ["alice"]
        assert not browser.find_elements(By.LINK_TEXT, "Runs")  # a scoped token is not shown the Runs link
        browser.get(url + "/runs")
        wait_text(browser, "only to a token for every namespace")
        # logging out is a POST carrying the CSRF token: the header's button
        browser.find_element(By.XPATH, "//header//button[text()='log out']").click()
        sign_in(browser, ROOT)
        wait_text(browser, "Namespaces")
        assert [a.text for a in browser.find_elements(By.CSS_SELECTOR, "main td a")] == ["alice", "bob"]
        assert browser.find_element(By.LINK_TEXT, "Runs").is_displayed()  # the admin's header has it


def test_add_edit_forms_confirmed_undo_and_small_bm25_scores(browser, tmp_path) -> None:
    """Add a memory and edit it with the page's forms; undo the edit, then undo again: reverting the creation
    asks first (it used to delete without asking); BM25 scores below 0.001 still show (not 0.000)."""
    db = tmp_path / "m.db"
    with Memory(db, embedder=HashingEmbedder(128), namespace="alice") as m:
        for i in range(3):  # "Lisbon" in 4 of 5 items: its idf is floored, the BM25 score tiny
            m.add(f"Alice went to Lisbon, trip {i}")
        m.add("Alice likes tea")
    with memory_server(db, tokens=[]) as (url, _):
        browser.get(url + "/ns/alice")
        browser.find_element(By.TAG_NAME, "summary").click()  # "Add a memory"
        browser.find_element(By.NAME, "content").send_keys("Alice flew to Lisbon in June")
        browser.find_element(By.XPATH, "//button[text()='Add']").click()
        wait_text(browser, "Added.")
        assert browser.find_element(By.ID, "content").text == "Alice flew to Lisbon in June"
        item_url = browser.current_url.split("?")[0]
        browser.find_element(By.XPATH, "//summary[text()='Edit this memory']").click()
        box = browser.find_element(By.NAME, "content")
        box.clear()
        box.send_keys("Alice flew to Lisbon in July")
        browser.find_element(By.XPATH, "//button[text()='Save']").click()
        wait_text(browser, "Saved")
        assert browser.find_element(By.ID, "content").text == "Alice flew to Lisbon in July"
        browser.find_element(By.XPATH, "//button[text()='Undo the latest edit']").click()
        wait_text(browser, "Undid")
        assert browser.find_element(By.ID, "content").text == "Alice flew to Lisbon in June"
        undo = browser.find_element(By.XPATH, "//button[text()='Undo its creation']")
        assert "primary" not in (
            undo.get_attribute("class") or ""
        )  # not the main button: it removes the memory
        undo.click()
        wait_text(browser, "removes the memory")  # asks first: the item is still there
        with Memory(db, embedder=HashingEmbedder(128)) as m:
            assert [i.content for i in m.list(namespace="alice")][-1] == "Alice flew to Lisbon in June"
        browser.find_element(By.XPATH, "//button[text()='Yes, undo and remove it']").click()
        wait_text(browser, "search never returns it")
        assert browser.current_url.startswith(item_url)

        browser.get(url + "/ns/alice/search?q=Lisbon&mode=bm25")
        cells = [
            r.find_elements(By.TAG_NAME, "td")[4].text
            for r in browser.find_elements(By.CSS_SELECTOR, "table.hits tbody tr")
        ]
        assert cells and all(float(c) > 0 for c in cells), cells  # 1e-06-ish, shown, not "0.000"
