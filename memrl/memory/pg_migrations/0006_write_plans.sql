-- memrl on Postgres, schema 6: write batches that stay fast while tables grow faster than autovacuum analyzes
-- them (issue 38: bench/store.py's Postgres inserts fell from 2,900/s to 640/s between 10k and 80k items, then
-- jumped to 4,300/s once autovacuum had run ANALYZE).
--
-- 1. The expiry index covered every live item (its expression NULL for items that never expire), so with stale
--    statistics the planner took it as the cheapest index on `namespace` for any query on live items, and the
--    embedding-cache trigger below read a whole namespace through it on every write batch. It now holds only the
--    items that carry a numeric expiry (as SQLite's holds only those with one); a query that wants it says so
--    (ExpiryMixin._due_where on Postgres names the same predicate).
DROP INDEX memories_expiry;
CREATE INDEX memories_expiry ON memories (
    namespace,
    (CASE WHEN jsonb_typeof(metadata::jsonb -> 'expires_at') = 'number'
          THEN (metadata::jsonb ->> 'expires_at')::double precision END)
) WHERE deleted = 0 AND jsonb_typeof(metadata::jsonb -> 'expires_at') = 'number';

-- 2. A batch of new cache vectors finds the items they belong to by one probe of memories_vector_key per vector,
--    whatever the statistics say (a lateral subquery the planner cannot flatten): as a join, with the planner
--    believing the namespace small, it read every item of the namespace once per write batch (a hash join, or
--    a nested loop with the items outside).
CREATE OR REPLACE FUNCTION memrl_cache_vectors() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO memory_vectors (rid, model, namespace, type, embedding)
    SELECT m.rid, a.model, m.namespace, m.type, a.vector FROM added a CROSS JOIN LATERAL (
        SELECT rid, namespace, type FROM memories
        WHERE namespace = a.scope AND COALESCE(metadata::jsonb ->> 'vector_key', content_hash) = a.hash
          AND deleted = 0 AND COALESCE(metadata::jsonb -> 'dense', '1'::jsonb) NOT IN ('0'::jsonb, 'false'::jsonb)
        OFFSET 0) m
    ON CONFLICT DO NOTHING;
    RETURN NULL;
END $$;
