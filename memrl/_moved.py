"""Old module paths kept importable for one release after a package was cut into sub-packages.

A package that moved its modules names them in a table (old module -> the modules its names now live in,
the main one first) and installs a finder for it from its ``__init__``::

    _moved.install("memrl.memory", MOVED, RENAMED, also="memrl.memory")

Then ``import memrl.memory.types`` still works and warns (``DeprecationWarning``) with the new path; the
module it gives holds the names of the module(s) the old one was split into, and the old names of renamed
things (``RENAMED``: old module -> {old name: new name}). An old name may be dotted (``prompts.membuilder``):
its parent (``prompts``, in the table too) is then given as a package, so the child can be imported below it.
The finder runs after the ordinary ones, so a module that exists is never shadowed. It imports nothing of
memrl (the lowest layer: any package may use it).
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
import warnings
from collections.abc import Mapping
from typing import Any


class MovedModules:
    """A meta path finder and its loader for one package's old modules (the protocols by their methods:
    importing ``importlib.abc`` for its base classes cost every ``memrl`` command ~40 ms)."""

    def __init__(
        self,
        package: str,
        moved: Mapping[str, tuple[str, ...]],
        renamed: Mapping[str, Mapping[str, str]] | None = None,
        also: str | None = None,
    ) -> None:
        self.package, self.moved, self.renamed, self.also = package, moved, renamed or {}, also

    def _old(self, fullname: str) -> str | None:
        """``memrl.memory.types`` -> ``types`` when it is one of the package's old modules."""
        head, dot, old = fullname.partition(f"{self.package}.")
        return old if not head and dot and old in self.moved else None

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        old = self._old(fullname)
        if old is None:
            return None
        parent = any(name.startswith(f"{old}.") for name in self.moved)
        return importlib.util.spec_from_loader(fullname, self, is_package=parent)

    def create_module(self, spec: Any) -> types.ModuleType:
        old = self._old(spec.name)
        assert old is not None
        new = [f"{self.package}.{m}" for m in self.moved[old]]
        where = f" (or from {self.also})" if self.also else ""
        warnings.warn(f"{spec.name} moved to {new[0]}; import it from there{where}", DeprecationWarning,
                      stacklevel=2)  # fmt: skip
        module = types.ModuleType(spec.name, f"Deprecated: moved to {new[0]}.")
        for name in reversed(new):  # the main module's names win
            module.__dict__.update(
                {k: v for k, v in vars(importlib.import_module(name)).items() if not k.startswith("__")}
            )
        for was, now in self.renamed.get(old, {}).items():
            module.__dict__[was] = module.__dict__[now]
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        """Everything was done in :meth:`create_module`."""


def install(
    package: str,
    moved: Mapping[str, tuple[str, ...]],
    renamed: Mapping[str, Mapping[str, str]] | None = None,
    *,
    also: str | None = None,
) -> None:
    """Add ``package``'s finder once (idempotent). ``also``: a second place to import from, named in the
    warning."""
    if not any(isinstance(f, MovedModules) and f.package == package for f in sys.meta_path):
        sys.meta_path.append(MovedModules(package, moved, renamed, also))


def exports(package: str, names: Mapping[str, str]) -> Any:
    """A module ``__getattr__`` for a module that became a package: ``names`` maps each name it gave to the
    sub-module (of ``package``) that defines it now, imported on first use."""

    def __getattr__(name: str) -> Any:
        if name not in names:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{names[name]}"), name)

    return __getattr__
