"""memrl.eval's seams: the flat module paths of earlier releases still import, warn with the new path and
give the same objects; the modules that became packages (``qa``, ``retrieval``) still export the names code
imported from them; and the new paths import without a warning."""

from __future__ import annotations

import importlib
import importlib.util
import sys
import warnings

import pytest

from memrl import _moved
from memrl.eval._moved import MOVED

#: module that became a package -> {name it gave as a module: the module of the package it lives in now}.
PACKAGES = {
    "qa": {"JsonlLog": "run", "QAEvaluation": "run", "run_qa_eval": "run", "READERS": "config",
           "QAEvalConfig": "config", "load_conversations": "config"},
    "retrieval": {"aevaluate": "run", "evaluate_retrieval": "run", "open_memory": "run", "enrich_llm": "run",
                  "enrich_conversations": "run", "load_conversations": "run", "RetrievalConfig": "config",
                  "build_conversation": "search", "evaluate_conversation": "search", "namespace_of": "search",
                  "prefetch_embeddings": "search", "summarize": "report", "write_outputs": "report"},
}  # fmt: skip


def _public(module) -> list[str]:
    return [
        k
        for k, v in vars(module).items()
        if not k.startswith("_") and getattr(v, "__module__", "") == module.__name__
    ]


@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_old_path_imports_with_a_warning_and_gives_the_same_objects(old):
    new = MOVED[old]
    sys.modules.pop(f"memrl.eval.{old}", None)  # imported by an earlier test: import it afresh
    with pytest.warns(DeprecationWarning, match=f"memrl.eval.{old} moved to memrl.eval.{new[0]}"):
        module = importlib.import_module(f"memrl.eval.{old}")
    for name in new:
        main = importlib.import_module(f"memrl.eval.{name}")
        public = _public(main)
        assert public and all(getattr(module, k) is getattr(main, k) for k in public), (old, name)


def test_the_old_gold_module_gives_both_halves():
    sys.modules.pop("memrl.eval.gold", None)
    with pytest.warns(DeprecationWarning, match="memrl.eval.gold moved to memrl.eval.qa.gold"):
        from memrl.eval.gold import audit_file, corrected_retrieval, run_corrections
    from memrl.eval.qa import gold as qa_gold
    from memrl.eval.retrieval import gold as retrieval_gold

    assert audit_file is qa_gold.audit_file and run_corrections is qa_gold.run_corrections
    assert corrected_retrieval is retrieval_gold.corrected_retrieval


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_a_module_that_became_a_package_exports_its_old_names(package):
    module = importlib.import_module(f"memrl.eval.{package}")
    assert hasattr(module, "__path__")
    for name, where in PACKAGES[package].items():
        main = importlib.import_module(f"memrl.eval.{package}.{where}")
        assert getattr(module, name) is getattr(main, name), (package, name)
    assert sorted(module.__all__) == sorted(PACKAGES[package]), package
    with pytest.raises(AttributeError):
        module.no_such_name  # noqa: B018


def test_the_new_paths_import_without_a_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        for new in {m for mods in MOVED.values() for m in mods} | {
            "qa.run",
            "retrieval.run",
            "stats",
            "protocol",
        }:
            importlib.import_module(f"memrl.eval.{new}")


def test_no_flat_module_is_left_beside_its_new_home():
    """An old path is the finder's only while no file answers it (the finder runs after the ordinary ones)."""
    for old in MOVED:
        spec = importlib.util.find_spec(f"memrl.eval.{old}")
        assert spec is not None and isinstance(spec.loader, _moved.MovedModules), old
