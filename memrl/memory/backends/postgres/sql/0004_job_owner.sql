-- memrl on Postgres, schema 4: which process runs a job, and when it last said so (as SQLite's migration 6):
-- several server processes on one database claim jobs atomically, and only a dead process's running jobs
-- are failed (memrl/memory/jobs.py, JobTable.claim and JobTable.reap).
ALTER TABLE jobs ADD COLUMN owner TEXT COLLATE "C";
ALTER TABLE jobs ADD COLUMN heartbeat_at DOUBLE PRECISION;
