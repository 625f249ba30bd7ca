"""The SQLite schema of the embedded store, its numbered migrations, and opening a database safely.

One file (or ``:memory:``) holds everything: memory items, the change history, core memory blocks,
namespaces, the embedding cache (per namespace: migration 4) and retrieval keys (:mod:`memrl.memory.store.keys`). Full-text search is not
here: BM25 runs per namespace in :mod:`memrl.memory.index.lexical`. The file runs in WAL mode so readers never block the writer; writers take the lock up front (``BEGIN IMMEDIATE``) and wait up to
``busy_timeout`` for each other, so two processes can write the same file.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from memrl.errors import BusyError, StoreError

#: Each entry upgrades the schema by one version (``PRAGMA user_version``). Never edit a released entry:
#: append a new one.
MIGRATIONS: tuple[str, ...] = (
    # 1: the initial schema
    """
    CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
    INSERT INTO meta (key, value) VALUES ('application', 'memrl');

    CREATE TABLE namespaces (
        name        TEXT PRIMARY KEY,
        generation  INTEGER NOT NULL DEFAULT 0,  -- bumped when rows are hard-deleted (reset/drop)
        parent      TEXT,                        -- the namespace it was cloned from, if any
        created_at  REAL NOT NULL
    );

    CREATE TABLE memories (
        rid          INTEGER PRIMARY KEY,         -- integer key for the FTS index
        namespace    TEXT NOT NULL,
        id           TEXT NOT NULL,
        type         TEXT NOT NULL,
        content      TEXT NOT NULL,
        content_hash TEXT NOT NULL,               -- sha256 of content: the embedding cache key
        metadata     TEXT NOT NULL DEFAULT '{}',
        evidence     TEXT NOT NULL DEFAULT '[]',
        session      TEXT,
        created_at   REAL NOT NULL,
        updated_at   REAL NOT NULL,
        deleted      INTEGER NOT NULL DEFAULT 0,  -- soft delete: recoverable
        seq          INTEGER NOT NULL,            -- history seq of the last change (cache sync)
        UNIQUE (namespace, id)
    );
    CREATE INDEX memories_ns_seq ON memories (namespace, seq);

    CREATE VIRTUAL TABLE memories_fts USING fts5 (
        content, content='memories', content_rowid='rid', tokenize='porter unicode61'
    );
    CREATE TRIGGER memories_ai AFTER INSERT ON memories WHEN new.deleted = 0 BEGIN
        INSERT INTO memories_fts (rowid, content) VALUES (new.rid, new.content);
    END;
    CREATE TRIGGER memories_ad AFTER DELETE ON memories WHEN old.deleted = 0 BEGIN
        INSERT INTO memories_fts (memories_fts, rowid, content) VALUES ('delete', old.rid, old.content);
    END;
    -- One trigger, in this order: FTS5 must remove the old text before indexing the new one.
    CREATE TRIGGER memories_au AFTER UPDATE OF content, deleted ON memories BEGIN
        INSERT INTO memories_fts (memories_fts, rowid, content)
            SELECT 'delete', old.rid, old.content WHERE old.deleted = 0;
        INSERT INTO memories_fts (rowid, content) SELECT new.rid, new.content WHERE new.deleted = 0;
    END;

    CREATE TABLE history (
        seq        INTEGER PRIMARY KEY AUTOINCREMENT,
        namespace  TEXT NOT NULL,
        memory_id  TEXT NOT NULL,
        op         TEXT NOT NULL,
        old        TEXT,                          -- JSON snapshot before the change (NULL: did not exist)
        new        TEXT,                          -- JSON snapshot after the change
        at         REAL NOT NULL,
        actor      TEXT,
        batch      TEXT,                          -- changes made together (merge, split) undo together
        undone     INTEGER NOT NULL DEFAULT 0
    );
    CREATE INDEX history_ns_mem ON history (namespace, memory_id, seq);

    CREATE TABLE core (
        namespace  TEXT PRIMARY KEY,
        content    TEXT NOT NULL,
        char_limit INTEGER NOT NULL,
        updated_at REAL NOT NULL
    );

    -- A rowid table on purpose: WITHOUT ROWID would push every 1.5 KB vector onto overflow pages
    -- (3x the file size, half the insert rate; measured with bench/store.py).
    CREATE TABLE embeddings (
        model  TEXT NOT NULL,
        hash   TEXT NOT NULL,
        vector BLOB NOT NULL,
        PRIMARY KEY (model, hash)
    );
    """,
    # 2: retrieval keys (memrl.memory.store.keys): extra text indexed for an item, its own FTS5 view
    """
    CREATE TABLE memory_keys (
        rid         INTEGER PRIMARY KEY REFERENCES memories (rid) ON DELETE CASCADE,
        keys        TEXT NOT NULL,
        updated_at  REAL NOT NULL
    );
    CREATE VIRTUAL TABLE memory_keys_fts USING fts5 (
        keys, content='memory_keys', content_rowid='rid', tokenize='porter unicode61'
    );
    CREATE TRIGGER memory_keys_ai AFTER INSERT ON memory_keys BEGIN
        INSERT INTO memory_keys_fts (rowid, keys) VALUES (new.rid, new.keys);
    END;
    CREATE TRIGGER memory_keys_ad AFTER DELETE ON memory_keys BEGIN
        INSERT INTO memory_keys_fts (memory_keys_fts, rowid, keys) VALUES ('delete', old.rid, old.keys);
    END;
    CREATE TRIGGER memory_keys_au AFTER UPDATE OF keys ON memory_keys BEGIN
        INSERT INTO memory_keys_fts (memory_keys_fts, rowid, keys) VALUES ('delete', old.rid, old.keys);
        INSERT INTO memory_keys_fts (rowid, keys) VALUES (new.rid, new.keys);
    END;
    -- Keys describe one text: a new content drops them.
    CREATE TRIGGER memories_keys_stale AFTER UPDATE OF content ON memories
        WHEN old.content IS NOT new.content BEGIN
        DELETE FROM memory_keys WHERE rid = new.rid;
    END;
    """,
    # 3: BM25 per namespace (memrl.memory.index.lexical). The FTS5 indexes kept one set of statistics for every
    # namespace (one tenant's writes moved another's scores); search now indexes each namespace apart, in
    # memory. Retrieval keys carry a per-namespace version so those indexes know when to rebuild.
    """
    DROP TRIGGER memories_ai;
    DROP TRIGGER memories_ad;
    DROP TRIGGER memories_au;
    DROP TABLE memories_fts;
    DROP TRIGGER memory_keys_ai;
    DROP TRIGGER memory_keys_ad;
    DROP TRIGGER memory_keys_au;
    DROP TABLE memory_keys_fts;
    ALTER TABLE namespaces ADD COLUMN keys_version INTEGER NOT NULL DEFAULT 0;
    CREATE TRIGGER memory_keys_ai AFTER INSERT ON memory_keys BEGIN
        UPDATE namespaces SET keys_version = keys_version + 1
            WHERE name = (SELECT namespace FROM memories WHERE rid = new.rid);
    END;
    CREATE TRIGGER memory_keys_ad AFTER DELETE ON memory_keys BEGIN
        UPDATE namespaces SET keys_version = keys_version + 1
            WHERE name = (SELECT namespace FROM memories WHERE rid = old.rid);
    END;
    CREATE TRIGGER memory_keys_au AFTER UPDATE ON memory_keys BEGIN
        UPDATE namespaces SET keys_version = keys_version + 1
            WHERE name = (SELECT namespace FROM memories WHERE rid = new.rid);
    END;
    """,
    # 4: the embedding cache per namespace (``scope``; '' = vectors asked for without a namespace). One cache
    # for every namespace let a tenant learn whether another had stored a text: an item naming a cached
    # vector (metadata vector_key) got that vector, and a text someone else had stored was added faster.
    # Each namespace keeps the vectors of its own items (a row's own content hash, or its given vector's
    # key); vectors no item uses are dropped (recomputed when asked for).
    """
    CREATE INDEX embeddings_hash_v3 ON embeddings (hash);
    CREATE TABLE embeddings_v4 (
        scope  TEXT NOT NULL,  -- first: a clone copies, and a reset drops, one namespace's rows
        hash   TEXT NOT NULL,
        model  TEXT NOT NULL,
        vector BLOB NOT NULL,
        PRIMARY KEY (scope, hash, model)
    );
    INSERT INTO embeddings_v4 (scope, hash, model, vector)
        SELECT m.namespace, e.hash, e.model, e.vector
        FROM (SELECT DISTINCT namespace, COALESCE(json_extract(metadata, '$.vector_key'), content_hash) AS key,
                     content_hash FROM memories) m
        JOIN embeddings e ON e.hash = m.key
        WHERE m.key = m.content_hash OR m.key LIKE 'v:%'
        ON CONFLICT DO NOTHING;
    DROP TABLE embeddings;
    ALTER TABLE embeddings_v4 RENAME TO embeddings;
    """,
    # 5: agent jobs (memrl.memory.jobs.table): remember / maintain / read requests, their status and events. A job
    # runs on a scratch clone of its namespace and lands in one history batch (``batch``), undone together.
    """
    CREATE TABLE jobs (
        id              TEXT PRIMARY KEY,
        namespace       TEXT NOT NULL,
        kind            TEXT NOT NULL,            -- remember, maintain, read
        status          TEXT NOT NULL,            -- queued, running, succeeded, failed, cancelled
        request         TEXT NOT NULL,            -- JSON: what was asked
        idempotency_key TEXT,
        dry_run         INTEGER NOT NULL DEFAULT 0,
        scratch         TEXT,                     -- the clone the agent writes into while it runs
        batch           TEXT,                     -- the history batch its writes landed in
        result          TEXT,                     -- JSON: events, stats, tokens, answer
        error           TEXT,
        created_at      REAL NOT NULL,
        started_at      REAL,
        finished_at     REAL,
        undone          INTEGER NOT NULL DEFAULT 0
    );
    CREATE UNIQUE INDEX jobs_idempotency ON jobs (namespace, idempotency_key);
    CREATE INDEX jobs_ns_created ON jobs (namespace, created_at);
    CREATE INDEX jobs_status ON jobs (status);
    """,
    # 6: which process runs a job, and when it last said so: several server processes on one store claim
    # jobs atomically, and only a dead process's running jobs are failed (memrl.memory.jobs.table.JobTable.claim).
    """
    ALTER TABLE jobs ADD COLUMN owner TEXT;
    ALTER TABLE jobs ADD COLUMN heartbeat_at REAL;
    """,
    # 7: items that expire (metadata "expires_at", memrl.memory.store.expiry): the expiry time of live items,
    # indexed, so a search finds what is due and a sweep deletes it without reading every item.
    """
    CREATE INDEX memories_expiry ON memories (namespace, json_extract(metadata, '$.expires_at'))
        WHERE deleted = 0 AND json_extract(metadata, '$.expires_at') IS NOT NULL;
    """,
    # 8: the request an idempotency key was first sent with (a hash of kind, namespace, dry run and body): the
    # same key with another request is refused instead of answering the first job
    # (memrl.memory.jobs.table.request_hash).
    """
    ALTER TABLE jobs ADD COLUMN request_hash TEXT;
    """,
)

SCHEMA_VERSION = len(MIGRATIONS)


def connect(path: str | Path, *, busy_timeout: float = 5.0) -> sqlite3.Connection:
    """Open (creating if needed) a memrl database and bring its schema up to date.

    Raises :class:`StoreError` naming the file when it is not a SQLite database, belongs to another
    application, is newer than this version of memrl, or is locked for longer than ``busy_timeout``.
    """
    name = str(path)
    if name != ":memory:":
        p = Path(name)
        if p.is_dir():
            raise StoreError(f"{name} is a directory; pass the path of a database file")
        p.parent.mkdir(parents=True, exist_ok=True)
    try:
        conn = sqlite3.connect(name, timeout=busy_timeout, isolation_level=None, check_same_thread=False)
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
        if name != ":memory:":
            conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("PRAGMA foreign_keys = ON")
        _migrate(conn, name)
    except sqlite3.DatabaseError as e:
        raise store_error(e, name) from e
    return conn


def _migrate(conn: sqlite3.Connection, name: str) -> None:
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    if version == 0:
        tables = conn.execute("SELECT count(*) FROM sqlite_master WHERE type = 'table'").fetchone()[0]
        if tables:
            raise StoreError(
                f"{name} is a SQLite database of another application (it has tables but no memrl schema); "
                "pass a new file or an existing memrl database"
            )
    elif version > SCHEMA_VERSION:
        raise StoreError(
            f"{name} has schema version {version}, newer than this memrl ({SCHEMA_VERSION}); upgrade memrl"
        )
    if version == SCHEMA_VERSION:
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        # Another process may have migrated while we waited for the lock.
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        for v in range(version, SCHEMA_VERSION):
            for stmt in _split_sql(MIGRATIONS[v]):
                conn.execute(stmt)
            conn.execute(f"PRAGMA user_version = {v + 1}")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def _split_sql(script: str) -> list[str]:
    """Split a migration into statements (``executescript`` would commit our transaction)."""
    out, buf = [], []
    for line in script.splitlines():
        buf.append(line)
        candidate = "\n".join(buf).strip()
        if candidate and sqlite3.complete_statement(candidate):
            out.append(candidate)
            buf = []
    if "\n".join(buf).strip():
        raise ValueError("incomplete SQL statement in migration")
    return out


def store_error(e: sqlite3.Error, name: str) -> StoreError:
    """Translate a :mod:`sqlite3` error into a :class:`StoreError` that names the database file."""
    msg = str(e)
    if "locked" in msg or "busy" in msg:
        return BusyError(
            f"{name} is locked by another writer ({msg}); it stayed locked longer than the busy timeout. "
            "Retry, or raise busy_timeout"
        )
    if "not a database" in msg or "malformed" in msg or "corrupt" in msg:
        return StoreError(
            f"{name} is not a readable memrl database ({msg}). If it was a memrl database, restore it from a "
            "backup; `sqlite3 FILE .recover` may salvage its rows"
        )
    return StoreError(f"{name}: {msg}")
