"""Reading structured answers out of model text: the one place JSON is extracted from free text."""

from __future__ import annotations

import json
import re
from typing import Any


def extract_json(text: str) -> Any:
    """The JSON object in a model's answer: the whole text, a fenced block, or the outermost ``{...}``."""
    text = text.strip()
    fence = re.search(r"```(?:json)?\s*(.*?)```", text, re.S)
    candidates = [text] + ([fence.group(1)] if fence else [])
    start, end = text.find("{"), text.rfind("}")
    if 0 <= start < end:
        candidates.append(text[start : end + 1])
    err: json.JSONDecodeError | None = None
    for c in candidates:
        try:
            return json.loads(c)
        except json.JSONDecodeError as e:
            err = err or e
    raise ValueError(f"no JSON object found ({err.msg if err else 'empty answer'})")
