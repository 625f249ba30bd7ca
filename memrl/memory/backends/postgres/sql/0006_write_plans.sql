-- memrl on Postgres, schema 6: write batches that stay fast while tables grow faster than autovacuum analyzes
-- them (issue 38: a development fill of bench/store.py's items, timed per 10k, fell from 2,900/s to 640/s between
-- 10k and 80k items, then jumped to 4,300/s once autovacuum had run ANALYZE).
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

-- 3. A new item's pgvector row is found once per statement, not once per row: a COPY of 500 items ran the
--    per-row trigger (a PL/pgSQL call, a cache lookup and an insert each) 500 times. Updates keep the per-row
--    trigger (it compares the old row with the new).
CREATE FUNCTION memrl_items_vectors() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO memory_vectors (rid, model, namespace, type, embedding)
    SELECT n.rid, e.model, n.namespace, n.type, e.vector FROM added n CROSS JOIN LATERAL (
        SELECT model, vector FROM embeddings
        WHERE scope = n.namespace AND hash = COALESCE(n.metadata::jsonb ->> 'vector_key', n.content_hash)
        OFFSET 0) e
    WHERE n.deleted = 0 AND COALESCE(n.metadata::jsonb -> 'dense', '1'::jsonb) NOT IN ('0'::jsonb, 'false'::jsonb);
    RETURN NULL;
END $$;
DROP TRIGGER memories_vectors ON memories;
CREATE TRIGGER memories_vectors AFTER UPDATE ON memories FOR EACH ROW EXECUTE FUNCTION memrl_item_vectors();
CREATE TRIGGER memories_vectors_added AFTER INSERT ON memories REFERENCING NEW TABLE AS added
    FOR EACH STATEMENT EXECUTE FUNCTION memrl_items_vectors();
