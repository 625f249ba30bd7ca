"""The markdown report of a QA run (``report.md``), from its summary (:func:`memrl.eval.qa.report.summarize`).

Every headline gives both intervals (questions resampled; conversations resampled, the honest one) and
both modes (memrl's: failures left out and counted; official: failures count as wrong); LoCoMo's
category 5 is a line of its own; the judge is named with its model, template hash and measured rates.
"""

from __future__ import annotations

from typing import Any

from memrl.eval.stats import to_markdown

TABLE_COLUMNS = ["category", "n", "mean", "ci_low", "ci_high", "cluster_low", "cluster_high"]


def pct(x: Any) -> str:
    return "-" if x is None or x != x else f"{100 * x:.1f}"


def _ci(pair: Any) -> str:
    return "-" if not pair or pair[0] is None else f"{pct(pair[0])}-{pct(pair[1])}"


def judge_line(j: dict[str, Any]) -> str:
    rates = j.get("rates")
    measured = "not measured (run `memrl eval judge-check`)"
    if rates:
        o = rates.get("overall", {})
        measured = (f"false accepts {pct(o.get('false_accept_specific'))}% of specific wrong answers, "
                    f"{pct(o.get('false_accept_vague'))}% of vague wrong ones; false rejects "
                    f"{pct(o.get('false_reject_gold'))}% of gold answers (judge-check)")  # fmt: skip
    return (f"- Judge: `{j['name']}` ({j['source']}; {j['license']}), model `{j.get('model') or 'none'}`, "
            f"template sha256 `{j['template_sha256'][:16]}...`; measured: {measured}")  # fmt: skip


def markdown(s: dict[str, Any]) -> str:
    lines = [
        f"# QA evaluation: {s['dataset']} / {s.get('system_name') or s['builder']}"
        + (f" + {s['updater']}" if s["updater"] != "none" else ""),
        "",
        f"Model: `{s['provider']}:{s['model'] or 'default'}`, top-k {s['top_k']}, judge: "
        f"`{s['judge_model'] or 'none'}`.",
        "",
        f"- Questions: {s['n_questions']} in {s['n_conversations']} conversation(s); answered {s['n_answered']}, "
        f"**failed {s['n_answer_failures']}**"
        + (f" ({dict(s['answer_failures'])})" if s["answer_failures"] else "")
        + (f"; malformed answers (scored as given) {s['n_format_errors']}" if s["n_format_errors"] else ""),
    ]
    if s.get("accuracy") is not None:
        lines.append(f"- Accuracy (MemAgent's match: the answer equals a gold answer, case and spaces ignored): "
                     f"**{pct(s['accuracy'])}** (95% CI {_ci(s['accuracy_ci'])}); sub-EM {pct(s['sub_em'])}")  # fmt: skip
    lines += [
        f"- F1 ({_f1_label(s)}): **{pct(s['f1'])}** (95% CI over questions {_ci(s['f1_ci'])}, over "
        f"conversations {_ci(s.get('f1_ci_cluster'))}); EM {pct(s['em'])}; BLEU-1 {pct(s['bleu1'])}",
        f"- F1, official mode (failed answers score 0): {pct(s.get('f1_official'))} (95% CI over conversations "
        f"{_ci(s.get('f1_official_ci_cluster'))})",
        f"- Evidence recall of the retrieved memories: {pct(s['evidence_recall'])} (share of the evidence turns "
        "cited by the memories retrieved; memories that cite a whole session count at session granularity)",
    ]
    if s.get("judge"):
        lines.append(judge_line(s["judge"]))
    if s.get("judge_accuracy") is not None:
        lines.append(
            f"- LLM-judge accuracy: **{pct(s['judge_accuracy'])}** (95% CI over questions "
            f"{_ci(s['judge_accuracy_ci'])}, over conversations {_ci(s.get('judge_accuracy_ci_cluster'))}; "
            f"judged {s['n_judged']}, **judge failures {s['n_judge_failures']}** left out); official mode "
            f"(failed answers and judge failures wrong): {pct(s.get('judge_accuracy_official'))} "
            f"({_ci(s.get('judge_accuracy_official_ci_cluster'))})"
        )
    adv = s.get("adversarial")
    if adv:
        judged = adv.get("judge_accuracy")
        lines.append(f"- Category 5 (adversarial, on its own, never in overall): {adv['n']} questions, F1 "
                     f"{pct(adv['f1']['mean'])}" + (f", judge accuracy {pct(judged['mean'])}" if judged else ""))  # fmt: skip
    lines += _cost_lines(s)
    if s.get("full_context"):
        f = s["full_context"]
        lines.append(f"- Full context (window {f['window'] or 'unlimited'} tokens): {f['n_whole']} questions saw "
                     f"the whole conversation, {f['n_truncated']} only its latest turns (on average "
                     f"{f['turns_dropped_mean']:.0f} turns dropped), {f['n_skipped']} skipped")  # fmt: skip
    if s.get("length_table"):
        by_length = s["dataset"].startswith("ruler")
        lines += ["", "## Accuracy by context length" if by_length else "## Accuracy by question type", "",
                  length_markdown(s["length_table"], "length" if by_length else "type")]  # fmt: skip
    if s.get("longmemeval"):
        lines += ["", *longmemeval_markdown(s["longmemeval"])]
    lines += ["", "## F1 by category", "", "ci: questions resampled; cluster: conversations resampled.", "",
              to_markdown(s["f1_by_category"], TABLE_COLUMNS)]  # fmt: skip
    if s.get("judge_by_category"):
        lines += ["", "## Judge accuracy by category", "", to_markdown(s["judge_by_category"], TABLE_COLUMNS)]
    if s.get("corrected"):
        lines += ["", *corrected_markdown(s["corrected"])]
    return "\n".join(lines) + "\n"


def _cost_lines(s: dict[str, Any]) -> list[str]:
    out = []
    b = s["build"]
    if b.get("memories"):
        out.append(f"- The data set's own memories stored: {b['memories']} (profile, relationships, events)")
    if b["sessions"]:
        out.append(f"- Build: {b['sessions']} sessions, {b['llm_calls']} LLM calls, "
                   f"{b.get('tokens_per_session', 0):.0f} tokens/session, {b['seconds']:.1f} s, {b['failures']} "
                   f"failures, {b.get('actions_applied', 0)} memory actions applied")  # fmt: skip
        if "prompt_tokens_per_session" in b:
            out.append(f"- Build cost per session: {b['prompt_tokens_per_session']:.0f} prompt and "
                       f"{b['completion_tokens_per_session']:.0f} completion tokens, "
                       f"{b['seconds_per_session']:.1f} s; {b.get('items') if b.get('items') is not None else '-'} "
                       "items stored in all")  # fmt: skip
    u = s.get("update")
    if u:
        out.append(f"- Update (memupdate): {u['episodes']} episodes, {u['llm_calls']} LLM calls, "
                   f"{u['prompt_tokens'] + u['completion_tokens']} tokens, {u['failures']} failures")  # fmt: skip
    c = s.get("cost")
    if c:
        out += ["", "## Cost", "", to_markdown([{"phase": k, **v} for k, v in c.items()]), ""]
    return out


def longmemeval_markdown(lme: dict[str, Any]) -> list[str]:
    """LongMemEval's figures: per type, task-averaged, overall, abstention; both modes."""
    ours, official = lme["memrl"], lme["official"]
    rows = [{"question type": t, "n": v["n"], "accuracy": pct(v["mean"]),
             "official": pct(official["by_type"][t]["mean"]), "95% CI": _ci([v["ci_low"], v["ci_high"]])}
            for t, v in ours["by_type"].items()]  # fmt: skip
    abst = ours.get("abstention")
    return [
        "## LongMemEval (its official figures)", "",
        f"- Task-averaged accuracy (mean over question types): **{pct(ours['task_averaged'])}** "
        f"(official mode {pct(official['task_averaged'])})",
        f"- Overall accuracy: {pct(ours['overall']['mean'])} (official mode {pct(official['overall']['mean'])})",
        f"- Abstention accuracy: {pct(abst['mean']) if abst else '-'} ({abst['n'] if abst else 0} `_abs` questions)",
        "", to_markdown(rows),
    ]  # fmt: skip


def corrected_markdown(c: dict[str, Any]) -> list[str]:
    f1, j = c["f1"], c.get("judge_accuracy")
    lines = [
        "## Against the corrected gold (locomo-audit)", "",
        f"{c['n_corrected']} questions audited, {c['n_answers_changed']} gold answers changed.", "",
        f"- F1: **{pct(f1['mean'])}** (over conversations {_ci(f1['ci_cluster'])}); official mode "
        f"{pct(f1['official'])}",
        f"- Evidence recall: {pct(c['evidence_recall']['mean'])}",
    ]  # fmt: skip
    if j:
        lines.append(f"- LLM-judge accuracy: **{pct(j['mean'])}** (over conversations {_ci(j['ci_cluster'])}); "
                     f"official mode {pct(j['official'])}")  # fmt: skip
    lines += ["", to_markdown(c["f1_by_category"], TABLE_COLUMNS)]
    return lines


def length_markdown(table: list[dict[str, Any]], first: str = "length") -> str:
    """MemAgent's table: accuracy (95% CI), sub-EM, F1 (percent), seconds and tokens per question."""
    rows = [
        {
            first: r["category"], "n": r["n"], "accuracy": pct(r["accuracy"]),
            "95% CI": f"{pct(r['ci_low'])}-{pct(r['ci_high'])}", "sub-EM": pct(r["sub_em"]), "F1": pct(r["f1"]),
            "s/question": f"{r['seconds_per_question']:.1f}", "tokens/question": f"{r['tokens_per_question']:,.0f}",
        }
        for r in table
    ]  # fmt: skip
    return to_markdown(rows)


def _f1_label(s: dict[str, Any]) -> str:
    """What the F1 line is: LoCoMo's official metric, or, on LongMemEval (whose metric is a judge's
    accuracy), token F1 beside it."""
    if s["dataset"] == "longmemeval":
        judged = "the judge's accuracy below" if s.get("judge_accuracy") is not None else "--judge-model"
        return f"token F1; LongMemEval's official metric is an LLM judge's accuracy: {judged}"
    return "official metric; adversarial excluded"
