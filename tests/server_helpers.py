"""Helpers for the server tests: a memory API on a real SQLite file behind uvicorn on 127.0.0.1:0."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("fastapi", reason="the server tests need the 'serve' extra: pip install 'memrl[serve]'")

import httpx  # noqa: E402

from memrl.memory.embedders.providers import HashingEmbedder  # noqa: E402
from memrl.memory.facade.memory import AsyncMemory  # noqa: E402
from memrl.server.http import Limits, ServerThread, Tokens  # noqa: E402
from memrl.server.memory_api import create_app  # noqa: E402
from memrl.server.observe import ObserveConfig  # noqa: E402

ALICE, BOB, ROOT = "alice-secret-1", "bob-secret-22", "root-secret-333"
TOKENS = [f"alice={ALICE}:alice,alice-copy", f"bob={BOB}:bob", f"root={ROOT}:*"]


@contextlib.contextmanager
def memory_server(db: Path, *, tokens: list[str] | None = None, limits: Limits | None = None,
                  runs: list[str] | None = None) -> Iterator[tuple[str, AsyncMemory]]:  # fmt: skip
    memory = AsyncMemory(db, embedder=HashingEmbedder(128))
    # no access log: its lines would land among pytest's progress dots where a test lifts capture (the
    # load tests print their rates); tests/test_observability.py checks the log on servers of its own
    app = create_app(memory, Tokens.parse(TOKENS if tokens is None else tokens), limits, runs=runs,
                     observe=ObserveConfig(access_log=False))  # fmt: skip
    with ServerThread(app) as server:
        yield server.base_url, memory


def client(base_url: str, token: str | None) -> httpx.Client:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.Client(base_url=base_url, headers=headers, timeout=30)


#: The tables a refused request must leave as they were (the embedding cache included: a refused write
#: must not leave a cached vector behind either).
SNAPSHOT_TABLES = ("namespaces", "memories", "history", "core", "memory_keys", "embeddings")


def snapshot(db: Path) -> list[tuple]:
    """Every row of the store's tables: to prove a refused request changed nothing."""
    import sqlite3

    if str(db).startswith("postgresql://"):
        import psycopg

        with psycopg.connect(str(db)) as pg:
            return [
                (t, *row)
                for t in SNAPSHOT_TABLES
                for row in pg.execute(f"SELECT * FROM {t} ORDER BY 1, 2, 3")
            ]
    con = sqlite3.connect(db)
    try:
        return [
            (t, *row) for t in SNAPSHOT_TABLES for row in con.execute(f"SELECT * FROM {t} ORDER BY 1, 2, 3")
        ]
    finally:
        con.close()


@contextlib.contextmanager
def chromium(profile: Path, *flags: str) -> Iterator[object]:
    """Debian's headless Chromium driven by Selenium (the caller skips when it is missing), with the flags a
    machine without network needs, a fresh profile, and ``flags`` added."""
    import shutil

    from selenium import webdriver

    opts = webdriver.ChromeOptions()
    opts.binary_location = shutil.which("chromium")
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage", "--window-size=1280,900", f"--user-data-dir={profile}", *flags):  # fmt: skip
        opts.add_argument(flag)
    opts.set_capability(
        "goog:loggingPrefs", {"browser": "ALL"}
    )  # the console: CSP violations are logged there
    driver = webdriver.Chrome(options=opts, service=webdriver.ChromeService(shutil.which("chromedriver")))
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()
