-- memrl on Postgres, schema 7 (as SQLite's migration 8): the request an idempotency key was first sent with, as
-- a hash of kind, namespace, dry run and body; the same key with another request is refused instead of answering
-- the first job (memrl/memory/jobs/table.py, request_hash).
ALTER TABLE jobs ADD COLUMN request_hash TEXT COLLATE "C";
