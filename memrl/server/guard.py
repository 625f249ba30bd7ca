"""What keeps a web page from driving a memrl server through the visitor's browser (docs/service.md).

A page on any site can make the browser send "simple" cross-origin requests without asking the server
first (GET/POST with a ``text/plain``, form or multipart body): it cannot read the answer, but the write
happens. And DNS rebinding lets a foreign name resolve to 127.0.0.1, so the attacker's page becomes
same-origin with a loopback server. :class:`BrowserGuard` (ASGI middleware) refuses both:

- **Host**: every request must name an allowed host and port (the bound address or, when it is loopback,
  the loopback names, with the port the server listens on; the host and port of an ``--allowed-origin``):
  a rebound name, or this server reached under another port, gets 421 before any route runs.
- **Origin / Sec-Fetch-Site** on every state-changing request (POST, PUT, PATCH, DELETE): an ``Origin``
  must be the server's own (scheme-less host:port equal to the ``Host``) or listed in
  ``--allowed-origin``; without ``Origin``, a ``Sec-Fetch-Site`` other than ``same-origin``/``none`` is
  refused. Non-browser clients (curl, SDKs) send neither and pass. Refusal: 403.
- **JSON bodies only** on the JSON API (``/v1``, ``/mcp``): a state-changing request whose body is not
  ``application/json`` (``application/x-ndjson`` for imports) gets 415, so a cross-origin form can never
  reach it (a JSON content type makes the browser ask first, and the server does not answer yes).
- **Headers** on every response: ``X-Frame-Options: DENY`` and a Content-Security-Policy with
  ``frame-ancestors 'none'`` (no clickjacking), scripts limited to the page's own (by hash),
  ``form-action 'self'``, ``nosniff``, ``Referrer-Policy: same-origin``.

CSRF tokens (:class:`CsrfTokens`) protect the browser's forms on top: each form carries an HMAC of the
visitor's session (the login cookie, or nothing in no-token mode) under a key made when the server
starts; the form handlers refuse a missing or wrong one.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from memrl.server.http import _send_json, error_body

UNSAFE = frozenset({"POST", "PUT", "PATCH", "DELETE"})
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")
JSON_TYPES = frozenset({"application/json"})
IMPORT_TYPES = frozenset(
    {"application/json", "application/x-ndjson", "application/jsonl", "application/json-seq"}
)


def _hostname(netloc: str) -> str:
    """``host`` of ``host:port`` / ``[v6]:port`` (lower-case, no brackets)."""
    netloc = netloc.strip().lower()
    if netloc.startswith("["):
        return netloc[1 : netloc.find("]")] if "]" in netloc else netloc
    return netloc.rsplit(":", 1)[0] if netloc.count(":") == 1 else netloc


def _host_port(netloc: str) -> tuple[str, int | None]:
    """(host, port or None) of a ``Host`` header (``host``, ``host:port``, ``[v6]:port``)."""
    netloc = netloc.strip().lower()
    if netloc.startswith("["):
        host, _, rest = netloc[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
    elif netloc.count(":") == 1:
        host, port = netloc.split(":")
    else:
        host, port = netloc, ""
    return host, int(port) if port.isdigit() and len(port) <= 5 else (None if not port else -1)


def _netloc(origin: str) -> tuple[str, str] | None:
    """(scheme, host:port with the default port made explicit) of an origin, or None if malformed."""
    try:
        parts = urlsplit(origin)
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return None
    port = port or (443 if parts.scheme == "https" else 80)
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return parts.scheme, f"{host}:{port}"


@dataclass
class Policy:
    """Which hosts and origins a server accepts (see the module docstring)."""

    hosts: frozenset[str]
    origins: frozenset[str] = frozenset()  # normalised "scheme://host:port"
    any_host: bool = False

    @classmethod
    def for_server(cls, bind_host: str, allowed_origins: Iterable[str] = ()) -> Policy:
        """The policy of a server bound to ``bind_host``: that host, the loopback names if it is loopback,
        and the hosts of ``allowed_origins``. A wildcard bind (0.0.0.0, ::) accepts the loopback names and
        the allowed origins' hosts only: list the names clients use with ``--allowed-origin``."""
        hosts = set(LOOPBACK_NAMES)  # harmless when not bound there: a rebound name never equals them
        if bind_host not in ("0.0.0.0", "::", ""):
            hosts.add(_hostname(bind_host) if not bind_host.startswith("[") else bind_host[1:-1])
        origins = set()
        for o in allowed_origins:
            n = _netloc(o)
            if n is None:
                raise ValueError(f"--allowed-origin {o!r}: write it as scheme://host[:port]")
            origins.add(f"{n[0]}://{n[1]}")
            hosts.add(_hostname(n[1]))
        return cls(frozenset(hosts), frozenset(origins))

    def host_ok(self, host_header: str | None, server_port: int | None = None) -> bool:
        """Whether ``host_header`` names this server: one of its host names with the port it listens on
        (``server_port``; a port-less name means 80), or the host and port of an allowed origin. A request
        naming another port reached this server through something that forwarded it: refused as well."""
        if self.any_host:
            return True
        if host_header is None:
            return False
        host, port = _host_port(host_header)
        if host in self.hosts and (server_port is None or (port or 80) == server_port):
            return True
        for origin in self.origins:
            scheme, _, netloc = origin.partition("://")
            if _host_port(netloc) == (host, port or (443 if scheme == "https" else 80)):
                return True
        return False

    def origin_ok(self, origin: str, host_header: str) -> bool:
        n = _netloc(origin)
        if n is None:
            return False
        if f"{n[0]}://{n[1]}" in self.origins:
            return True
        own = _netloc(f"{n[0]}://{host_header}")
        return own is not None and own[1] == n[1]


def _csp(script_hashes: Iterable[str], *, own_files: bool = False) -> str:
    """The Content-Security-Policy: scripts only the inline ones with these hashes; ``own_files``: scripts
    and style sheets from this server's own files too, and no inline script at all (the API reference page,
    :mod:`memrl.server.apidocs`, which runs Swagger UI from files the server serves)."""
    scripts = " ".join(f"'sha256-{h}'" for h in script_hashes) or "'none'"
    scripts, styles = ("'self'", "'self' 'unsafe-inline'") if own_files else (scripts, "'unsafe-inline'")
    return (
        f"default-src 'none'; script-src {scripts}; style-src {styles}; img-src 'self' data:; "
        "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    )


#: The API reference page's policy (it sends it itself: the guard adds its own only where a page has none).
OWN_FILES_CSP = _csp((), own_files=True)


@dataclass
class BrowserGuard:
    """ASGI middleware enforcing :class:`Policy` (see the module docstring). ``json_prefixes``: paths of
    JSON routes (bodies must be JSON); ``import_suffix``: paths ending so take JSON lines."""

    app: Any
    policy: Policy
    json_prefixes: tuple[str, ...] = ("/v1/", "/mcp")
    import_suffix: str = "/import"
    script_hashes: tuple[str, ...] = ()
    _headers: list[tuple[bytes, bytes]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._headers = [
            (b"x-frame-options", b"DENY"),
            (b"content-security-policy", _csp(self.script_hashes).encode()),
            (b"x-content-type-options", b"nosniff"),
            (b"referrer-policy", b"same-origin"),
        ]

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers: dict[bytes, bytes] = {}
        for k, v in scope.get("headers") or []:
            headers.setdefault(k, v)
        host = headers.get(b"host", b"").decode("latin-1") or None

        async def secured(message: dict) -> None:
            if message["type"] == "http.response.start":
                have = {k.lower() for k, _ in message.get("headers", [])}
                message = {**message, "headers": [*message.get("headers", []),
                                                  *(h for h in self._headers if h[0] not in have)]}  # fmt: skip
            await send(message)

        server = scope.get("server")
        port = server[1] if server and len(server) > 1 and isinstance(server[1], int) else None
        refusal = self.check(scope["method"], scope.get("path", ""), host, headers, port)
        if refusal is not None:
            status, kind, message = refusal
            return await _send_json(secured, status, error_body(kind, message))
        await self.app(scope, receive, secured)

    def check(
        self, method: str, path: str, host: str | None, headers: dict[bytes, bytes], port: int | None = None
    ) -> tuple | None:
        """(status, error type, message) when the request is refused, else None (``port``: the one the server
        listens on)."""
        if not self.policy.host_ok(host, port):
            return (
                421,
                "bad_host",
                (
                    f"host {host!r} is not served here (DNS rebinding?); allowed: "
                    f"{', '.join(sorted(self.policy.hosts))}{f' on port {port}' if port else ''} "
                    "(add one with --allowed-origin)"
                ),
            )
        if method not in UNSAFE:
            return None
        origin = headers.get(b"origin")
        if origin is not None:
            o = origin.decode("latin-1")
            if not self.policy.origin_ok(o, host or ""):
                return (
                    403,
                    "cross_origin",
                    (f"cross-origin {method} from {o!r} refused; allow an origin with --allowed-origin"),
                )
        else:
            site = headers.get(b"sec-fetch-site", b"").decode("latin-1")
            if site and site not in ("same-origin", "none"):
                return 403, "cross_origin", f"{site} {method} refused (Sec-Fetch-Site)"
        if path.startswith(self.json_prefixes):
            ctype = headers.get(b"content-type", b"").decode("latin-1").split(";")[0].strip().lower()
            allowed = IMPORT_TYPES if path.endswith(self.import_suffix) else JSON_TYPES
            if ctype:
                if ctype not in allowed:
                    return (
                        415,
                        "unsupported_media_type",
                        (f"{method} {path} takes {' or '.join(sorted(allowed))}, not {ctype!r}"),
                    )
            elif _has_body(headers):
                return (
                    415,
                    "unsupported_media_type",
                    f"{method} {path}: a body needs Content-Type application/json",
                )
        return None


def _has_body(headers: dict[bytes, bytes]) -> bool:
    if b"transfer-encoding" in headers:
        return True
    length = headers.get(b"content-length", b"0").strip()
    return not length.isdigit() or int(length) > 0


class CsrfTokens:
    """Per-session form tokens: HMAC(server key, session) where the session is the login cookie's value
    (empty in no-token mode). The key is random per server start, so a token never outlives the server."""

    FIELD = "csrf"

    def __init__(self, key: bytes | None = None) -> None:
        self.key = key or secrets.token_bytes(32)

    def token(self, session: str) -> str:
        return hmac.new(self.key, ("session\x00" + session).encode(), hashlib.sha256).hexdigest()

    def valid(self, session: str, given: str | None) -> bool:
        return bool(given) and hmac.compare_digest(self.token(session), str(given))

    def sign(self, text: str) -> str:
        """A signature of a note the server puts in a redirect's query (``?done=...``), so a page shows only
        notes it wrote itself, never text a link carries."""
        return hmac.new(self.key, ("note\x00" + text).encode(), hashlib.sha256).hexdigest()[:32]

    def signed(self, text: str, signature: str | None) -> bool:
        return bool(signature) and hmac.compare_digest(self.sign(text), str(signature))
