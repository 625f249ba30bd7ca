"""Checks on what goes into the store, and small helpers on item content.

:class:`ValidationMixin` is part of :class:`~memrl.memory.store.base.Store`: every write path checks its
input here first (content, type, namespace name, metadata) and raises
:class:`~memrl.errors.ValidationError` with a message saying what to change, before anything is written.
"""

from __future__ import annotations

import hashlib
from typing import Any

from memrl.errors import ValidationError
from memrl.memory.records import models as S
from memrl.memory.records import values as V
from memrl.memory.records.types import ITEM_TYPES, MemoryType
from memrl.memory.store.expiry import EXPIRES_AT, check_expiry

#: Metadata a builder derives from an item's content (its plain text beside an indexed text, its own vector,
#: being lexical-only): an edit of the content makes them wrong, so they are dropped with it.
CONTENT_DERIVED_KEYS = ("text", "vector_key", "dense")


def strip_derived(metadata: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in metadata.items() if k not in CONTENT_DERIVED_KEYS}


def content_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def new_id(namespace: str, content: str, attempt: int = 0) -> str:
    """A short id (48 bits) for a new memory: cheap for a model to copy, and derived from the namespace,
    the content and an attempt number, so the same sequence of writes gives the same ids in every run.

    Random ids made runs with a local model irreproducible: the ids are shown to the model, a random
    hex string tokenises to a varying number of tokens, and the prompt (so the greedy output) changed
    from run to run. The store takes the first attempt whose id is not in the namespace yet.
    """
    key = f"{namespace}\x00{attempt}\x00{content}".encode()
    return hashlib.sha256(key).hexdigest()[:12]


class ValidationMixin:
    """Input checks for :class:`~memrl.memory.store.base.Store` (uses its ``max_content_chars``)."""

    max_content_chars: int

    def check_content(self, content: Any) -> str:
        if not isinstance(content, str):
            raise ValidationError(f"content must be a string, got {type(content).__name__}", field="content")
        if not content.strip():
            raise ValidationError("content is empty", field="content")
        if len(content) > self.max_content_chars:
            raise ValidationError(
                f"content has {len(content)} characters, more than the limit of {self.max_content_chars}; "
                "split it into smaller memories",
                field="content",
            )
        problem = V.text_problem(content)
        if problem:
            raise ValidationError(f"content {problem}", field="content")
        return content

    @staticmethod
    def check_text(value: Any, field: str, *, max_chars: int | None = None) -> str:
        """Free text the store keeps or looks up (core memory, keys, a query, an id to read): a string that
        follows :func:`memrl.memory.records.values.text_problem`. ``field`` names it (``memory_id``: "memory id")."""
        what = field.replace("_", " ")
        if not isinstance(value, str):
            raise ValidationError(f"{what} must be a string, got {type(value).__name__}", field=field)
        problem = V.text_problem(value)
        if problem:
            raise ValidationError(f"{what} {problem}", field=field)
        if max_chars is not None and len(value) > max_chars:
            raise ValidationError(f"{what} has {len(value)} characters; at most {max_chars}", field=field)
        return value

    @staticmethod
    def check_id(memory_id: Any) -> str:
        """The id of a new item (not one of the store's own, :func:`memrl.memory.records.values.reserved_id`)."""
        return S.check("id", memory_id, S.MemoryId)

    @staticmethod
    def check_evidence(evidence: Any) -> tuple[str, ...]:
        """A list of evidence ids (a bare string is refused: it is not a list of one-character ids)."""
        if isinstance(evidence, tuple):
            evidence = list(evidence)
        return tuple(S.check("evidence", evidence, S.Evidence))

    @staticmethod
    def check_session(session: Any) -> str | None:
        return None if session is None else S.check("session", session, S.Session)

    @staticmethod
    def check_type(value: MemoryType | str) -> MemoryType:
        try:
            t = MemoryType.parse(value)
        except (ValueError, TypeError, AttributeError) as e:
            raise ValidationError(f"type: {e}", field="type") from None
        if t not in ITEM_TYPES:
            raise ValidationError(
                "core memory is one text block per namespace, not an item: use the core memory operations "
                f"(append/replace/rewrite); item types are {', '.join(x.value for x in ITEM_TYPES)}"
            )
        return t

    @staticmethod
    def _check_namespace(ns: Any) -> str:
        return S.check("namespace", ns, S.Namespace)

    @staticmethod
    def _check_metadata(metadata: Any) -> dict[str, Any]:
        if metadata is None:
            return {}
        if not isinstance(metadata, dict):
            raise ValidationError(
                f"metadata must be a JSON object (dict), got {type(metadata).__name__}", field="metadata"
            )
        checked = S.check("metadata", metadata, S.Metadata)
        if EXPIRES_AT in checked:
            checked[EXPIRES_AT] = check_expiry(checked[EXPIRES_AT])
        return checked
