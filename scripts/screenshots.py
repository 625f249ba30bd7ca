"""Screenshots of every page of the web memory browser, from a real server in real (headless) Chromium.

    PYTHONPATH=. python scripts/screenshots.py                # writes docs/images/*.png
    PYTHONPATH=. python scripts/screenshots.py --out /tmp/shots

It builds a small store in a temporary folder (the deterministic ``hashing`` embedder; a conversation
remembered by the ``raw`` agent, no model), an evaluation run (``memrl``'s QA evaluation on the bundled
sample with a scripted model that gets every other question wrong) and a training run folder; starts
``memrl serve memory``'s app on 127.0.0.1 with an admin token and ``--runs``; logs in through the login
form and opens each page as a visitor would, in Debian's ``chromium`` through Selenium (the browser tests'
driver: ``tests/server_helpers.py``), 1280x800. Each PNG is then reduced to 256 colours (Pillow), which
keeps text sharp at a fifth of the size. Needs the ``serve`` and ``dev`` extras and the packages
``chromium`` and ``chromium-driver``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOKEN = "screenshots-admin-1"
#: name -> what the page shows (the order they are taken in; docs/service.md shows them).
PAGES = ("login", "namespaces", "namespace", "search", "item", "jobs", "job", "runs", "eval-run", "train-run",
         "api")  # fmt: skip


def make_store(db: Path) -> str:
    """alice's memories (one edited, so its history has two entries) and bob's; returns the edited id."""
    from memrl.memory import HashingEmbedder, Memory

    with Memory(db, embedder=HashingEmbedder(128), namespace="alice") as m:
        turn = m.add("Alice: I moved to Lisbon last May!", type="episodic", id="D1:3")
        fact = m.add("Alice moved to Lisbon in May 2023", type="episodic", evidence=[turn.id], session="1")
        m.add("Alice is a nurse", type="semantic", evidence=["D1:5"])
        m.add("To reach Alice, call after 6 pm", type="procedural")
        m.update(fact.id, "Alice moved to Porto in June 2023")
        m.core_append("Name: Alice. Lives in Portugal.")
        m.add("Bob plays chess", namespace="bob")
    return fact.id


def make_runs(root: Path) -> None:
    """An evaluation run (half the answers right) and a training run folder in the trainer's format."""
    from memrl.data import load_dataset
    from memrl.eval.qa import QAEvaluation
    from memrl.eval.qa.config import QAEvalConfig
    from memrl.llm import ScriptedLLM
    from memrl.train.run_report import write_report

    gold = {q.question: q.answer for c in load_dataset("sample").records for q in c.questions}

    def half_right(messages, tools, schema):
        q = re.search(r"Question(?: \(asked on [^)]*\))?: (.*)\nAnswer:", messages[-1]["content"]).group(1)
        return str(gold[q]) if len(q) % 2 else "purple elephants"

    cfg = QAEvalConfig(dataset="sample", embedder="hashing", provider="scripted", output_dir=str(root / "eval-sample"),
                       cache=False)  # fmt: skip
    asyncio.run(QAEvaluation(cfg, llm=ScriptedLLM(half_right), progress=False).run())
    train = root / "train-read"
    train.mkdir()
    metrics = [{"step": s, "reward_mean": r, "groups_kept": 1, "samples": 4, "pg_loss": 0.1 / s, "approx_kl": 0.0,
                "grad_norm": 1.0, "seconds": 2.0} for s, r in ((1, 0.25), (2, 0.5), (3, 0.75))]  # fmt: skip
    (train / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in metrics))
    step = {"messages": [{"role": "user", "content": "Read this chunk and update your memory."}], "response": "",
            "tool_calls": [{"name": "search_memory", "arguments": {"query": "dog"}}],
            "tool_results": [{"content": "[D1:3] (episodic) Lena has a dog named Bruno"}], "role": "reader"}  # fmt: skip
    rollouts = [{"step": 3, "task": "sample/q1", "reward": 1.0, "failure": None, "final": "\\boxed{Bruno}",
                 "metrics": {"reward": 1.0}, "steps": [step]},
                {"step": 3, "task": "sample/q1", "reward": None, "failure": "provider: timeout", "final": ""}]  # fmt: skip
    (train / "rollouts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rollouts))
    write_report(train, metrics)


def shrink(png: Path) -> None:
    """256 colours, optimised (Pillow); left as it is without Pillow."""
    try:
        from PIL import Image
    except ImportError:
        return
    with Image.open(png) as im:
        small = im.convert("RGB").quantize(colors=256, method=Image.Quantize.FASTOCTREE)
    small.save(png, optimize=True)


def take(out: Path, tmp: Path) -> list[Path]:
    import httpx
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as EC
    from selenium.webdriver.support.ui import WebDriverWait

    from memrl.memory import AsyncMemory, HashingEmbedder
    from memrl.server.http import ServerThread, Tokens
    from memrl.server.memory_api import create_app
    from tests.server_helpers import chromium

    fact = make_store(tmp / "memory.db")
    make_runs(tmp / "runs")
    memory = AsyncMemory(tmp / "memory.db", embedder=HashingEmbedder(128))
    app = create_app(memory, Tokens.parse([f"admin={TOKEN}:*"]), runs=[str(tmp / "runs")])
    out.mkdir(parents=True, exist_ok=True)
    saved: list[Path] = []
    with ServerThread(app) as server, chromium(tmp / "profile") as driver:
        url = server.base_url
        messages = [{"role": "user", "name": "Alice", "content": "I adopted a cat named Tom last week."},
                    {"role": "assistant", "content": "Congratulations! How is Tom settling in?"},
                    {"role": "user", "name": "Alice", "content": "He sleeps on my guitar case all day."}]  # fmt: skip
        job = httpx.post(url + "/v1/namespaces/alice/remember?wait=true", json={"messages": messages, "agent": "raw"},
                         headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60).json()  # fmt: skip
        assert job["status"] == "succeeded", job
        metrics = {"width": 1280, "height": 800, "deviceScaleFactor": 1, "mobile": False}
        driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", metrics)  # the page itself 1280x800
        wait = WebDriverWait(driver, 30)

        def shot(name: str, css: str = "main") -> None:
            wait.until(EC.visibility_of_element_located((By.CSS_SELECTOR, css)))
            path = out / f"{name}.png"
            driver.save_screenshot(str(path))
            shrink(path)
            saved.append(path)

        driver.get(url + "/")  # a token is needed: the login form
        shot("login")
        driver.find_element(By.NAME, "token").send_keys(TOKEN)
        driver.find_element(By.XPATH, "//button[text()='Open']").click()
        wait.until(EC.presence_of_element_located((By.LINK_TEXT, "alice")))
        shot("namespaces")
        pages = {
            "namespace": "/ns/alice",
            "search": "/ns/alice/search?q=where+does+Alice+live",
            "item": f"/ns/alice/item/{fact}",
            "jobs": "/ns/alice/jobs",
            "job": f"/ns/alice/jobs/{job['id']}",
            "runs": "/runs",
        }
        for name, path in pages.items():
            driver.get(url + path)
            shot(name)
        links = [a.get_attribute("href") for a in driver.find_elements(By.CSS_SELECTOR, "main td a")]
        for name, kind in (("eval-run", "/runs/eval/"), ("train-run", "/runs/train/")):
            driver.get(next(h for h in links if kind in h))
            shot(name, "img.plot")
        driver.get(url + "/docs")
        shot("api", ".opblock-summary-path")
    asyncio.run(memory.close())
    return saved


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "docs" / "images"), help="folder for the PNGs")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))  # tests.server_helpers: the browser tests' Chromium setup
    with tempfile.TemporaryDirectory() as tmp:
        saved = take(Path(args.out), Path(tmp))
    for p in saved:
        print(f"{p} ({p.stat().st_size // 1024} KB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
