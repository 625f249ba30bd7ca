"""``--gold corrected``: locomo-audit's corrections for the questions of a run (QA and retrieval; the retrieval
run's recall against them is :mod:`memrl.eval.retrieval.gold`).

    corrections = run_corrections(data_path=None, audit_path=None)   # memrl question id -> Correction

The audit's ids count conversations in ``locomo10.json``'s order, so the LoCoMo file is read once more
for that order (all of it, whatever the run selected); each correction is checked against its question's
text (:mod:`memrl.data.locomo_audit`).
"""

from __future__ import annotations

from pathlib import Path

from memrl.data.locomo_audit import ERRORS_FILE, Correction, load_corrections


def audit_file(name: str, audit_path: str | None, data_path: str | None) -> Path:
    """``audit_path`` if given; else ``name`` under the data folder (``data_path`` when it is a folder,
    else ``$MEMRL_DATA_DIR`` / ``~/.cache/memrl/data``)."""
    from memrl.data.download import resolve_data_dir

    if audit_path:
        return Path(audit_path)
    if data_path and Path(data_path).is_dir():
        return Path(data_path) / name
    return resolve_data_dir(None) / name


def run_corrections(data_path: str | None, audit_path: str | None) -> dict[str, Correction]:
    """Corrections keyed by memrl question id (``conv-26:q3``) for the LoCoMo file at ``data_path``."""
    from memrl.data import load_conversations

    convs, _ = load_conversations("locomo", data_path, include_adversarial=True)
    questions = {q.id: q.question for c in convs for q in c.questions}
    path = audit_file(ERRORS_FILE, audit_path, data_path)
    return load_corrections(path, [c.id for c in convs], questions)
