"""The Postgres schema of the store: the numbered migrations shipped with memrl, applied when a store opens.

``memrl/memory/backends/postgres/sql/NNNN_name.sql`` are plain SQL files, applied in order under an advisory lock (one
migrating process at a time) and recorded in ``schema_migrations``; never edit a released one, add the next
number. A database holding another application's tables, or its ``schema_migrations`` table, is refused at
once with a message that says so. :func:`pg_error` turns psycopg's errors into memrl's (as
:func:`memrl.memory.backends.sqlite.migrations.store_error` does for SQLite's).
"""

from __future__ import annotations

from importlib import resources
from typing import Any

from memrl.errors import StoreError, ValidationError


def migrations() -> list[tuple[int, str, str]]:
    """The numbered migrations shipped with memrl: (version, name, SQL), in order."""
    out = []
    for f in resources.files("memrl.memory.backends.postgres").joinpath("sql").iterdir():
        if f.name.endswith(".sql"):
            out.append((int(f.name.split("_", 1)[0]), f.name, f.read_text(encoding="utf-8")))
    return sorted(out)


def migrate(url: str, path: str) -> None:
    """Bring the database at ``url`` (named ``path`` in messages: no password) up to the newest schema."""
    import psycopg

    known = migrations()
    with psycopg.connect(url, autocommit=True, connect_timeout=10) as conn:
        conn.execute("SELECT pg_advisory_lock(7231987)")  # one migrating process at a time
        try:
            if conn.execute("SELECT to_regclass('schema_migrations')").fetchone()[0] is None:
                foreign = conn.execute(
                    "SELECT count(*) FROM information_schema.tables WHERE table_schema = current_schema()"
                ).fetchone()[0]
                if foreign:
                    raise StoreError(
                        f"{path} holds tables of another application (no memrl schema); pass an empty "
                        "database (or another schema) or an existing memrl database"
                    )
                conn.execute(
                    "CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, "
                    "applied_at TIMESTAMPTZ NOT NULL DEFAULT now())"
                )
            else:
                _check_ours(conn, path)
            done = {r[0] for r in conn.execute("SELECT version FROM schema_migrations")}
            newest = max((v for v, _, _ in known), default=0)
            if done and max(done) > newest:
                raise StoreError(
                    f"{path} has schema version {max(done)}, newer than this memrl ({newest}); upgrade memrl"
                )
            for version, name, sql in known:
                if version in done:
                    continue
                with conn.transaction():
                    conn.execute(sql)
                    conn.execute(
                        "INSERT INTO schema_migrations (version, name) VALUES (%s, %s)", (version, name)
                    )
        finally:
            conn.execute("SELECT pg_advisory_unlock(7231987)")


def _check_ours(conn: Any, path: str) -> None:
    """Refuse, at once and in words, a ``schema_migrations`` table another application made (its versions
    meant "upgrade memrl", a type error, or a 30 s wait for connections that could not load pgvector)."""
    cols = {
        r[0]
        for r in conn.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_schema = current_schema() "
            "AND table_name = 'schema_migrations'"
        )
    }
    ours = cols == {"version", "name", "applied_at"}
    if ours and conn.execute("SELECT count(*) FROM schema_migrations").fetchone()[0]:
        meta = (
            conn.execute("SELECT to_regclass('meta')").fetchone()[0] is not None
            and conn.execute("SELECT value FROM meta WHERE key = 'application'").fetchone()
        )
        ours = bool(meta) and meta[0] == "memrl"
    if not ours:
        raise StoreError(
            f"{path} holds another application's schema_migrations table (not memrl's); pass an empty "
            "database (or another schema) or an existing memrl database"
        )


def pg_error(e: Any, path: str) -> Exception:
    """A psycopg error as a memrl error: only a lost or refused connection (SQLSTATE class 08, 57P, or none
    from the server) "cannot reach the database"; a value the database cannot take (classes 22 data, 54
    program limit) is a :class:`~memrl.errors.ValidationError`; anything else a :class:`StoreError`. The
    message is the server's first line only: never the statement, its parameters or the context."""
    import psycopg

    state = getattr(e, "sqlstate", None) or ""
    diag = getattr(e, "diag", None)
    first = (getattr(diag, "message_primary", None) or str(e).strip().split("\n", 1)[0])[:300]
    if state[:2] in ("22", "54") or (isinstance(e, psycopg.DataError) and not state):
        return ValidationError(f"the database refused a value ({first})")
    if isinstance(e, psycopg.OperationalError) and (not state or state[:2] == "08" or state[:3] == "57P"):
        return StoreError(f"{path}: cannot reach the database ({first})")
    return StoreError(f"{path}: the database refused the operation ({state or type(e).__name__}: {first})")
