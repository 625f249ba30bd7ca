-- memrl on Postgres, schema 2: the embedding cache per namespace (as SQLite's migration 4). One cache for every
-- namespace let a tenant learn whether another had stored a text: an item naming a cached vector (metadata
-- vector_key) got that vector, and a text someone else had stored was added faster. Each namespace now keeps
-- the vectors of its own items (scope = the namespace; '' = vectors asked for without one); vectors no item
-- uses are dropped (recomputed when asked for), and every item's pgvector row is derived again from its own
-- namespace's cache.
DROP TRIGGER embeddings_vectors ON embeddings;
DROP TRIGGER memories_vectors ON memories;

ALTER TABLE embeddings ADD COLUMN scope TEXT COLLATE "C" NOT NULL DEFAULT '';
ALTER TABLE embeddings DROP CONSTRAINT embeddings_pkey;
ALTER TABLE embeddings ADD PRIMARY KEY (scope, hash, model);  -- scope first: a clone copies, a reset drops, one namespace's rows; then the key, as the triggers look rows up
INSERT INTO embeddings (model, scope, hash, vector)
    SELECT e.model, m.namespace, e.hash, e.vector
    FROM (SELECT DISTINCT namespace, COALESCE(metadata::jsonb ->> 'vector_key', content_hash) AS key, content_hash
          FROM memories) m
    JOIN embeddings e ON e.scope = '' AND e.hash = m.key
    WHERE m.key = m.content_hash OR m.key LIKE 'v:%'
ON CONFLICT DO NOTHING;
DELETE FROM embeddings WHERE scope = '';
ALTER TABLE embeddings ALTER COLUMN scope DROP DEFAULT;
DROP INDEX embeddings_hash;

DROP INDEX memories_vector_key;
CREATE INDEX memories_vector_key ON memories (namespace, (COALESCE(metadata::jsonb ->> 'vector_key', content_hash)));

DELETE FROM memory_vectors;
INSERT INTO memory_vectors (rid, model, namespace, type, embedding)
    SELECT m.rid, e.model, m.namespace, m.type, e.vector FROM memories m
    JOIN embeddings e ON e.scope = m.namespace AND e.hash = COALESCE(m.metadata::jsonb ->> 'vector_key', m.content_hash)
    WHERE m.deleted = 0 AND COALESCE(m.metadata::jsonb -> 'dense', '1'::jsonb) NOT IN ('0'::jsonb, 'false'::jsonb);

CREATE OR REPLACE FUNCTION memrl_item_vectors() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' THEN
        IF (OLD.content_hash, OLD.metadata, OLD.deleted, OLD.type, OLD.namespace)
           IS NOT DISTINCT FROM (NEW.content_hash, NEW.metadata, NEW.deleted, NEW.type, NEW.namespace) THEN
            RETURN NULL;
        END IF;
        DELETE FROM memory_vectors WHERE rid = NEW.rid;
    END IF;
    IF NEW.deleted = 0 AND COALESCE(NEW.metadata::jsonb -> 'dense', '1'::jsonb) NOT IN ('0'::jsonb, 'false'::jsonb) THEN
        INSERT INTO memory_vectors (rid, model, namespace, type, embedding)
        SELECT NEW.rid, e.model, NEW.namespace, NEW.type, e.vector FROM embeddings e
        WHERE e.scope = NEW.namespace AND e.hash = COALESCE(NEW.metadata::jsonb ->> 'vector_key', NEW.content_hash);
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER memories_vectors AFTER INSERT OR UPDATE ON memories
    FOR EACH ROW EXECUTE FUNCTION memrl_item_vectors();

-- Statement-level (a clone copies a namespace's vectors in one statement: one join, not a trigger per row).
CREATE OR REPLACE FUNCTION memrl_cache_vectors() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO memory_vectors (rid, model, namespace, type, embedding)
    SELECT m.rid, a.model, m.namespace, m.type, a.vector FROM added a
    JOIN memories m ON m.namespace = a.scope AND COALESCE(m.metadata::jsonb ->> 'vector_key', m.content_hash) = a.hash
    WHERE m.deleted = 0 AND COALESCE(m.metadata::jsonb -> 'dense', '1'::jsonb) NOT IN ('0'::jsonb, 'false'::jsonb)
    ON CONFLICT DO NOTHING;
    RETURN NULL;
END $$;
CREATE TRIGGER embeddings_vectors AFTER INSERT ON embeddings REFERENCING NEW TABLE AS added
    FOR EACH STATEMENT EXECUTE FUNCTION memrl_cache_vectors();
