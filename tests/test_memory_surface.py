"""memrl.memory's seams: its public surface, the old import paths, and the pieces written once for every
back-end (the cache that follows the store, nested transactions, the BM25 weight, the time parser)."""

from __future__ import annotations

import ast
import importlib
import math
import warnings
from pathlib import Path

import numpy as np
import pytest

import memrl.memory
from memrl.datetimes import epoch_seconds
from memrl.errors import ValidationError
from memrl.memory import AsyncMemory, NewItem, open_store
from memrl.memory._moved import MOVED
from memrl.memory.analysis import bm25
from memrl.memory.store.follow import Following
from memrl.memory.store.nesting import Nesting

ROOT = Path(__file__).resolve().parents[1]


def test_the_surface_lists_the_same_names_as_its_type_checking_imports_and_each_resolves():
    tree = ast.parse((ROOT / "memrl" / "memory" / "__init__.py").read_text())
    typed = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", "") == "TYPE_CHECKING":
            for imp in node.body:
                typed.update({a.name: imp.module.rpartition(".")[2] for a in imp.names})
    assert typed == memrl.memory._EXPORTS
    assert sorted(memrl.memory.__all__) == sorted(typed)
    for name in memrl.memory.__all__:
        assert getattr(memrl.memory, name) is getattr(
            importlib.import_module(f"memrl.memory.{typed[name]}"), name
        )
    with pytest.raises(AttributeError):
        memrl.memory.NoSuchThing  # noqa: B018


@pytest.mark.parametrize("sub", ["records", "analysis", "embedders", "store", "index", "jobs", "backends",
                                 "search", "facade", "backends.sqlite", "backends.postgres"])  # fmt: skip
def test_each_sub_package_exports_what_it_lists(sub):
    module = importlib.import_module(f"memrl.memory.{sub}")
    assert module.__all__ and all(hasattr(module, name) for name in module.__all__)


def test_old_flat_paths_import_with_a_warning_and_give_the_same_objects():
    for old, new in MOVED.items():
        with pytest.warns(DeprecationWarning, match=f"memrl.memory.{old} moved to memrl.memory.{new[0]}"):
            module = importlib.import_module(f"memrl.memory.{old}")
        main = importlib.import_module(f"memrl.memory.{new[0]}")
        public = [
            k
            for k in vars(main)
            if not k.startswith("_") and getattr(vars(main)[k], "__module__", "") == main.__name__
        ]
        assert all(getattr(module, k) is getattr(main, k) for k in public), old
    from memrl.memory.backends.postgres.vectors import PgVectorIndex
    from memrl.memory.search.priors import ItemSignals

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from memrl.memory.fusion import fts_query
        from memrl.memory.query import Facts
        from memrl.memory.server_index import ServerIndex
        from memrl.memory.types import MemoryItem
    assert (ServerIndex, Facts, MemoryItem) == (PgVectorIndex, ItemSignals, memrl.memory.MemoryItem)
    assert fts_query("What did Caroline do?") == '"caroline"'


async def test_read_is_the_deprecated_name_of_memorize():
    m = AsyncMemory(embedder="hashing")
    with pytest.raises(ValidationError, match="document must be non-empty"):
        await m.memorize("  ")
    with pytest.warns(DeprecationWarning, match="now memorize"), pytest.raises(ValidationError):
        await m.read("  ")
    await m.close()


def test_following_rebuilds_on_a_new_generation_or_key_and_holds_otherwise(tmp_path):
    store = open_store(tmp_path / "m.db")
    store.insert([NewItem("a fact")], "a")
    built = []
    f = Following(store, lambda ns, gen, key: built.append((ns, gen, key)) or len(built))
    assert f.current("a") == 1 and f.current("a") == 1 and f.get("a") == 1 and f.get("b") is None
    assert f.current("a", key="other") == 2  # another key: rebuilt
    store.insert([NewItem("another")], "a")
    assert f.current("a", key="other") == 2  # a write keeps the generation: the owner catches up
    store.clone_namespace("a", "b")
    store.clone_namespace("b", "a", overwrite=True)  # rows of "a" replaced without history: new generation
    assert f.current("a", key="other") == 3 and built[2][1] > built[1][1]
    f.forget("a")
    assert "a" not in f and f.current("a", key="other") == 4
    assert f.current("b", build=lambda gen: -gen) == -store.generation("b") and dict(f) == {
        "a": 4,
        "b": f["b"],
    }
    store.close()


def test_nesting_opens_one_batch_for_the_outermost_asker_and_undoes_on_error():
    n = Nesting()
    with n.level() as outer:
        assert outer and n.batch is None
        with n.level(batch=True) as inner:
            batch = n.batch
            assert not inner and batch
            with n.level(batch=True):
                assert n.batch == batch
        assert n.batch is None and n.depth == 1
    with pytest.raises(RuntimeError), n.level(batch=True):
        raise RuntimeError
    assert (n.depth, n.batch) == (0, None)


def test_batched_writes_share_one_undoable_batch_on_sqlite(tmp_path):
    store = open_store(tmp_path / "m.db")
    with store.transaction("n", batch=True):
        with store.transaction("n"):
            store.insert([NewItem("one")], "n")
        store.insert([NewItem("two")], "n")
    batches = store.read("SELECT DISTINCT batch FROM history WHERE namespace = 'n'")
    assert len(batches) == 1 and batches[0][0]
    store.undo_batch("n", batches[0][0])
    assert store.count("n") == 0
    store.close()


def test_one_bm25_weight_on_floats_arrays_and_in_sql():
    tf, dl, avgdl, docs, df = np.array([1.0, 3.0]), np.array([5.0, 12.0]), 7.5, 40, 3
    on_array = bm25.weight(bm25.idf(docs, df), tf, dl, avgdl)
    on_floats = [
        bm25.weight(bm25.idf(docs, df), float(t), float(d), avgdl) for t, d in zip(tf, dl, strict=True)
    ]
    assert on_array.tolist() == on_floats  # the same bits both ways
    idf = math.log((docs - df + 0.5) / (df + 0.5))
    assert on_floats[0] == idf * 1.0 * 2.2 / (1.0 + 1.2 * (1 - 0.75 + 0.75 * 5.0 / avgdl))
    assert bm25.idf(10, 9) == bm25.IDF_FLOOR  # a term in most texts
    assert bm25.sql_weight("p.tf", "p.dl", "st.avgdl", "st.docs", "p.n") == (
        "(CASE WHEN ln((st.docs - p.n + 0.5) / (p.n + 0.5)) > 0 THEN ln((st.docs - p.n + 0.5) / (p.n + 0.5)) "
        "ELSE 1e-06::float8 END) * ((p.tf * 2.2::float8) / (p.tf + 1.2::float8 * (0.25::float8 + 0.75::float8 "
        "* p.dl / st.avgdl)))"
    )


def test_one_time_parser_for_as_of_and_expiry():
    from memrl.memory.store import expiry_time, to_time

    for text in ("2026-05-01", "2026-05-01T12:00:00Z", "2026-05-01T14:00:00+02:00", "2026-05-01t12:00:00z"):
        assert to_time(text) == epoch_seconds(text) == expiry_time(text)
    assert epoch_seconds("2026-05-01T12:00:00Z") == epoch_seconds("2026-05-01T14:00:00+02:00")
    with pytest.raises(ValueError):
        epoch_seconds("last May")
    with pytest.raises(ValidationError, match="as_of"):
        to_time("last May")
    with pytest.raises(ValidationError, match="expires_at"):
        expiry_time("last May")
