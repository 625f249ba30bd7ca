"""``--gold corrected``: locomo-audit's corrections for the questions of a run (QA and retrieval).

    corrections = run_corrections(data_path=None, audit_path=None)   # memrl question id -> Correction

The audit's ids count conversations in ``locomo10.json``'s order, so the LoCoMo file is read once more
for that order (all of it, whatever the run selected); each correction is checked against its question's
text (:mod:`memrl.data.locomo_audit`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

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


def corrected_retrieval(rows: list[dict], conversations: list, config: Any) -> dict[str, Any]:
    """``memrl eval retrieval --gold corrected``: recall@k of the same retrieved turns against the
    corrected evidence (turn level; ``recall_all`` too), per mode and category, beside the original.
    Each row gains ``evidence_corrected`` and ``recall_corrected``."""
    from memrl.eval.qa.verdicts import corrected_question
    from memrl.eval.retrieval.report import summarize
    from memrl.scoring.ranking import recall_at_k

    corrections = run_corrections(config.data_path, config.audit_path)
    by_conv = {c.id: c for c in conversations}
    questions = {q.id: q for c in conversations for q in c.questions}
    fixed = []
    for r in rows:
        conv, q = by_conv[r["conversation"]], questions[r["question_id"]]
        evidence = q.evidence
        if q.id in corrections:
            evidence = corrected_question(conv, q, corrections[q.id]).evidence
        r["evidence_corrected"] = list(evidence)
        r["recall_corrected"] = {
            mode: {str(k): recall_at_k(conv.covered(ids[:k]), evidence) for k in config.k}
            for mode, ids in r["retrieved"].items()
        }
        recall = r["recall_corrected"]
        fixed.append({**r, "recall": recall, "session_recall": {}, "ndcg": {}, "session_ndcg": {},
                      "session_recall_all": {},
                      "recall_all": {m: {k: None if v is None else float(v == 1.0) for k, v in ks.items()}
                                     for m, ks in recall.items()}})  # fmt: skip
    s = summarize(fixed, config)
    return {
        "n_corrected": sum(1 for r in rows if r["question_id"] in corrections),
        # of those, the questions whose evidence ids changed (the rest correct the answer only)
        "n_evidence_changed": sum(1 for r in rows if sorted(r["evidence"]) != sorted(r["evidence_corrected"])),
        "recall_at_10": s["recall_at_10"],
        "modes": {mode: {"recall_at_k": m["recall_at_k"], "recall_all_at_k": m["recall_all_at_k"],
                         "by_category": {c: v["recall_at_k"] for c, v in m["by_category"].items()}}
                  for mode, m in s["modes"].items()},
    }  # fmt: skip
