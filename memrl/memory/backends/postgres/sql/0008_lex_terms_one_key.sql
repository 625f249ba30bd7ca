-- memrl on Postgres, schema 8 (issue 59, inserts): the BM25 postings in one B-tree instead of two. lex_terms was
-- keyed by (rid, field, term), for the delete trigger, and indexed again by (namespace, field, term) for search,
-- so each of an item's ~15 term rows went into two indexes. The search order is now the key (with the rid, which
-- makes it unique, and tf and dl carried for index-only scans); a text's lex_docs row keeps its distinct terms,
-- by which the delete trigger finds its postings under that key.
ALTER TABLE lex_docs ADD COLUMN terms TEXT[] NOT NULL DEFAULT '{}';
UPDATE lex_docs d SET terms = x.terms
FROM (SELECT rid, field, array_agg(term ORDER BY term) AS terms FROM lex_terms GROUP BY rid, field) x
WHERE d.rid = x.rid AND d.field = x.field;
ALTER TABLE lex_docs ALTER COLUMN terms DROP DEFAULT;

ALTER TABLE lex_terms DROP CONSTRAINT lex_terms_pkey;
DROP INDEX lex_terms_lookup;
ALTER TABLE lex_terms ADD PRIMARY KEY (namespace, field, term, rid) INCLUDE (tf, dl);

CREATE OR REPLACE FUNCTION memrl_lex_stats_remove() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE lex_stats s SET docs = s.docs - r.docs, tokens = s.tokens - r.tokens
    FROM (SELECT namespace, field, count(*) AS docs, sum(dl) AS tokens FROM removed GROUP BY namespace, field) r
    WHERE s.namespace = r.namespace AND s.field = r.field;
    DELETE FROM lex_terms t
    USING (SELECT r.namespace, r.field, r.rid, u.term FROM removed r CROSS JOIN LATERAL unnest(r.terms) AS u(term)) x
    WHERE t.namespace = x.namespace AND t.field = x.field AND t.term = x.term AND t.rid = x.rid;
    RETURN NULL;
END $$;
