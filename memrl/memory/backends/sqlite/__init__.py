"""The SQLite back-end: one database file (or ``:memory:``), its numbered migrations, and the in-process
indexes it hands to search."""

from memrl.memory.backends.sqlite.store import SQLiteStore

__all__ = ["SQLiteStore"]
