"""The Postgres back-end with pgvector: the store (:mod:`.store`), its migrations (:mod:`.migrations`, SQL in
``sql/``), BM25 postings in the database (:mod:`.lexical`), pgvector search and HNSW (:mod:`.vectors`,
:mod:`.ann`), planner statistics (:mod:`.stats`), and a throwaway local server for tests (:mod:`.local`).
Imported only when a ``postgresql://`` store is opened (psycopg is an optional extra)."""

from memrl.memory.backends.postgres.store import PostgresStore

__all__ = ["PostgresStore"]
