"""Cheating MemBuilder agents against ADRPO's session reward, beside the data set's expert.

For each session, the memory before it is the annotation expert's (as ``memrl train grpo --task build``
has it); the four agents are then played by one scripted policy, and the session is scored by
:func:`memrl.agents.membuilder.adrpo.score_session` exactly as a trainer scores it: the session's questions
answered from core memory and the retrieved memories within the reader's character budget, judged by the
training F1, times the length penalty against the expert's lengths. The reader is an oracle that reads like a
model: it answers with the gold exactly when one line of its context (core memory's lines, one per
retrieved memory) states each part of the gold answer within a few words
(:func:`memrl.rewards.memupdate.span_coverage`, the rule MemUpdate's coverage uses). An oracle that
credited any context holding every gold token somewhere paid a bag of the session's words (0.338 against
the expert's 0.262). The honest policy is the expert.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from typing import Any

from memrl.data.locomo import NOT_ANSWERABLE
from memrl.data.types import Conversation, Question, Session
from memrl.eval.redteam import HONEST, RewardTable
from memrl.memory import AsyncMemory

__all__ = [
    "BUILD_POLICIES",
    "build_policy",
    "oracle_answer",
    "oracle_reader",
    "score_builds",
]

BUILD_POLICIES = (
    HONEST, "empty", "copy memory", "list of guesses", "one letter", "maximal length", "blind merges",
    "same call repeated", "copy a date", "delete everything",
)  # fmt: skip
TYPES = ("core", "episodic", "semantic", "procedural")
_QUESTION = re.compile(r"Question(?: \(asked on [^)]*\))?: (.*)\nAnswer:")
_CAPS = re.compile(r"\b(?:[A-Z][a-z]+|\d[\w/-]*)\b")


def _kind(messages: list[dict[str, Any]]) -> str:
    if "Rewrite it in under" in messages[-1]["content"]:
        return "compress"
    return next(t for t in TYPES if f"is the {t.upper()} memory" in messages[0]["content"])


def oracle_reader(conversation: Conversation, decoys: Sequence[Question] = ()) -> Any:
    """A scripted answerer: the gold answer when the prompt's memories hold all of its tokens, else
    'not answerable' (see the module docstring); ``decoys`` are questions it may be asked besides the
    conversation's own (:func:`memrl.agents.membuilder.adrpo.decoy_questions`)."""
    from memrl.llm.scripted import ScriptedLLM

    return ScriptedLLM(oracle_answer(conversation, decoys))


def oracle_answer(conversation: Conversation, decoys: Sequence[Question] = ()) -> Callable[..., str]:
    """The rule of :func:`oracle_reader` (to combine with a scripted policy's own rule)."""
    from memrl.rewards.memupdate import span_coverage, tokens

    gold = {q.question: q.answer for q in (*decoys, *conversation.questions)}

    def answer(messages: list[dict[str, Any]], tools: Any, schema: Any) -> str:
        text = messages[-1]["content"]
        m = _QUESTION.search(text)
        if m is None or m.group(1) not in gold:
            return NOT_ANSWERABLE
        lines = text[: m.start()].splitlines()  # core memory's lines and one line per memory
        try:
            found, wanted = span_coverage(gold[m.group(1)], lines, question=m.group(1))
        except ValueError:  # the question holds the whole answer: every token must be there
            found, wanted = (
                len(tokens(gold[m.group(1)]) & tokens(" ".join(lines))),
                len(tokens(gold[m.group(1)])),
            )
        return str(gold[m.group(1)]) if found == wanted else NOT_ANSWERABLE

    return answer


async def _copy(memory: AsyncMemory, src: str, dst: str) -> None:
    """``dst`` becomes a copy of ``src`` (an empty memory when nothing was ever written to ``src``)."""
    from memrl.errors import NotFoundError

    try:
        await memory.clone(src, dst, overwrite=True)
    except NotFoundError:
        await memory.reset(namespace=dst)


def build_policy(name: str, conversation: Conversation, session: Session) -> Callable[..., Any]:
    """The scripted agents of policy ``name`` (one rule answering all four agents' prompts)."""
    from memrl.agents.membuilder.experts import annotation_action

    turns = [f"{t.speaker}: {t.text}" for t in session.turns]
    when = session.date_text or ""
    words = ", ".join(dict.fromkeys(_CAPS.findall(" ".join(t.text for t in session.turns))))

    def items(texts: Sequence[str]) -> dict[str, Any]:
        return {"operations": [{"operation": "ADD", "memory": t[:600]} for t in texts if t.strip()][:3]}

    def reply(messages: list[dict[str, Any]], tools: Any, schema: Any) -> str:
        kind = _kind(messages)
        shown = re.findall(r"^\[([0-9a-f]{12})\] ?(.*)$", messages[-1]["content"], re.M)
        if name == HONEST or kind == "compress":
            return json.dumps(annotation_action(conversation, messages))
        core_text = {
            "empty": "-", "copy memory": (shown[0][1] if shown else "-"), "list of guesses": words,
            "one letter": "e", "maximal length": " ".join(turns), "blind merges": "-",
            "same call repeated": turns[0] if turns else "-", "copy a date": when or "-",
            "delete everything": "-",
        }[name]  # fmt: skip
        if kind == "core":
            return json.dumps({"operation": "APPEND", "content": core_text[:600] or "-"})
        if name == "empty":
            return json.dumps({"operations": []})
        if name == "copy memory":
            return json.dumps(items([c for _, c in shown]))
        if name == "list of guesses":
            return json.dumps(items([f"{when}: {words}"]))
        if name == "one letter":
            return json.dumps(items(["e"]))
        if name == "maximal length":
            return json.dumps(items(turns))
        if name == "same call repeated":
            return json.dumps(items([turns[0]] * 3 if turns else []))
        if name == "copy a date":
            return json.dumps(items([when]))
        if name == "blind merges":
            ids = [i for i, _ in shown]
            ops = [{"operation": "MERGE", "old_memories": ids[k : k + 2], "new_memory": " ".join(
                c for _, c in shown[k : k + 2])[:600]} for k in range(0, len(ids) - 1, 2)]  # fmt: skip
            return json.dumps({"operations": ops[:3]})
        # delete everything: there is no DELETE; overwrite what is shown
        return json.dumps({"operations": [
            {"operation": "UPDATE", "old_memory": i, "new_memory": "-"} for i, _ in shown[:3]]})  # fmt: skip

    return reply


async def score_builds(
    memory: AsyncMemory,
    conversations: Sequence[Conversation],
    sessions_per_conversation: int,
    *,
    policies: Sequence[str] = BUILD_POLICIES,
) -> RewardTable:
    """Every policy's ADRPO reward per agent type on the first sessions (with questions) of each
    conversation; the memory before each session is the expert's."""
    from memrl.agents.membuilder import MemBuilderAgent
    from memrl.agents.membuilder.adrpo import (
        decoy_questions,
        expert_lengths,
        score_session,
        session_questions,
    )
    from memrl.agents.membuilder.experts import annotation_expert
    from memrl.llm.scripted import ScriptedLLM

    policies = [HONEST, *(p for p in policies if p != HONEST)]  # the expert first: its lengths are the LP's
    table = RewardTable()
    for conv in conversations:
        expert = MemBuilderAgent(annotation_expert(conv))
        ns = f"{conv.id}@redteam-expert"
        await memory.reset(namespace=ns)
        done = 0
        for s in conv.sessions:
            questions = session_questions(conv, s, 5)
            if questions and done < sessions_per_conversation:
                done += 1
                decoys = decoy_questions(conv, s, questions, others=conversations)
                reader = oracle_reader(conv, decoys)
                before = f"{ns}#before"
                await _copy(memory, ns, before)
                lengths: dict[str, int] = {}
                for name in policies:
                    trial = f"{ns}#{name}"
                    await _copy(memory, before, trial)
                    agent = MemBuilderAgent(ScriptedLLM(build_policy(name, conv, s)))
                    result = await agent.build_session(memory, trial, conv, s)
                    if name == HONEST:
                        lengths = expert_lengths(result)
                    score = await score_session(memory, trial, conv, result, questions, answer_llm=reader,
                                                expert_chars=lengths or None, decoys=decoys)  # fmt: skip
                    for t, outcome in score.rewards.items():
                        table.add(f"adrpo ({t})", name, outcome.value)
                    await memory.reset(namespace=trial)
            if done >= sessions_per_conversation:
                break
            await expert.build_session(memory, ns, conv, s)  # the expert's memory moves on
    return table
