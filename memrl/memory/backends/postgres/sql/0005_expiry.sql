-- memrl on Postgres, schema 5: items that expire (metadata "expires_at", memrl/memory/expiry.py; as SQLite's
-- migration 7): the expiry time of live items, indexed, so a search finds what is due and a sweep deletes it
-- without reading every item. Not a number (a string a user kept under that key before): never expires.
CREATE INDEX memories_expiry ON memories (
    namespace,
    (CASE WHEN jsonb_typeof(metadata::jsonb -> 'expires_at') = 'number'
          THEN (metadata::jsonb ->> 'expires_at')::double precision END)
) WHERE deleted = 0;
