"""The layering of memrl's packages holds: each package imports only the layers below it, and no module
imports itself back through a circle.

Every ``import`` statement of every module under ``memrl/`` is read with :mod:`ast`, those inside functions
and under ``if TYPE_CHECKING:`` included: a late import is still an arrow between two modules. The order is
the one docs/design.md shows (the test checks that the page says the same). A new package fails here until
it is given a layer.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: Bottom first. A package may import packages of lower layers, never one of its own layer (the packages
#: of one layer are independent of each other) nor of a higher one. ``memrl`` is the package's own
#: ``__init__`` (``__version__`` and the lazy ``Memory``/``AsyncMemory`` facade); ``_moved`` (the finder of
#: old module paths), ``errors``, ``config``, ``datetimes``, ``loading`` and ``telemetry`` are the single
#: modules at the top of the tree.
LAYERS: list[set[str]] = [
    {"_moved", "errors"},
    {"config", "datetimes", "loading", "telemetry"},
    {"data", "llm", "memory"},
    {"memrl", "scoring", "tools"},
    {"rewards"},
    {"agents"},
    {"eval"},
    {"integrations", "server", "train"},
    {"cli"},
]


def layer_line(layers: list[set[str]] = LAYERS) -> str:
    """The order as docs/design.md writes it: ``errors < config | loading < ...``."""
    return " < ".join(" | ".join(sorted(layer)) for layer in layers)


def modules(package_dir: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every ``.py`` under ``package_dir`` (a package is its ``__init__``)."""
    out = {}
    for path in sorted(package_dir.rglob("*.py")):
        parts = list(path.relative_to(package_dir.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def imports(name: str, path: Path, known: dict[str, Path]) -> list[tuple[int, str]]:
    """(line, module) for every import of ``path`` that lands in the tree, resolved to the deepest module
    it names (``from memrl.llm import base`` -> ``memrl.llm.base``; ``from memrl.llm import create_llm`` ->
    ``memrl.llm``), relative imports included."""
    top = name.split(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
                base = base[: len(base) - node.level + 1]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            targets = [f"{module}.{a.name}" if f"{module}.{a.name}" in known else module for a in node.names]
        else:
            continue
        for target in targets:
            if target.split(".")[0] != top:
                continue
            while target not in known and "." in target:  # an attribute of a module, not a module
                target = target.rpartition(".")[0]
            if target in known and target != name:
                found.append((node.lineno, target))
    return list(dict.fromkeys(found))  # ``from m import a, b`` is one arrow


def package_of(module: str) -> str:
    """``memrl.eval.qa`` -> ``eval``; ``memrl.errors`` -> ``errors``; ``memrl`` -> ``memrl``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def layering_violations(package_dir: Path, layers: list[set[str]] = LAYERS) -> list[str]:
    """One line per import that runs sideways or up the layers, and per package without a layer."""
    rank = {pkg: i for i, layer in enumerate(layers) for pkg in layer}
    known = modules(package_dir)
    bad = sorted({f"package {package_of(m)!r} has no layer" for m in known if package_of(m) not in rank})
    for name, path in known.items():
        here = package_of(name)
        for line, target in imports(name, path, known):
            there = package_of(target)
            if here == there or here not in rank or there not in rank:
                continue
            if rank[there] >= rank[here]:
                way = "sideways" if rank[there] == rank[here] else "up"
                rel = path.relative_to(package_dir.parent)
                bad.append(f"{rel}:{line} imports {target} ({here} -> {there}: {way})")
    return bad


def import_circles(package_dir: Path) -> list[list[str]]:
    """Every set of two or more modules that import each other round a circle (Tarjan's algorithm)."""
    known = modules(package_dir)
    graph = {name: sorted({t for _, t in imports(name, path, known)}) for name, path in known.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return circles


# ---------------------------------------------------------------------------------------------- memrl


def test_every_package_imports_only_the_layers_below_it():
    bad = layering_violations(ROOT / "memrl")
    assert not bad, "imports against the layers (docs/design.md):\n" + "\n".join(bad)


def test_no_module_imports_itself_through_a_circle():
    circles = import_circles(ROOT / "memrl")
    assert not circles, "import circles (move the shared piece down):\n" + "\n".join(map(str, circles))


def test_design_page_shows_the_same_order():
    assert layer_line() in (ROOT / "docs" / "design.md").read_text(), (
        f"docs/design.md must show the layer order the test holds: {layer_line()}"
    )


# ---------------------------------------------------------------------------------------------- memrl.memory

#: The sub-packages of memrl.memory, bottom first (docs/design.md): the same rule as the packages above.
#: ``memory`` is memrl.memory's own ``__init__`` (its lazily imported public surface).
MEMORY_LAYERS: list[set[str]] = [
    {"records"},
    {"analysis"},
    {"embedders"},
    {"store"},
    {"index", "jobs"},
    {"backends"},
    {"search"},
    {"facade"},
    {"memory"},
]


def memory_package_of(module: str, path: Path | None = None) -> str:
    """``memrl.memory.search.hybrid`` -> ``search``; ``memrl.memory`` and a module beside its ``__init__``
    (``memrl.memory._moved``) -> ``memory``."""
    parts = module.split(".")
    if len(parts) == 3 and path is not None and path.name != "__init__.py":
        return "memory"
    return parts[2] if len(parts) > 2 else "memory"


def memory_violations(package_dir: Path, layers: list[set[str]] = MEMORY_LAYERS) -> list[str]:
    """Imports between memrl.memory's sub-packages against their order, sub-packages without a layer, and
    imports from outside memrl.memory that reach past its surface (``memrl.memory`` or a sub-package's
    ``__init__``) into a module."""
    rank = {pkg: i for i, layer in enumerate(layers) for pkg in layer}
    known = modules(package_dir)
    inside = {m for m in known if m == "memrl.memory" or m.startswith("memrl.memory.")}
    sub = {m: memory_package_of(m, known[m]) for m in inside}
    bad = sorted({f"sub-package {sub[m]!r} has no layer" for m in inside if sub[m] not in rank})
    interfaces = {m for m in inside if known[m].name == "__init__.py"}
    for name, path in known.items():
        rel = path.relative_to(package_dir.parent)
        for line, target in imports(name, path, known):
            if target not in inside:
                continue
            if name not in inside:
                if target not in interfaces:
                    bad.append(f"{rel}:{line} imports {target}: outside memrl.memory, import its surface")
                continue
            here, there = sub[name], sub[target]
            if here == there or here not in rank or there not in rank:
                continue
            if rank[there] >= rank[here]:
                way = "sideways" if rank[there] == rank[here] else "up"
                bad.append(f"{rel}:{line} imports {target} (memory.{here} -> memory.{there}: {way})")
    return bad


def test_memory_sub_packages_import_only_those_below_and_others_only_its_surface():
    bad = memory_violations(ROOT / "memrl")
    assert not bad, "imports against memrl.memory's seams (docs/design.md):\n" + "\n".join(bad)


def test_design_page_shows_the_memory_order():
    line = layer_line(MEMORY_LAYERS)
    assert line in (ROOT / "docs" / "design.md").read_text(), f"docs/design.md must show: {line}"


def test_nothing_outside_the_store_layers_writes_sql():
    """Raw SQL on the store's tables lives in memory/store, memory/jobs and memory/backends only (the LLM and
    embedding caches keep their own SQLite files)."""
    own_files = {"memrl/llm/cache.py", "memrl/memory/embedders/providers.py"}
    allowed = ("memrl/memory/store/", "memrl/memory/jobs/", "memrl/memory/backends/")
    sql = re.compile(r"\b(SELECT|INSERT INTO|UPDATE \w+ SET|DELETE FROM)\b.*\b(FROM|VALUES|SET|WHERE)\b")
    bad = []
    for path in sorted((ROOT / "memrl").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel in own_files or rel.startswith(allowed):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and sql.search(node.value):
                bad.append(f"{rel}:{node.lineno}: {node.value.strip()[:60]!r}")
    assert not bad, "raw SQL outside the store layers:\n" + "\n".join(bad)


def test_memory_checker_finds_upward_and_past_the_surface_imports(tmp_path):
    pkg = _tree(
        tmp_path,
        {
            "__init__.py": "",
            "memory/__init__.py": "",
            "memory/records/__init__.py": "",
            "memory/records/types.py": "from memrl.memory.store.base import S\n",  # up
            "memory/store/__init__.py": "from memrl.memory.store.base import S\n",
            "memory/store/base.py": "from memrl.memory.records.types import T\n",  # down: allowed
            "agents/__init__.py": "",
            "agents/a.py": "from memrl.memory.store import S\nfrom memrl.memory.store.base import S\n",
        },
    )
    pkg = pkg.rename(tmp_path / "memrl")
    assert memory_violations(pkg, [{"records"}, {"store"}, {"memory"}]) == [
        "memrl/agents/a.py:2 imports memrl.memory.store.base: outside memrl.memory, import its surface",
        "memrl/memory/records/types.py:1 imports memrl.memory.store.base (memory.records -> memory.store: up)",
    ]


# ---------------------------------------------------------------------------------------------- the checker


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = tmp_path / "pkg" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path / "pkg"


def test_checker_finds_upward_sideways_late_and_unplaced_imports(tmp_path):
    pkg = _tree(
        tmp_path,
        {
            "__init__.py": "",
            "low/__init__.py": "",
            "low/a.py": "def f():\n    from pkg.high.b import g\n",  # up, inside a function
            "mid/__init__.py": "",
            "mid/m.py": "from pkg.side import s\n",  # sideways
            "side/__init__.py": "",
            "side/s.py": "from ..low import a\n",  # down, relative: allowed
            "high/__init__.py": "",
            "high/b.py": "import pkg.low.a\nfrom pkg.mid import m\n",  # down: allowed
            "stray/__init__.py": "",
        },
    )
    layers = [{"pkg"}, {"low"}, {"mid", "side"}, {"high"}]
    bad = layering_violations(pkg, layers)
    assert bad == [
        "package 'stray' has no layer",
        "pkg/low/a.py:2 imports pkg.high.b (low -> high: up)",
        "pkg/mid/m.py:1 imports pkg.side.s (mid -> side: sideways)",
    ]
    assert layering_violations(pkg, [{"pkg"}, {"low"}, {"side"}, {"mid"}, {"high"}, {"stray"}]) == [
        "pkg/low/a.py:2 imports pkg.high.b (low -> high: up)"
    ]


def test_checker_finds_a_circle_through_a_type_checking_import(tmp_path):
    pkg = _tree(
        tmp_path,
        {
            "__init__.py": "",
            "a.py": "from pkg.b import B\n",
            "b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.a import A\n",
            "c.py": "from pkg import a\n",
        },
    )
    assert import_circles(pkg) == [["pkg.a", "pkg.b"]]
