"""HTTP plumbing shared by memrl's servers (memory API, web browser, MCP over HTTP, reward server).

- **Bearer tokens** (:class:`Tokens`): each token has a name and the namespaces it may touch (``*`` =
  all). ``--token NAME=SECRET:ns1,ns2`` on the command line, or a JSON file
  ``{"alice-app": {"token": "...", "namespaces": ["alice"]}}``. No token configured = open server (only
  sensible on loopback; the CLI refuses a non-loopback host without tokens).
- **Limits** (:class:`~memrl.server.limits.Limits`, :mod:`memrl.server.limits`): body sizes (413),
  requests in flight in all (503) and per token (429), long polls, the store threads and their deadline
  (:mod:`memrl.server.offload`).
- **Errors**: every error, a bug's 500 included, is ``{"error": {"type": ..., "message": ...}}`` (plus ``field`` naming the bad
  field, and ``lines`` for an import's line report) with a 4xx/5xx status: malformed JSON 400, bad or
  missing token 401, a namespace outside the token's scope or a cross-origin write 403, unknown id 404,
  a conflict (already exists, cannot undo) 409, a foreign Host 421, too large 413, not JSON 415, wrong
  types or values 422, a tenant's limit 429 with ``Retry-After``, overloaded or database locked 503 with
  ``Retry-After``. Messages never carry a file path, a host or SQL (:func:`memrl.errors.public_message`).
- :class:`ServerThread` runs an ASGI app under uvicorn in a background thread (port 0 = any free port),
  for tests and for ``memrl ui``.

Starlette/FastAPI are imported lazily by the modules that build apps; this one needs only uvicorn for
:class:`ServerThread`.
"""

from __future__ import annotations

import hmac
import json
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memrl.errors import (
    BusyError,
    ConfigError,
    ConflictError,
    LimitError,
    MemrlError,
    NotFoundError,
    StoreError,
    ValidationError,
    public_message,
)
from memrl.server.limits import Limits, LimitsMiddleware
from memrl.server.replies import HTTPError, error_body, json_bytes
from memrl.server.replies import send_json as _send_json

__all__ = [
    "HTTPError", "Limits", "LimitsMiddleware", "Principal", "ServerThread", "Tokens", "error_body", "json_bytes",
    "_send_json",
]  # fmt: skip

#: Status and error type per memrl error class, most specific first.
ERROR_STATUS: tuple[tuple[type[BaseException], int, str], ...] = (
    (NotFoundError, 404, "not_found"),
    (ConflictError, 409, "conflict"),
    (ValidationError, 422, "invalid_request"),
    (ConfigError, 400, "invalid_request"),
    (BusyError, 503, "busy"),
    (LimitError, 429, "too_many_requests"),
    (StoreError, 500, "store_error"),
    (MemrlError, 400, "invalid_request"),
)


def json_response_class() -> Any:
    """Starlette's JSONResponse rendering with :func:`json_bytes` (the response class of memrl's apps)."""
    from fastapi.responses import JSONResponse

    class SafeJSONResponse(JSONResponse):
        def render(self, content: Any) -> bytes:
            return json_bytes(content)

    return SafeJSONResponse


def status_of(exc: BaseException) -> tuple[int, str]:
    for cls, status, kind in ERROR_STATUS:
        if isinstance(exc, cls):
            return status, kind
    return 500, "server_error"


# ---------------------------------------------------------------------------------------------- tokens
@dataclass(frozen=True)
class Principal:
    """Who made a request: the token's name and the namespaces it may touch (``None`` = all)."""

    name: str
    namespaces: frozenset[str] | None

    def allows(self, ns: str) -> bool:
        return self.namespaces is None or ns in self.namespaces

    def check(self, ns: str) -> None:
        if not self.allows(ns):
            raise HTTPError(403, f"this token ({self.name}) may not access namespace {ns!r}", "forbidden")

    @property
    def admin(self) -> bool:
        return self.namespaces is None


OPEN = Principal("anonymous", None)


@dataclass
class Tokens:
    """Bearer tokens and their namespace scopes. Empty = no authentication."""

    by_secret: dict[str, Principal] = field(default_factory=dict)

    @property
    def enabled(self) -> bool:
        return bool(self.by_secret)

    def add(self, name: str, secret: str, namespaces: Iterable[str] | None) -> None:
        if len(secret) < 8:
            raise ConfigError(f"token {name!r} is too short: use at least 8 characters")
        scope = None if namespaces is None or "*" in namespaces else frozenset(namespaces)
        self.by_secret[secret] = Principal(name, scope)

    @classmethod
    def parse(cls, specs: Iterable[str] = (), file: str | Path | None = None) -> Tokens:
        """From ``NAME=SECRET:ns1,ns2`` strings (``:*`` or nothing = every namespace) and/or a JSON file."""
        out = cls()
        for spec in specs:
            name, sep, rest = spec.partition("=")
            if not sep or not name or not rest:
                raise ConfigError(f"--token {spec!r}: write NAME=SECRET:ns1,ns2 (or NAME=SECRET:* for all)")
            secret, _, scope = rest.partition(":")
            out.add(name, secret, None if scope in ("", "*") else [s for s in scope.split(",") if s])
        if file is not None:
            try:
                data = json.loads(Path(file).read_text())
            except (OSError, json.JSONDecodeError) as e:
                raise ConfigError(f"--tokens-file {file}: cannot read it as JSON ({e})") from None
            if not isinstance(data, dict):
                raise ConfigError(
                    f"--tokens-file {file}: expected an object of name -> {{token, namespaces}}"
                )
            for name, entry in data.items():
                if not isinstance(entry, dict) or not isinstance(entry.get("token"), str):
                    raise ConfigError(f"--tokens-file {file}: entry {name!r} needs a string 'token'")
                out.add(name, entry["token"], entry.get("namespaces"))
        return out

    def name_of(self, authorization: str | None) -> str | None:
        """The token's name for this ``Authorization`` header, or None (no tokens, or not a valid one)."""
        if not self.enabled:
            return None
        try:
            return self.principal(authorization).name
        except HTTPError:
            return None

    def principal(self, authorization: str | None) -> Principal:
        """The caller of a request with this ``Authorization`` header; raises 401 when it is not valid."""
        if not self.enabled:
            return OPEN
        if not authorization or not authorization.lower().startswith("bearer "):
            raise HTTPError(401, "missing bearer token: send 'Authorization: Bearer <token>'", "unauthorized",
                            {"WWW-Authenticate": "Bearer"})  # fmt: skip
        given = authorization[7:].strip().encode()
        for secret, who in self.by_secret.items():
            if hmac.compare_digest(secret.encode(), given):
                return who
        raise HTTPError(401, "invalid bearer token", "unauthorized", {"WWW-Authenticate": "Bearer"})


# ---------------------------------------------------------------------------------------------- running
class ServerThread:
    """Run an ASGI app with uvicorn on a background thread; ``base_url`` once started (port 0 = free port).

    with ServerThread(app) as server:
        httpx.get(server.base_url + "/health")
    """

    def __init__(self, app: Any, host: str = "127.0.0.1", port: int = 0) -> None:
        import uvicorn

        self.config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="auto")
        self.server = uvicorn.Server(self.config)
        self.thread = threading.Thread(target=self.server.run, name="memrl-http", daemon=True)
        self.base_url = ""

    def start(self) -> ServerThread:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the HTTP server did not start (see the log above)")
            time.sleep(0.01)
        sock = self.server.servers[0].sockets[0]
        host, port = sock.getsockname()[:2]
        self.base_url = f"http://{host}:{port}"
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)

    def __enter__(self) -> ServerThread:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def is_loopback(host: str) -> bool:
    return host in ("127.0.0.1", "localhost", "::1") or host.startswith("127.")


# ---------------------------------------------------------------------------------------------- FastAPI glue
#: Union branch tags pydantic puts in an error's location (``filters.n.int``): not part of the field's path.
_BRANCH_TAGS = frozenset({"str", "bool", "int", "float", "none", "list[...]", "dict[...]"})


def _where(loc: Iterable[Any]) -> str:
    parts = [str(x) for x in loc]
    parts = [p for p in parts if p not in _BRANCH_TAGS and "[" not in p and not p.startswith("function-")]
    if parts and parts[0] in ("body", "query", "path", "header"):
        kind, rest = parts[0], parts[1:]
        return f"{kind} field '{'.'.join(rest)}'" if rest else f"the {kind}"
    return "'" + ".".join(parts) + "'"


def validation_message(errors: Iterable[dict[str, Any]]) -> tuple[int, str]:
    """A one-line message (and the status: 400 for unparsable JSON, else 422) for pydantic/FastAPI errors."""
    problems, status, seen = [], 422, set()
    # a rule's own message ("is not a finite number") first; one message per field (not one per union branch)
    for err in sorted(errors, key=lambda err: err.get("type") != "value_error"):
        if err.get("type") == "json_invalid":
            status = 400
            ctx = err.get("ctx", {}).get("error", "")
            problems.append(f"malformed JSON body ({ctx})" if ctx else "malformed JSON body")
            continue
        if err.get("type") == "model_attributes_type" and tuple(err.get("loc", ())) == ("body",):
            status = 400
            problems.append("the body must be a JSON object (sent with Content-Type: application/json)")
            continue
        msg = "unknown field" if err.get("type") == "extra_forbidden" else err.get("msg", "invalid")
        where = _where(err.get("loc", ()))
        if where not in seen:
            seen.add(where)
            problems.append(f"{where}: {msg.removeprefix('Value error, ')}")
    return status, "; ".join(problems) or "invalid request"


def install_error_handlers(app: Any) -> None:
    """Every error of a FastAPI app as ``{"error": {"type", "message"}}`` with the right status."""
    from fastapi.exceptions import RequestValidationError
    from starlette.exceptions import HTTPException as StarletteHTTPException

    JSONResponse = json_response_class()  # noqa: N806 (a class)

    def reply(status: int, kind: str, message: str, headers: dict | None = None) -> Any:
        return JSONResponse(error_body(kind, message), status_code=status, headers=headers)

    @app.exception_handler(HTTPError)
    async def _http_error(request: Any, exc: HTTPError) -> Any:
        return reply(exc.status, exc.kind, exc.message, exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Any, exc: RequestValidationError) -> Any:
        errors = sorted(exc.errors(), key=lambda err: err.get("type") != "value_error")
        status, message = validation_message(errors)
        body = error_body("invalid_json" if status == 400 else "invalid_request", message)
        loc = [str(x) for x in (errors[0].get("loc", ()) if errors else ())]
        if status == 422 and len(loc) > 1:
            body["error"]["field"] = loc[1]  # the first bad field (loc[0] is body/query/path)
        return JSONResponse(body, status_code=status)

    @app.exception_handler(MemrlError)
    async def _memrl(request: Any, exc: MemrlError) -> Any:
        status, kind = status_of(exc)
        store = getattr(getattr(request.app.state, "memory", None), "store", None)
        message = public_message(exc, (getattr(store, "path", ""),))
        body = error_body(kind, message)
        if getattr(exc, "field", None):
            body["error"]["field"] = exc.field
        if getattr(exc, "lines", None):
            body["error"]["lines"] = exc.lines
        headers = None
        if status in (429, 503):
            headers = {"Retry-After": str(max(1, round(getattr(exc, "retry_after", 1))))}
        return JSONResponse(body, status_code=status, headers=headers)

    @app.exception_handler(StarletteHTTPException)
    async def _starlette(request: Any, exc: StarletteHTTPException) -> Any:
        kind = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "invalid_request")
        detail = exc.detail if isinstance(exc.detail, str) else json.dumps(exc.detail)
        if exc.status_code == 404 and detail == "Not Found":
            detail = f"no such route: {request.method} {request.url.path}"
        return reply(exc.status_code, kind, detail, getattr(exc, "headers", None))

    @app.exception_handler(Exception)
    async def _bug(request: Any, exc: Exception) -> Any:
        # Starlette sends this from its outermost middleware, then re-raises so the server logs the traceback.
        return reply(
            500, "server_error", f"internal error ({type(exc).__name__}); the server's log has the details"
        )


def bearer_dependency(tokens: Tokens) -> Any:
    """A FastAPI dependency giving the request's :class:`Principal` (401 on a missing or wrong token)."""
    from fastapi import Request

    async def principal(request: Request) -> Principal:
        return tokens.principal(request.headers.get("authorization"))

    principal.__annotations__ = {"request": Request, "return": Principal}  # real types, not strings
    return principal
