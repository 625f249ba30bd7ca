-- memrl on Postgres, schema 3: agent jobs (as SQLite's migration 5; memrl/memory/jobs.py). A job runs on a
-- scratch clone of its namespace and lands in one history batch (batch), undone together.
CREATE TABLE jobs (
    id              TEXT COLLATE "C" PRIMARY KEY,
    namespace       TEXT COLLATE "C" NOT NULL,
    kind            TEXT NOT NULL,
    status          TEXT NOT NULL,
    request         TEXT NOT NULL,
    idempotency_key TEXT COLLATE "C",
    dry_run         SMALLINT NOT NULL DEFAULT 0,
    scratch         TEXT COLLATE "C",
    batch           TEXT,
    result          TEXT,
    error           TEXT,
    created_at      DOUBLE PRECISION NOT NULL,
    started_at      DOUBLE PRECISION,
    finished_at     DOUBLE PRECISION,
    undone          SMALLINT NOT NULL DEFAULT 0
);
CREATE UNIQUE INDEX jobs_idempotency ON jobs (namespace, idempotency_key);
CREATE INDEX jobs_ns_created ON jobs (namespace, created_at);
CREATE INDEX jobs_status ON jobs (status);
