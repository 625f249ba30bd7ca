"""A throwaway Postgres server (with pgvector) for tests and benchmarks, from what ``pip`` installs.

The ``postgres`` extra installs ``pgserver``, a wheel that bundles the Postgres 16 binaries and pgvector's
``vector.so``; :class:`LocalPostgres` runs them directly: ``initdb`` into a temporary directory, the server
on a free loopback port (TCP, as a managed server is reached) with its socket in that directory, stopped
and deleted on :meth:`stop`. Postgres refuses to run as root: under root (CI) the server runs as the
unprivileged ``nobody`` user. Nothing here is used by the store itself::

    with LocalPostgres() as pg:
        memory = AsyncMemory(pg.url("memrl"), embedder="hashing")

:func:`bundled_bin_dir` says why no server can start (``None`` and a reason) instead of failing.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from memrl.errors import ConfigError


def bundled_bin_dir() -> tuple[Path | None, str]:
    """The directory of the bundled Postgres binaries, or None and why not."""
    import importlib.util

    spec = importlib.util.find_spec("pgserver")  # located, not imported: its own server wrapper is not used
    if spec is None:
        return None, "pgserver is not installed (pip install 'memrl[postgres]')"
    root = Path(spec.origin).parent / "pginstall" / "bin" if spec and spec.origin else None
    if root is None or not (root / "postgres").is_file():
        return None, "pgserver is installed but carries no postgres binary"
    return root, ""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LocalPostgres:
    """One Postgres server in a temporary directory on ``127.0.0.1:port`` (see the module docstring)."""

    def __init__(self, *, port: int | None = None, settings: dict[str, Any] | None = None) -> None:
        bin_dir, why = bundled_bin_dir()
        if bin_dir is None:
            raise ConfigError(why)
        self.bin = bin_dir
        self.port = port or free_port()
        self.settings = {"max_connections": 200, "fsync": "off", **(settings or {})}
        self.dir = Path(tempfile.mkdtemp(prefix="memrl-pg-"))
        self.data = self.dir / "data"
        self._user: tuple[int, int] | None = None
        if os.geteuid() == 0:
            import pwd

            nobody = pwd.getpwnam("nobody")
            self._user = (nobody.pw_uid, nobody.pw_gid)
            os.chown(self.dir, *self._user)
            self.dir.chmod(0o700)
            try:
                reachable = self._run(str(self.bin / "postgres"), "-V").returncode == 0
            except PermissionError:
                reachable = False
            if not reachable:
                # the binaries sit where nobody cannot reach them (a checkout under /root): run a copy, with
                # the wheel's vendored libraries where the binaries' rpath looks ($ORIGIN/../../../pgserver.libs)
                site = self.bin.parents[2]
                copy = self.dir / "site"
                shutil.copytree(
                    site / "pgserver" / "pginstall", copy / "pgserver" / "pginstall", symlinks=True
                )
                if (site / "pgserver.libs").is_dir():
                    shutil.copytree(site / "pgserver.libs", copy / "pgserver.libs", symlinks=True)
                for path in [copy, *copy.rglob("*")]:
                    os.lchown(path, *self._user)
                self.bin = copy / "pgserver" / "pginstall" / "bin"
        self._started = False

    def _run(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        user = self._user

        def demote() -> None:  # pragma: no cover - runs in the child
            if user is not None:
                os.setgid(user[1])
                os.setuid(user[0])

        env = {**os.environ, "LC_ALL": "C", "HOME": str(self.dir)}
        return subprocess.run(
            list(args), preexec_fn=demote, env=env, capture_output=True, text=True, timeout=timeout
        )

    def start(self) -> LocalPostgres:
        out = self._run(
            str(self.bin / "initdb"), "-D", str(self.data), "-U", "postgres", "--auth=trust",
            "--encoding=UTF8", "--no-sync",
        )  # fmt: skip
        if out.returncode != 0:
            raise ConfigError(f"initdb failed: {out.stderr.strip()[-500:]}")
        opts = " ".join(f"-c {k}={v}" for k, v in self.settings.items())
        out = self._run(
            str(self.bin / "pg_ctl"), "-D", str(self.data), "-w", "-t", "60", "-l", str(self.dir / "log"),
            "-o", f"-h 127.0.0.1 -p {self.port} -k {self.dir} {opts}", "start",
        )  # fmt: skip
        if out.returncode != 0:
            log = (self.dir / "log").read_text(errors="replace")[-800:] if (self.dir / "log").exists() else ""
            raise ConfigError(f"postgres did not start on port {self.port}: {out.stderr.strip()} {log}")
        self._started = True
        return self

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str) -> str:
        """Create database ``name`` (dropping one of that name first); returns its URL."""
        import psycopg

        with psycopg.connect(self.url(), autocommit=True) as c:
            c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            c.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def stop(self) -> None:
        if self._started:
            self._run(
                str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop", timeout=60
            )
            self._started = False
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> LocalPostgres:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def wait_ready(url: str, timeout: float = 30.0) -> None:
    """Block until ``url`` accepts connections (a server just started elsewhere)."""
    import psycopg

    end = time.monotonic() + timeout
    while True:
        try:
            psycopg.connect(url, connect_timeout=2).close()
            return
        except psycopg.OperationalError:
            if time.monotonic() > end:
                raise
            time.sleep(0.2)
