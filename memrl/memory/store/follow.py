"""Per-namespace caches that follow the store, written once.

Search keeps much per namespace in the process (dense matrices, BM25 postings, each item's signals, terms
and entities, the reranker's layout). Each such value is built for one *generation* of its namespace (a
reset, a drop or a clone onto it starts a new one: rows vanished without history) and one *key* (the
options it was built with); it is replaced when either changes, and between replacements its owner brings
it forward from the rows changed since the value's own ``seq`` (the history sequence number it reflects).
:class:`Following` is that rule: ``current(ns, key)`` gives the value for the namespace's generation now,
building a new one when needed; what "bringing forward" means is the owner's.

    >>> from types import SimpleNamespace
    >>> store = SimpleNamespace(generation=lambda ns: 0)
    >>> built = Following(store, lambda ns, gen, key: [ns, gen, key])
    >>> built.current("a", key="x"), built.current("a", key="x") is built.current("a", key="x")
    (['a', 0, 'x'], True)
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator, Mapping
from typing import Any, Generic, TypeVar

V = TypeVar("V")

#: ``build(namespace, generation, key)``: a new value for that generation of the namespace.
Build = Callable[[str, int, Any], V]


class Following(Mapping[str, V], Generic[V]):
    """One value per namespace, valid for one generation of it and one key. As a mapping it holds the
    current values (no store read): ``following.get(ns)`` peeks, :meth:`current` builds when needed."""

    def __init__(self, store: Any, build: Build[V]) -> None:
        self.store = store
        self.build = build
        self._held: dict[str, tuple[int, Hashable, V]] = {}

    def current(self, ns: str, key: Hashable = None, *, build: Callable[[int], V] | None = None) -> V:
        """The value of ``ns`` for its generation now and ``key``: the one held, or a new one (``build``
        given here replaces the default builder for this call: it takes the generation)."""
        generation = self.store.generation(ns)
        held = self._held.get(ns)
        if held is not None and held[0] == generation and held[1] == key:
            return held[2]
        value = build(generation) if build is not None else self.build(ns, generation, key)
        self._held[ns] = (generation, key, value)
        return value

    def forget(self, ns: str) -> None:
        """Drop what is held of ``ns`` (it was replaced by an import, a reset, a clone onto it)."""
        self._held.pop(ns, None)

    def clear(self) -> None:
        self._held.clear()

    def __getitem__(self, ns: str) -> V:
        return self._held[ns][2]

    def __iter__(self) -> Iterator[str]:
        return iter(self._held)

    def __len__(self) -> int:
        return len(self._held)
