"""HTML building blocks for the web memory browser: escaping, the page layout, tables, a little markdown.

Pages are rendered on the server as plain HTML (no front-end build, no template engine): every action is
a link or a form button, so the browser works with the keyboard alone (Tab / Enter; ``/`` focuses the
search box; ``g n`` goes to namespaces, ``g r`` to runs). Everything user-supplied goes through
:func:`esc`.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import re
import time
from collections.abc import Iterable, Sequence
from typing import Any
from urllib.parse import quote, urlencode

CSS = """
:root { --fg:#1d2430; --muted:#5b6472; --line:#d9dee5; --bg:#fbfcfd; --accent:#1f5fbf; --bad:#b3261e;
  --good:#1b7a3a; --chip:#eef2f7; }
* { box-sizing: border-box; }
body { margin:0; font:15px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color:var(--fg); background:var(--bg); }
header { display:flex; gap:1.2rem; align-items:center; padding:.6rem 1.2rem; border-bottom:1px solid var(--line); background:#fff; }
header .brand { font-weight:700; color:var(--fg); text-decoration:none; }
header nav a { margin-right:1rem; }
main { max-width: 1180px; margin: 0 auto; padding: 1rem 1.2rem 3rem; }
a { color: var(--accent); }
a:focus, button:focus, input:focus, select:focus, summary:focus { outline: 3px solid #ffb400; outline-offset: 1px; }
.skip { position:absolute; left:-999px; } .skip:focus { left: 1rem; top: .5rem; background:#fff; padding:.3rem; }
h1 { font-size: 1.4rem; margin: .4rem 0 1rem; } h2 { font-size: 1.1rem; margin: 1.4rem 0 .5rem; }
table { border-collapse: collapse; width: 100%; background:#fff; }
th, td { text-align:left; vertical-align: top; padding: .35rem .5rem; border-bottom: 1px solid var(--line); overflow-wrap: anywhere; }
th { font-size: .85rem; color: var(--muted); font-weight: 600; overflow-wrap: normal; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
.chip { display:inline-block; white-space:nowrap; padding:0 .45rem; border-radius: .6rem; background: var(--chip); font-size:.8rem; }
.muted { color: var(--muted); font-size: .88rem; }
.bad { color: var(--bad); } .good { color: var(--good); }
.tabs a { display:inline-block; padding:.25rem .7rem; border:1px solid var(--line); border-radius:.4rem; margin-right:.3rem; text-decoration:none; }
.tabs a[aria-current] { background: var(--accent); color:#fff; border-color: var(--accent); }
form.inline { display:inline; }
button { font: inherit; padding: .25rem .8rem; border:1px solid var(--accent); background:#fff; color:var(--accent); border-radius:.35rem; cursor:pointer; }
button.primary { background: var(--accent); color:#fff; }
textarea, input[type=text], input[type=search], input[type=password], select, input[type=number] { font:inherit; padding:.25rem .4rem; border:1px solid var(--line); border-radius:.3rem; }
input[type=search] { width: min(32rem, 100%); }
pre { white-space: pre-wrap; overflow-wrap: anywhere; background:#fff; border:1px solid var(--line); padding:.6rem; border-radius:.3rem; font-size:.85rem; }
.timeline { list-style:none; padding-left: 0; border-left: 3px solid var(--line); margin-left:.4rem; }
.timeline li { margin: 0 0 .9rem 0; padding-left: .9rem; position: relative; }
.timeline li::before { content:""; position:absolute; left:-.5rem; top:.45rem; width:.7rem; height:.7rem; border-radius:50%; background: var(--accent); }
.timeline li.undone::before { background: var(--line); }
del { color: var(--bad); } ins { color: var(--good); text-decoration: none; }
.card { background:#fff; border:1px solid var(--line); border-radius:.4rem; padding:.7rem .9rem; margin:.6rem 0; }
.flash { background:#eaf4ea; border:1px solid #b9dcb9; padding:.5rem .8rem; border-radius:.35rem; }
.notice { background:#fff6dd; border:1px solid #e8d28a; padding:.5rem .8rem; border-radius:.35rem; }
.error { background:#fbeaea; border:1px solid #e4b4b4; padding:.5rem .8rem; border-radius:.35rem; }
img.plot { max-width: 100%; border:1px solid var(--line); background:#fff; }
details > summary { cursor: pointer; }
"""

JS = """
document.addEventListener('keydown', function (e) {
  var t = e.target.tagName; if (t === 'INPUT' || t === 'TEXTAREA' || t === 'SELECT') return;
  if (e.key === '/') { var q = document.querySelector('input[type=search]'); if (q) { e.preventDefault(); q.focus(); } }
  if (e.key === 'g') { window._g = Date.now(); return; }
  if (window._g && Date.now() - window._g < 800) {
    if (e.key === 'n') location.href = '/'; if (e.key === 'r') location.href = '/runs';
  }
  window._g = 0;
});
"""


def esc(x: Any) -> str:
    return html.escape("" if x is None else str(x), quote=True)


def url(path: str, **params: Any) -> str:
    """A path with a query string (parameters that are None or "" are left out)."""
    q = {k: v for k, v in params.items() if v not in (None, "", False)}
    return path + ("?" + urlencode(q, doseq=True) if q else "")


def seg(x: str) -> str:
    """One URL path segment."""
    return quote(str(x), safe="")


def when(ts: float | None) -> str:
    if not ts:
        return ""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))


def num(x: Any, digits: int = 3, *, significant: bool = False) -> str:
    """A number for a table cell: ``digits`` decimals, or ``digits`` significant digits (small scores such
    as BM25's near-zero ones stay readable instead of showing 0.000)."""
    if x is None:
        return "–"
    if isinstance(x, float):
        return f"{x:.{digits}g}" if significant else f"{x:.{digits}f}"
    return esc(x)


def page(
    title: str,
    body: str,
    *,
    flash: str = "",
    error: str = "",
    user: str | None = None,
    logout: str = "",
    runs: bool = True,
    notice: str = "",
) -> str:
    """A whole page. ``flash``/``error``: notes shown above the body (text, escaped here: the caller decides
    they are the server's own, never text from the request). ``logout``: the log-out form (it carries the
    visitor's CSRF token: logging out is a POST, so no link on another site can do it). ``runs``: the Runs
    link (shown only to a visitor who may open runs: a token for every namespace). ``notice``: the server's
    own state, above the title (the embedding model loading)."""
    who = f'<span class="muted">token: {esc(user)}</span> {logout}' if user else ""
    note = (f'<p class="flash" role="status">{esc(flash)}</p>' if flash else "") + (
        f'<p class="error" role="alert">{esc(error)}</p>' if error else ""
    )
    return f"""<!doctype html><html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1"><title>{esc(title)} · memrl</title>
<link rel="icon" href="data:,">
<style>{CSS}</style></head><body><a class="skip" href="#main">Skip to content</a>
<header><a class="brand" href="/">memrl</a><nav><a href="/">Namespaces</a>{'<a href="/runs">Runs</a>' if runs else ""}
<a href="/docs">API</a></nav>{who}</header>
<main id="main">{f'<p class="notice" role="status">{esc(notice)}</p>' if notice else ""}<h1>{esc(title)}</h1>{note}{body}</main><script>{JS}</script></body></html>"""


#: The Content-Security-Policy hash of the one inline script every page carries (:data:`JS`).
SCRIPT_HASHES = (base64.b64encode(hashlib.sha256(JS.encode()).digest()).decode(),)


def table(
    headers: Sequence[str], rows: Iterable[Sequence[str]], *, num_cols: Sequence[int] = (), cls: str = ""
) -> str:
    """Cells are HTML already (escape them first)."""
    numeric = set(num_cols)
    head = "".join(
        f'<th scope="col"{" class=num" if i in numeric else ""}>{esc(h)}</th>' for i, h in enumerate(headers)
    )
    body = "".join(
        "<tr>"
        + "".join(f"<td{' class=num' if i in numeric else ''}>{c}</td>" for i, c in enumerate(r))
        + "</tr>"
        for r in rows
    )
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def post_button(
    action: str, label: str, *, hidden: dict[str, str] | None = None, primary: bool = False
) -> str:
    fields = "".join(
        f'<input type="hidden" name="{esc(k)}" value="{esc(v)}">' for k, v in (hidden or {}).items()
    )
    cls = ' class="primary"' if primary else ""
    return f'<form class="inline" method="post" action="{esc(action)}">{fields}<button{cls}>{esc(label)}</button></form>'


def pretty(x: Any) -> str:
    return f"<pre>{esc(json.dumps(x, indent=2, ensure_ascii=False, default=str))}</pre>"


def inline(text: str) -> str:
    """Escaped text with markdown's **bold** and `code`."""
    out = esc(text)
    out = re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", out)
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", out)


def markdown(md: str) -> str:
    """The little markdown memrl reports use: headings, pipe tables, lists and paragraphs."""
    out: list[str] = []
    lines = md.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i].rstrip()
        if line.startswith("|"):
            block = []
            while i < len(lines) and lines[i].startswith("|"):
                block.append([c.strip() for c in lines[i].strip().strip("|").split("|")])
                i += 1
            rows = [r for r in block if not all(set(c) <= set("-: ") for c in r)]
            if rows:
                out.append(
                    table(rows[0], ([esc(c) for c in r] for r in rows[1:]), num_cols=range(1, len(rows[0])))
                )
            continue
        if line.startswith("#"):
            level = min(len(line) - len(line.lstrip("#")) + 1, 4)
            out.append(f"<h{level}>{esc(line.lstrip('#').strip())}</h{level}>")
        elif line.startswith(("- ", "* ")):
            out.append(f"<ul><li>{inline(line[2:])}</li></ul>")
        elif line.strip():
            out.append(f"<p>{inline(line)}</p>")
        i += 1
    return "\n".join(out)
