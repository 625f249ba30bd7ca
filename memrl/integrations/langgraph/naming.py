"""LangGraph namespace tuples and keys as memrl namespace names and item ids, reversibly.

A namespace tuple becomes ``ROOT/label/label``: each label escaped so that the separator, ``%``, ``.`` and
control characters (which memrl's names refuse) cannot occur in it (``%`` and its two hex digits per UTF-8
byte), so ``("a", "b.c")``, ``("a.b", "c")`` and ``("a/b", "c")`` are three different names and
:func:`decode_namespace` gives the tuple back. ``ROOT`` keeps the store's LangGraph namespaces apart from
the other namespaces of the memrl store. A name longer than memrl allows (200 characters) is refused.

A key is the item's id when memrl takes it as one (1-64 characters, no control character, not of the
store's reserved form ``__name__``, not starting with ``~``); any other key gets the id ``~`` + 40 hex
digits of its SHA-256. The key itself is kept in the item (:mod:`.items`), so it always comes back exact.
"""

from __future__ import annotations

import hashlib
import re
from urllib.parse import unquote

from memrl.errors import ValidationError

SEP = "/"
MAX_NAME = 200
_ESCAPE = re.compile(r"[%./\x00-\x1f\x7f-\x9f]")
_PLAIN_ID = re.compile(r"^(?!~)(?!__.*__$)[^\x00-\x1f\x7f-\x9f]{1,64}$", re.DOTALL)

__all__ = ["decode_namespace", "encode_namespace", "item_id"]


def _escape(label: str) -> str:
    return _ESCAPE.sub(lambda m: "".join(f"%{b:02X}" for b in m.group(0).encode()), label)


def _unescape(text: str) -> str:
    # every "%" of an encoded label starts an escape (a literal one was escaped), so unquote is exact
    return unquote(text, errors="strict")


def check_root(root: str) -> str:
    if not root or _ESCAPE.search(root):
        raise ValidationError(
            f"root {root!r} must be a non-empty name without '/', '.', '%' or control characters",
            field="root",
        )
    return root


def encode_namespace(root: str, namespace: tuple[str, ...]) -> str:
    """The memrl namespace name of a LangGraph namespace tuple (``()``: the root's own prefix)."""
    for label in namespace:
        if not isinstance(label, str) or not label:
            raise ValidationError(
                f"namespace labels must be non-empty strings, got {label!r} in {namespace!r}"
            )
    name = SEP.join([root, *(_escape(label) for label in namespace)])
    if len(name) > MAX_NAME:
        raise ValidationError(
            f"namespace {namespace!r} is {len(name)} characters as a memrl namespace name ({name[:40]}...); "
            f"memrl allows {MAX_NAME}: use shorter labels",
            field="namespace",
        )
    return name


def decode_namespace(root: str, name: str) -> tuple[str, ...] | None:
    """The tuple :func:`encode_namespace` made ``name`` from, or None if ``name`` is not under ``root``."""
    head, sep, rest = name.partition(SEP)
    if head != root or not sep:
        return None
    return tuple(_unescape(label) for label in rest.split(SEP))


def item_id(key: str) -> str:
    """The memrl item id of a LangGraph key."""
    if _PLAIN_ID.match(key):
        return key
    return "~" + hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:40]
