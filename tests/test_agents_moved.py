"""memrl.agents' seams: the flat module paths of earlier releases still import, warn with the new path and
give the same objects; the modules that became packages (``jobs``, ...) still export the names code imported
from them; and the finder of old paths (:mod:`memrl._moved`) gives a dotted old path below its parent."""

from __future__ import annotations

import importlib
import sys
import warnings

import pytest

from memrl import _moved
from memrl.agents._moved import MOVED

#: module that became a package -> the modules its names live in now: the package exports their ``__all__``
#: (``jobs``: ``JobRunner``, ``job_writer``, ``llm_from_spec``, ``describe_writer``, ``LOCAL_WARNING``, ``JobConfig``).
PACKAGES = {"jobs": ["runner", "writer", "config"], "membuilder": ["agent"], "memupdate": ["agent"]}


def _public(module) -> list[str]:
    return [
        k
        for k, v in vars(module).items()
        if not k.startswith("_") and getattr(v, "__module__", "") == module.__name__
    ]


@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_old_path_imports_with_a_warning_and_gives_the_same_objects(old):
    new = MOVED[old]
    sys.modules.pop(f"memrl.agents.{old}", None)  # imported by an earlier test: import it afresh
    with pytest.warns(DeprecationWarning, match=f"memrl.agents.{old} moved to memrl.agents.{new[0]}"):
        module = importlib.import_module(f"memrl.agents.{old}")
    main = importlib.import_module(f"memrl.agents.{new[0]}")
    public = _public(main)
    assert public and all(getattr(module, k) is getattr(main, k) for k in public), old


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_a_module_that_became_a_package_exports_its_old_names(package):
    module = importlib.import_module(f"memrl.agents.{package}")
    assert hasattr(module, "__path__")
    for new in PACKAGES[package]:
        main = importlib.import_module(f"memrl.agents.{package}.{new}")
        names = getattr(main, "__all__", None) or _public(main)
        assert names and all(getattr(module, name) is getattr(main, name) for name in names), (package, new)
    assert all(hasattr(module, name) for name in module.__all__), package


def test_the_old_prompts_package_gives_membuilders_prompts_below_it():
    for name in ("memrl.agents.prompts", "memrl.agents.prompts.membuilder"):
        sys.modules.pop(name, None)
    with pytest.warns(
        DeprecationWarning, match="memrl.agents.prompts.membuilder moved to memrl.agents.membuilder.prompts"
    ):
        from memrl.agents.prompts import membuilder as old
    from memrl.agents.membuilder import prompts

    assert old.agent_messages is prompts.agent_messages


def test_the_new_paths_import_without_a_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        for new in {m for mods in MOVED.values() for m in mods}:
            importlib.import_module(f"memrl.agents.{new}")


def test_a_dotted_old_path_imports_below_its_parent(tmp_path, monkeypatch):
    files = {
        "movedpkg/__init__.py": "",
        "movedpkg/new/__init__.py": "",
        "movedpkg/new/mod.py": "X = object()\n",
    }
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path))
    moved = {"old": ("new.mod",), "old.mod": ("new.mod",)}
    finder = _moved.MovedModules("movedpkg", moved, {"old.mod": {"Y": "X"}})
    monkeypatch.setattr(sys, "meta_path", [*sys.meta_path, finder])
    try:
        with pytest.warns(
            DeprecationWarning, match="movedpkg.old.mod moved to movedpkg.new.mod; import it from there"
        ):
            from movedpkg.old import mod  # type: ignore[import-not-found]
        from movedpkg.new import mod as new  # type: ignore[import-not-found]

        assert mod.X is new.X and mod.Y is new.X
        assert finder.find_spec("movedpkg.new.other") is None and finder.find_spec("other.old") is None
    finally:
        for name in [m for m in sys.modules if m == "movedpkg" or m.startswith("movedpkg.")]:
            sys.modules.pop(name)
