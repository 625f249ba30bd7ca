"""Where a judge's measured error rates are kept, so every judged report can carry them.

``memrl eval judge-check`` writes ``judge_rates.json`` into its output folder and records the same file
under ``$MEMRL_CACHE_DIR/judge-rates/`` (``~/.cache/memrl``), named by judge, model and template hash: a
later ``memrl eval`` with that judge, model and template finds it (:func:`find_rates`), or is given one
with ``--judge-rates``. Rates measured with another template or model are never borrowed.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from memrl.errors import ConfigError
from memrl.scoring.judges import JudgeSpec

RATES_FILE = "judge_rates.json"


def registry_dir() -> Path:
    from memrl.loading import cache_root

    return cache_root() / "judge-rates"


def rates_name(spec: JudgeSpec, model: str | None) -> str:
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", model or "none")
    return f"{spec.name}__{safe}__{spec.template_sha256[:12]}.json"


def record_rates(rates: dict[str, Any], spec: JudgeSpec, model: str | None) -> Path:
    """Keep ``rates`` in the registry (a later measurement of the same judge replaces it)."""
    path = registry_dir() / rates_name(spec, model)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(rates, indent=2))
    return path


def find_rates(spec: JudgeSpec, model: str | None, explicit: str | None = None) -> dict[str, Any] | None:
    """The rates of this judge, model and template: from ``explicit`` (a judge-check folder or file; a
    mismatch is a :class:`ConfigError`), else from the registry, else None (never measured)."""
    if explicit:
        path = Path(explicit)
        path = path / RATES_FILE if path.is_dir() else path
        if not path.exists():
            raise ConfigError(
                f"--judge-rates {explicit}: no {RATES_FILE} there (run `memrl eval judge-check`)"
            )
        rates = json.loads(path.read_text())
        j = rates.get("judge", {})
        if (j.get("name"), j.get("template_sha256"), j.get("model")) != (
            spec.name,
            spec.template_sha256,
            model,
        ):
            raise ConfigError(
                f"--judge-rates {explicit} measured judge {j.get('name')!r} (model {j.get('model')!r}, template "
                f"{str(j.get('template_sha256'))[:12]}), not this run's {spec.name!r} (model {model!r}, "
                f"template {spec.template_sha256[:12]})"
            )
        return rates
    path = registry_dir() / rates_name(spec, model)
    return json.loads(path.read_text()) if path.exists() else None
