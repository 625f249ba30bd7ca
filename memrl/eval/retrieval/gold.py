"""``memrl eval retrieval --gold corrected``: the retrieved turns of a run scored against locomo-audit's
corrected evidence (the corrections themselves: :mod:`memrl.eval.qa.gold`, which QA runs share).

    report["corrected"] = corrected_retrieval(rows, conversations, config)
"""

from __future__ import annotations

from typing import Any

from memrl.eval.qa.gold import run_corrections
from memrl.eval.qa.verdicts import corrected_question
from memrl.eval.retrieval.report import summarize
from memrl.scoring.ranking import recall_at_k


def corrected_retrieval(rows: list[dict], conversations: list, config: Any) -> dict[str, Any]:
    """``memrl eval retrieval --gold corrected``: recall@k of the same retrieved turns against the
    corrected evidence (turn level; ``recall_all`` too), per mode and category, beside the original.
    Each row gains ``evidence_corrected`` and ``recall_corrected``."""
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
