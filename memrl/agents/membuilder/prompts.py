"""Prompts of the MemBuilder agents (:mod:`memrl.agents.membuilder`): one system prompt per memory type,
the session transcript, the memory state shown, and the core-memory compression request.

Each agent's system prompt says what its memory type is for, the operations it may use (with one JSON
example each), the item template, and the limits of its answer (operations per answer, characters per
memory: the same numbers the JSON schema enforces, so the model is not surprised by the grammar). Existing
items are shown as ``[id] content`` and the agents are asked to refer to them by id: 12 characters instead
of a quoted memory, and a reference that always resolves.

    msgs = agent_messages(MemoryType.EPISODIC, session_block(s), memory_block(core, items),
                          speakers=("Lena", "Omar"), max_operations=3, max_chars=300)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from memrl.data.types import Session
from memrl.memory.records import MemoryItem, MemoryType

PREAMBLE = (
    "You keep one part of the long-term memory of an assistant that talks with {speakers}. After each "
    "conversation session you read its transcript and decide how your part of the memory should change. "
    "Reply with JSON only."
)

ROLES: dict[MemoryType, str] = {
    MemoryType.CORE: (
        "Your part is the CORE memory: one short text block the assistant always sees. It holds lasting, "
        "essential facts about the people: names, identity, family and relationships, job, home, key "
        "preferences and goals. Events of a single day do not belong here."
    ),
    MemoryType.EPISODIC: (
        "Your part is the EPISODIC memory: things that happened (who did what, when, where), one item per "
        "event. Use the date the event happened: resolve 'yesterday', 'last week' etc. from the session "
        "date."
    ),
    MemoryType.SEMANTIC: (
        "Your part is the SEMANTIC memory: lasting facts and knowledge about people and the world "
        "(preferences, possessions, relationships, opinions, plans), one item per entity and topic."
    ),
    MemoryType.PROCEDURAL: (
        "Your part is the PROCEDURAL memory: how things are done: routines, methods, recipes, step-by-step "
        "processes someone described or follows. Most sessions contain none: then reply with an empty list."
    ),
}

# Examples are about an invented person on purpose: small models copy them, and an example taken from a
# benchmark conversation would put its answers into memory.
TEMPLATES: dict[MemoryType, tuple[str, str]] = {  # (template, example)
    MemoryType.EPISODIC: (
        "YYYY-MM-DD: summary | Details: ...",
        "2021-09-14: Jonas ran his first half marathon | Details: in Bristol, finished in 2h05",
    ),
    MemoryType.SEMANTIC: (
        "Entity - Topic: fact | Details: ...",
        "Jonas - Work: nurse at a children's hospital | Details: night shifts since 2020",
    ),
    MemoryType.PROCEDURAL: (
        "Title | Steps: 1) ... 2) ... | Context: ...",
        "Jonas's bread recipe | Steps: 1) mix flour, water, salt 2) rise overnight 3) bake 40 min | "
        "Context: every Sunday",
    ),
}

OPERATIONS: dict[str, str] = {
    "ADD": '{"operation": "ADD", "memory": "<new memory>"}: store something new',
    "UPDATE": (
        '{"operation": "UPDATE", "old_memory": "<id>", "new_memory": "<the memory, corrected or completed>"}:'
        " replace an existing memory that this session changes or adds to"
    ),
    "MERGE": (
        '{"operation": "MERGE", "old_memories": ["<id>", "<id>"], "new_memory": "<one combined memory>"}: '
        "combine memories about the same thing"
    ),
    "SKIP": '{"operation": "SKIP", "reason": "<why>"}: nothing to store',
    "APPEND": '{"operation": "APPEND", "content": "<new lines>"}: add lasting facts at the end',
    "REPLACE": (
        '{"operation": "REPLACE", "old_text": "<text copied exactly from core memory>", '
        '"new_text": "<its replacement>"}: correct an outdated fact'
    ),
    "REWRITE": '{"operation": "REWRITE", "content": "<the whole new core memory>"}: rewrite the block',
}

ITEM_RULES = (
    'Reply with {{"operations": [...]}}, at most {max_operations} operations; an empty list changes '
    "nothing. Store only what this session says that memory does not hold yet. Each memory stays under "
    "{max_chars} characters. Refer to an existing memory by its [id]."
)
CORE_RULES = (
    "Reply with exactly one operation, under {max_chars} characters. Keep the block short: add only facts "
    "that will still matter in later sessions."
)

COMPRESS = (
    "The core memory has {chars} characters, close to its limit of {limit}. Rewrite it in under {target} "
    'characters with {{"operation": "REWRITE", "content": "..."}}: keep every lasting fact, merge '
    "duplicates, drop details of single events."
)


def system_prompt(
    memory_type: MemoryType,
    *,
    operations: Sequence[str],
    speakers: Sequence[str] = (),
    max_operations: int = 3,
    max_chars: int = 300,
) -> str:
    """The system prompt of the agent of ``memory_type``, offering ``operations``."""
    who = " and ".join(speakers) or "its users"
    ops = "\n".join(f"- {OPERATIONS[op]}" for op in operations)
    parts = [PREAMBLE.format(speakers=who), ROLES[memory_type], f"Operations:\n{ops}"]
    if memory_type is MemoryType.CORE:
        parts.append(CORE_RULES.format(max_chars=max_chars))
    else:
        template, example = TEMPLATES[memory_type]
        rules = ITEM_RULES.format(max_operations=max_operations, max_chars=max_chars, template=template)
        parts += [rules, f"Template of a memory: {template}\nExample: {example}"]
    return "\n\n".join(parts)


def session_block(session: Session) -> str:
    """The session's date and its transcript, one turn per line. The date is given as ISO (the episodic
    template's) and in words, without the time of day: small models spin the digits of a time into
    their dates ("2024-03-03:10:15:15:...")."""
    d = session.date
    when = f"{d.date().isoformat()}, {d.day} {d:%B %Y}" if d else session.date_text or "date unknown"
    lines = "\n".join(t.render() for t in session.turns) or "(no turns)"
    return f"Session {session.index} ({when}):\n{lines}"


def memory_block(
    core: str,
    items: Mapping[MemoryType, Sequence[MemoryItem]],
    *,
    note: Mapping[MemoryType, str] | None = None,
) -> str:
    """Core memory, then the existing items of each type given (``[id] content``; a type with no items
    says so). ``note`` adds a remark after a type's header (e.g. that only relevant items are shown)."""
    parts = [f"Core memory:\n{core.strip() or '(empty)'}"]
    for mtype, rows in items.items():
        header = f"Existing {mtype.value} memories"
        if note and note.get(mtype):
            header += f" ({note[mtype]})"
        body = "\n".join(f"[{it.id}] {it.content}" for it in rows) or "(none)"
        parts.append(f"{header}:\n{body}")
    return "\n\n".join(parts)


def agent_messages(
    memory_type: MemoryType,
    session: str,
    memory: str,
    *,
    operations: Sequence[str],
    speakers: Sequence[str] = (),
    max_operations: int = 3,
    max_chars: int = 300,
) -> list[dict[str, str]]:
    """Chat messages of one agent: its system prompt; the memory state, the session and the ask."""
    system = system_prompt(
        memory_type,
        operations=operations,
        speakers=speakers,
        max_operations=max_operations,
        max_chars=max_chars,
    )
    ask = f"Update the {memory_type.value} memory for this session. JSON:"
    return [
        {"role": "system", "content": system},
        {"role": "user", "content": f"{memory}\n\n{session}\n\n{ask}"},
    ]


def compress_messages(
    core: str, *, limit: int, target: int, speakers: Sequence[str] = ()
) -> list[dict[str, str]]:
    """The extra core-agent call that rewrites a nearly full core memory under ``target`` characters."""
    system = "\n\n".join(
        [PREAMBLE.format(speakers=" and ".join(speakers) or "its users"), ROLES[MemoryType.CORE]]
    )
    ask = COMPRESS.format(chars=len(core), limit=limit, target=target)
    return [
        {"role": "system", "content": system},
        {"role": "user", "content": f"Core memory:\n{core.strip()}\n\n{ask}\nJSON:"},
    ]
