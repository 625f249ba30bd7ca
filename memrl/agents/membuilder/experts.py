"""Expert memory builders whose trajectories MemBuilder's agents are fine-tuned on (SFT before ADRPO).

MemBuilder trains by SFT on expert trajectories first (REFERENCE.md section 1): a strong model's answers
to the same four agent prompts. Any LLM can be that expert (``--expert-provider openai --expert-model
...``: its replies are recorded as the targets). Offline, :func:`annotation_expert` plays it: it answers
each agent's prompt with the conversation's own human annotations (LoCoMo's ``observation`` and
``event_summary`` per session), written as MemBuilder actions:

* core (``core="sessions"``, the default): APPEND of each speaker's first observation of the session;
  ``core="first"``: that APPEND in the first session only, later sessions keep the block as it is: with
  a SKIP where the prompt offers one (``core_skip``), else (the SFT data up to issue 61) a REPLACE of
  core's last line by itself, which teaches a student to quote core memory exactly or break it;
* episodic: ADD of the session's events, dated (``"<date>: <event>"``);
* semantic: ADD of the session's observations (``"<speaker> - <fact>"``), in file order, or with
  ``interleave=True`` (the ``annotations`` builder's and its SFT's) the speakers taken in turn so a cut at
  ``max_items`` keeps both; with ``dedupe=True`` a fact is not added again when the prompt's memory
  shows it or the answer already holds it (the store refuses an exact repeat anyway: a target that
  repeats teaches a student to repeat), and an answer left with nothing new is a SKIP;
* procedural: nothing (LoCoMo annotates no procedures): ``{"operations": []}``, which
  :func:`memrl.train.sft_data.thin_empty` mostly keeps out of the SFT data.

It is a weak expert (annotations are not what MemBuilder's paper distilled from Claude), but it is real
data, available offline, and it teaches the action format, which the 135M model gets wrong on its own.
"""

from __future__ import annotations

import json
import re
from itertools import zip_longest
from typing import Any

from memrl.data.types import Conversation
from memrl.errors import DataError

__all__ = ["CORE_MODES", "annotation_action", "annotation_expert"]

#: Items of one type written per session, and their length: within MemBuilder's default budget.
MAX_ITEMS, MAX_CHARS = 3, 200
#: What the expert writes to core memory (see the module docstring).
CORE_MODES = ("sessions", "first")


def _session_of(prompt: str) -> int:
    m = re.search(r"^Session (\d+) \(", prompt, re.M)
    if m is None:
        raise DataError("annotation expert: no 'Session N (' header in the agent's prompt")
    return int(m.group(1))


def annotation_action(
    conversation: Conversation,
    messages: list[dict[str, Any]],
    *,
    max_items: int = MAX_ITEMS,
    max_chars: int = MAX_CHARS,
    core: str = "sessions",
    interleave: bool = False,
    dedupe: bool = False,
) -> dict[str, Any]:
    """The expert's action for one MemBuilder agent prompt (see the module docstring): at most
    ``max_items`` items per type, each cut to ``max_chars`` (the agents' ``max_operations`` and
    ``max_item_chars``); ``core`` is one of :data:`CORE_MODES`; ``dedupe`` drops repeats."""
    if core not in CORE_MODES:
        raise ValueError(f"core must be one of {CORE_MODES}, got {core!r}")
    system, last = messages[0]["content"], messages[-1]["content"]
    if "Rewrite it in under" in last:  # the core compression call: keep the most recent part
        core = last.split("Core memory:\n", 1)[1].split("\n\nThe core memory has", 1)[0]
        return {"operation": "REWRITE", "content": core[-2500:]}
    md = conversation.metadata
    n = _session_of(last)
    obs = (md.get("observation") or {}).get(f"session_{n}_observation") or {}
    events = (md.get("event_summary") or {}).get(f"events_session_{n}") or {}
    date = events.get("date", "")
    if "CORE memory" in system:
        if core == "first" and n > _first_session(conversation):
            if _offers_skip(system):  # keep the block as it is, said plainly
                return {"operation": "SKIP", "reason": "core memory already holds the lasting facts"}
            held = _core_of(last)
            if held:  # keep the block: a REPLACE of its last line by itself changes nothing
                line = held.splitlines()[-1][:max_chars]
                return {"operation": "REPLACE", "old_text": line, "new_text": line}
        firsts = [rows[0][0] for rows in obs.values() if rows]
        return {"operation": "APPEND", "content": " ".join(firsts)[:max_chars] or "-"}
    if "EPISODIC memory" in system:
        happened = [f"{date}: {e}"[:max_chars] for who, rows in events.items() if who != "date" for e in rows]
        if dedupe:
            happened = _new_only(happened, last)
        return {"operations": [{"operation": "ADD", "memory": e} for e in happened[:max_items]]}
    if "SEMANTIC memory" in system:
        per_speaker = [[f"{who} - {text}" for text, *_ in rows] for who, rows in obs.items()]
        facts = (
            [f for turn in zip_longest(*per_speaker) for f in turn if f is not None]
            if interleave
            else [f for rows in per_speaker for f in rows]
        )
        facts = [f[:max_chars] for f in facts]
        if dedupe:
            facts = _new_only(facts, last)
            if not facts and _offers_skip(system):
                return {"operations": [{"operation": "SKIP", "reason": "nothing new"}]}
        return {"operations": [{"operation": "ADD", "memory": f} for f in facts[:max_items]]}
    return {"operations": []}


def _offers_skip(system: str) -> bool:
    return '{"operation": "SKIP"' in system


def _new_only(texts: list[str], prompt: str) -> list[str]:
    """``texts`` without repeats: each once, and none the prompt's memory already shows (a shown item is
    ``[id] text`` or ``text`` on a line of its own, possibly after a date)."""
    shown = {_norm(line.split("] ", 1)[-1]) for line in prompt.splitlines()}
    out: list[str] = []
    for t in texts:
        if _norm(t) not in shown and t not in out:
            out.append(t)
    return out


def _norm(s: str) -> str:
    return " ".join(s.lower().split())


def _first_session(conversation: Conversation) -> int:
    return min((s.index for s in conversation.sessions), default=1)


def _core_of(prompt: str) -> str:
    """The core memory block an agent prompt shows (empty when it shows none)."""
    m = re.search(r"^Core memory[^\n]*:\n(.*?)(?:\n\n|\Z)", prompt, re.M | re.S)
    return m.group(1).strip() if m and m.group(1).strip() not in ("(empty)", "") else ""


def annotation_expert(
    conversation: Conversation,
    *,
    max_items: int = MAX_ITEMS,
    max_chars: int = MAX_CHARS,
    core: str = "sessions",
    interleave: bool = False,
    dedupe: bool = False,
) -> Any:
    """A scripted LLM answering MemBuilder's agent prompts with the conversation's annotations (limits as
    :func:`annotation_action`'s)."""
    from memrl.llm.scripted import ScriptedLLM

    if not (conversation.metadata.get("observation") or conversation.metadata.get("event_summary")):
        raise DataError(
            f"conversation {conversation.id} has no observation/event_summary annotations: the annotation "
            "expert needs LoCoMo-style annotations (use an LLM expert instead)"
        )
    return ScriptedLLM(
        lambda messages, tools, schema: json.dumps(
            annotation_action(
                conversation,
                messages,
                max_items=max_items,
                max_chars=max_chars,
                core=core,
                interleave=interleave,
                dedupe=dedupe,
            )
        )
    )
