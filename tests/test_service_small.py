"""The smaller items of issue 33, each against a real server: the start banner hides a Postgres password
(from ``--db`` and from ``$MEMRL_DB``); ``GET /logout`` logs nobody out (a POST with the CSRF token does);
no page shows text a link carries (``?error=``); the Host check looks at the port; another application's
``schema_migrations`` table is refused at once, in words; the documented curl commands work as written;
the reward server answers an unknown category with a JSON 422."""

from __future__ import annotations

import asyncio
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.server_helpers import ALICE, client, memory_server

pytest.importorskip("fastapi", reason="the server tests need the 'serve' extra: pip install 'memrl[serve]'")

import httpx  # noqa: E402

from memrl.errors import StoreError  # noqa: E402
from memrl.memory.embedders.providers import HashingEmbedder  # noqa: E402
from memrl.memory.facade.memory import AsyncMemory  # noqa: E402
from memrl.server.guard import Policy  # noqa: E402
from memrl.server.http import ServerThread, Tokens  # noqa: E402
from memrl.server.memory_api import create_app  # noqa: E402
from memrl.server.reward_api import create_reward_app  # noqa: E402

ROOT_DIR = Path(__file__).resolve().parents[1]


def _banner(args: list[str], env: dict[str, str]) -> str:
    """The first line ``memrl serve ...`` prints, the server then stopped."""
    cmd = [sys.executable, "-c", "import sys; from memrl.cli.main import main; sys.exit(main())", *args]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, **env}, cwd=ROOT_DIR)  # fmt: skip
    try:
        deadline, out = time.monotonic() + 60, ""
        while time.monotonic() < deadline and "serving" not in out:
            line = proc.stdout.readline()
            if not line:
                break
            out += line
        return out
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("via", ["--db", "MEMRL_DB"])
def test_the_start_banner_hides_the_postgres_password(pg_server, via) -> None:
    url = pg_server.create_database(f"banner_{via.strip('-').lower()}")
    secret_url = url.replace("postgres@", "postgres:hunter2-secret@", 1) + "?application_name=memrl"
    assert "hunter2-secret" in secret_url
    args = ["serve", "memory", "--port", "0", "--embedder", "hashing", "--no-ui"]
    env = {"PYTHONPATH": str(ROOT_DIR), "MEMRL_TOKENS": ""}
    if via == "--db":
        args += ["--db", secret_url]
    else:
        env["MEMRL_DB"] = secret_url
    out = _banner(args, env)
    assert "serving the memory API for postgresql://postgres:***@" in out, out
    assert "hunter2" not in out, out


def _csrf(html: str) -> str:
    return re.search(r'name="csrf" value="([0-9a-f]+)"', html).group(1)


def test_logout_is_a_post_with_the_csrf_token(tmp_path) -> None:
    """``GET /logout`` logged the visitor out from any page (an <img src> on another site would do)."""
    with memory_server(tmp_path / "m.db") as (url, _):
        c = httpx.Client(base_url=url, follow_redirects=False, timeout=30)
        r = c.post("/login", data={"token": ALICE, "next": "/", "csrf": _csrf(c.get("/login").text)})
        assert r.status_code == 303 and c.cookies.get("memrl_token") == ALICE
        r = c.get("/logout")
        assert (
            r.status_code == 200 and "set-cookie" not in r.headers and c.cookies.get("memrl_token") == ALICE
        )
        assert c.post("/logout", data={}).status_code == 403
        assert c.post("/logout", data={"csrf": "0" * 64}).status_code == 403
        assert c.get("/").status_code == 200  # still logged in
        home = c.get("/").text
        assert 'action="/logout"' in home and 'href="/logout"' not in home
        r = c.post("/logout", data={"csrf": _csrf(home)})
        assert r.status_code == 303 and r.headers["location"] == "/login"
        assert 'memrl_token=""' in r.headers["set-cookie"]


def test_no_page_shows_text_a_link_carries(tmp_path) -> None:
    """The login page reflected ``?error=`` text ("call this number"); every page did with ?done/?error."""
    lure = "Your token expired: call 555-0100"
    with memory_server(tmp_path / "m.db", tokens=[]) as (url, _):
        c = httpx.Client(base_url=url, follow_redirects=False, timeout=30)
        for path in ("/login", "/", "/ns/alice"):
            page = c.get(path, params={"error": lure, "done": lure, "note": "0" * 32}).text
            assert "555-0100" not in page, path
        # the server's own notes still show: a failed edit, a successful add
        r = c.post("/ns/alice/add", data={"content": " ", "csrf": _csrf(c.get("/ns/alice").text)})
        assert r.status_code == 303 and "content is empty" in c.get(r.headers["location"]).text
    with memory_server(tmp_path / "t.db") as (url, _):
        c = httpx.Client(base_url=url, follow_redirects=True, timeout=30)
        r = c.post("/login", data={"token": "wrong-token", "next": "/", "csrf": _csrf(c.get("/login").text)})
        assert "invalid bearer token" in r.text and "error=invalid" in str(r.url)


def test_the_host_check_looks_at_the_port(tmp_path) -> None:
    """A Host naming another port (the request was forwarded from elsewhere) passed."""
    memory = AsyncMemory(tmp_path / "m.db", embedder=HashingEmbedder(64))
    policy = Policy.for_server("127.0.0.1", ["https://mem.example"])
    with ServerThread(create_app(memory, Tokens(), policy=policy)) as server:
        port = int(server.base_url.rsplit(":", 1)[1])
        c = httpx.Client(base_url=server.base_url, timeout=30)
        for host, status in [(f"127.0.0.1:{port}", 200), (f"localhost:{port}", 200), (f"127.0.0.1:{port + 1}", 421),
                             ("localhost:1", 421), ("localhost", 421), ("mem.example", 200), ("mem.example:443", 200),
                             ("mem.example:8443", 421), (f"mem.example:{port}", 200), ("evil.example", 421)]:  # fmt: skip
            r = c.get("/health", headers={"host": host})
            assert r.status_code == status, (host, r.text)
            assert r.headers["content-type"].startswith("application/json")


def test_another_applications_schema_migrations_is_refused_at_once(pg_server) -> None:
    """golang-migrate's table made memrl wait 30 s for connections that could not load pgvector; Rails' a
    TypeError traceback; a date-like version told the user to upgrade memrl."""
    import psycopg

    from memrl.memory.backends.postgres.store import PostgresStore

    for name, ddl in [
        ("golang", "CREATE TABLE schema_migrations (version bigint PRIMARY KEY, dirty boolean NOT NULL); "
                   "INSERT INTO schema_migrations VALUES (1, false)"),
        ("rails", "CREATE TABLE schema_migrations (version varchar PRIMARY KEY); "
                  "INSERT INTO schema_migrations VALUES ('20240101000000')"),
        ("dated", "CREATE TABLE schema_migrations (version bigint PRIMARY KEY); INSERT INTO schema_migrations VALUES (20240101)"),
    ]:  # fmt: skip
        url = pg_server.create_database(f"foreign_{name}")
        with psycopg.connect(url, autocommit=True) as c:
            c.execute(ddl)
        t0 = time.perf_counter()
        with pytest.raises(StoreError, match="another application's schema_migrations"):
            PostgresStore(url, busy_timeout=1.0)
        assert time.perf_counter() - t0 < 5, name


def _documented_curls(text: str) -> list[list[str]]:
    """The ``curl`` commands of a text (continuation lines joined; ``> file`` made curl's ``-o file``)."""
    joined = re.sub(r"\\\n\s*", " ", text)
    cmds = [shlex.split(line.strip()) for line in joined.splitlines() if line.strip().startswith("curl ")]
    return [["-o" if a == ">" else a for a in cmd] for cmd in cmds]


def test_the_documented_curl_commands_work_as_written(tmp_path) -> None:
    """docs/service.md's import used a token that cannot write the target (403); the API module's docstring
    sent JSON without ``Content-Type`` (curl's -d says form data: 415)."""
    import memrl.server.memory_api as api

    docs = (ROOT_DIR / "docs" / "service.md").read_text()
    rest = docs[docs.index("## REST API") :]
    block = rest[rest.index("```bash") + 7 : rest.index("```", rest.index("```bash") + 7)]
    serve = next(x for x in docs.splitlines() if x.startswith("memrl serve memory"))
    tokens = [a for a in shlex.split(serve) if "=" in a and ":" in a]
    commands = _documented_curls(api.__doc__ or "") + _documented_curls(block)
    assert len(commands) == 5 and any("import" in " ".join(c) for c in commands)
    memory = AsyncMemory(tmp_path / "m.db", embedder=HashingEmbedder(64))
    with ServerThread(create_app(memory, Tokens.parse(tokens))) as server:
        for cmd in commands:
            cmd = [a.replace("http://127.0.0.1:8080", server.base_url) for a in cmd]
            quiet = [] if "-o" in cmd else ["-o", "/dev/null"]
            out = subprocess.run([*cmd, "-s", *quiet, "-w", "%{http_code}"], cwd=tmp_path, capture_output=True,
                                 text=True, timeout=60)  # fmt: skip
            assert out.stdout in ("200", "201"), (cmd, out.stdout, out.stderr)
        assert asyncio.run(memory.count(namespace="alice-copy")) == 2


def test_the_reward_server_answers_an_unknown_category_with_json(tmp_path) -> None:
    """An unknown LoCoMo category was a plain-text 500 from inside the metric."""
    with ServerThread(create_reward_app(Tokens())) as server:
        c = client(server.base_url, None)
        for item in [
            {"metric": "locomo_f1", "prediction": "May", "answer": "May", "category": "nonsense"},
            {"metric": "locomo_f1", "prediction": "May", "answer": "May", "category": 9},
            {"metric": "answer_f1", "prediction": "May", "answers": ["May"], "category": "tempral"},
        ]:
            r = c.post("/v1/score", json={"items": [item]})
            assert r.status_code == 422 and r.headers["content-type"].startswith("application/json"), r.text
            assert r.json()["error"]["message"] and "category" in r.json()["error"]["message"]
        r = c.post("/v1/score", json={"items": [{"metric": "locomo_f1", "prediction": "May", "answer": "May",
                                                  "category": "multi-hop"}]})  # fmt: skip
        assert r.status_code == 200 and r.json()["results"][0]["score"] == 1.0
