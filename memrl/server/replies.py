"""The bytes every memrl server answers with: the JSON error body, JSON that survives any stored string, and
a bare ASGI JSON reply (for middleware that answers before an app runs)."""

from __future__ import annotations

import json
from typing import Any


class HTTPError(Exception):
    """An error with an HTTP status, rendered as the JSON error body."""

    def __init__(self, status: int, message: str, kind: str = "invalid_request", headers: dict | None = None):
        super().__init__(message)
        self.status, self.message, self.kind, self.headers = status, message, kind, headers or {}


def error_body(kind: str, message: str) -> dict[str, Any]:
    return {"error": {"type": kind, "message": message}}


def json_bytes(payload: Any, *, compact: bool = True) -> bytes:
    """``payload`` as UTF-8 JSON; a string UTF-8 cannot encode (a lone surrogate stored before the store
    refused them) is sent escaped (``\\ud800``) instead of failing the response."""
    seps = (",", ":") if compact else None
    try:
        return json.dumps(payload, ensure_ascii=False, separators=seps).encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(payload, separators=seps).encode("ascii")


async def send_json(send: Any, status: int, payload: dict, headers: dict | None = None) -> None:
    """A whole JSON response through ASGI ``send``."""
    body = json_bytes(payload)
    hdrs = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    hdrs += [(k.lower().encode(), str(v).encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": hdrs})
    await send({"type": "http.response.body", "body": body})
