"""The API reference at ``/docs``: Swagger UI over the server's ``/openapi.json``, from files the server
serves itself, so it works without network and within a strict Content-Security-Policy.

FastAPI's own ``/docs`` loads Swagger UI from a CDN and starts it with an inline script, which neither a
machine without network nor the browser's CSP (:mod:`memrl.server.guard`: inline scripts only by hash)
allows. Here the page is plain HTML naming the files under ``/docs/assets/``: Swagger UI's bundle, style
sheet and icon, from the ``fastapi-offline`` package (the ``serve`` extra installs it; memrl uses only its
files), and :data:`START`, memrl's few lines that point it at ``/openapi.json``. The page sends its own
policy (:data:`~memrl.server.guard.OWN_FILES_CSP`): scripts and style sheets from this server only, no
inline script, no other origin; every other page keeps the guard's.

    memrl serve memory --port 8080      # then open http://127.0.0.1:8080/docs

Without ``fastapi-offline`` the page says how to install it and links the OpenAPI document.
"""

from __future__ import annotations

import importlib.util
import os
from typing import Any

from memrl.server.guard import OWN_FILES_CSP
from memrl.server.replies import HTTPError

#: Swagger UI's start: the API's OpenAPI document, deep links to operations, no "try it out" bar on top.
START = """window.addEventListener('load', function () {
  window.ui = SwaggerUIBundle({
    url: '/openapi.json', dom_id: '#swagger-ui', deepLinking: true, docExpansion: 'list',
    presets: [SwaggerUIBundle.presets.apis], layout: 'BaseLayout'
  });
});
"""

#: The files of the page: name -> (media type, the file in fastapi-offline's ``static`` folder, or None: START).
ASSETS = {
    "swagger-ui-bundle.js": ("text/javascript; charset=utf-8", "swagger-ui-bundle.js"),
    "swagger-ui.css": ("text/css; charset=utf-8", "swagger-ui.css"),
    "favicon.png": ("image/png", "favicon.png"),
    "start.js": ("text/javascript; charset=utf-8", None),
}

PAGE = """<!doctype html><html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1"><title>{title} · API reference</title>
<link rel="icon" href="/docs/assets/favicon.png"><link rel="stylesheet" href="/docs/assets/swagger-ui.css"></head>
<body><div id="swagger-ui"></div>
<script src="/docs/assets/swagger-ui-bundle.js"></script><script src="/docs/assets/start.js"></script>
</body></html>"""

MISSING = """<!doctype html><html lang="en"><head><meta charset="utf-8"><title>API reference</title></head>
<body><h1>API reference</h1><p>The reference page needs the Swagger UI files of the <code>fastapi-offline</code>
package: <code>pip install 'memrl[serve]'</code>. The OpenAPI document itself is at
<a href="/openapi.json">/openapi.json</a>.</p></body></html>"""


def swagger_folder() -> str | None:
    """The folder of Swagger UI's files (fastapi-offline's ``static``), or None when it is not installed."""
    spec = importlib.util.find_spec("fastapi_offline")
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = os.path.join(spec.submodule_search_locations[0], "static")
    return folder if os.path.isfile(os.path.join(folder, "swagger-ui-bundle.js")) else None


#: The OpenAPI security scheme every ``/v1`` route is under: Swagger UI's "Authorize" button asks for the
#: token once and "Try it out" sends it (``Authorization: Bearer ...``), as any client must.
BEARER = {"type": "http", "scheme": "bearer",
          "description": "A token of `memrl serve memory --token NAME:SECRET:NAMESPACES`, scoped to namespaces"}  # fmt: skip


def declare_bearer(app: Any) -> None:
    """The app's OpenAPI document declares the bearer scheme (:data:`BEARER`) for its ``/v1`` operations."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            doc = build()
            doc.setdefault("components", {}).setdefault("securitySchemes", {})["bearer"] = BEARER
            for path, ops in doc.get("paths", {}).items():
                if path.startswith("/v1/"):
                    for op in ops.values():
                        if isinstance(op, dict):
                            op.setdefault("security", [{"bearer": []}])
        return app.openapi_schema

    app.openapi = openapi


def add_docs_routes(app: Any) -> None:
    """``GET /docs`` and ``GET /docs/assets/{name}`` on a FastAPI ``app`` (made with ``docs_url=None``); its
    OpenAPI document declares the bearer scheme (:func:`declare_bearer`)."""
    from fastapi.responses import FileResponse, HTMLResponse, Response

    declare_bearer(app)

    headers = {"Content-Security-Policy": OWN_FILES_CSP}

    @app.get("/docs", include_in_schema=False)
    async def docs() -> HTMLResponse:
        folder = swagger_folder()
        body = MISSING if folder is None else PAGE.format(title=app.title)
        return HTMLResponse(body, headers=headers)

    @app.get("/docs/assets/{name}", include_in_schema=False)
    async def asset(name: str) -> Any:
        if name not in ASSETS:
            raise HTTPError(404, f"no such file: /docs/assets/{name}", "not_found")
        media, file = ASSETS[name]
        cache = {"Cache-Control": "public, max-age=86400"}
        if file is None:
            return Response(START, media_type=media, headers=cache)
        folder = swagger_folder()
        if folder is None:
            raise HTTPError(404, "Swagger UI is not installed: pip install 'memrl[serve]'", "not_found")
        return FileResponse(os.path.join(folder, file), media_type=media, headers=cache)
