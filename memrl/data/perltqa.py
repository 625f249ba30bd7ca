"""PerLTQA loader (English v2): the QA file plus the memory file to one :class:`Conversation` per character.

Format (REFERENCE.md section 4). The memory file (``perltmem_en_v2.json``) is keyed by character name:
``profile``, ``profile_description``, ``social_relationship``, ``events`` and ``dialogues``
(``"1_0_0#0": {events: "1_0_0", contents: {"2022-05-12 10:00": ["Name: utterance", ...]}}``). The QA
file (``perltqa_en_v2.json``) is a list of ``{name: {profile: [items], social_relationship: [{id:
[items]}], events: [...], dialogues: [...]}}``; an item is ``{Question, Answer, "Reference Memory",
"Memory Anchors"}``.

How it maps:

- one conversation per character of the memory file, matched to the QA file by name (the two files
  list characters in different orders; names are compared after HTML-unescaping and case-folding);
- sessions = dialogues ordered by their first timestamp (``Session.id`` = dialogue id), turns
  ``"Name: utterance"`` split into speaker and text, turn ids ``"S{session}:{index}"``;
- evidence = the memory ids of "Reference Memory" (a Python-style list string, read with
  ``ast.literal_eval``), or ``"profile:<field>"`` for profile questions; ``evidence_sessions`` are the
  sessions of the named dialogues, and of the dialogues about a named event;
- category = the QA section (``profile``, ``social_relationship``, ``events``, ``dialogues``);
- ``memories`` (:class:`~memrl.data.types.MemoryRecord`) hold the character's memory besides the
  dialogues, each under the id questions cite: one semantic record per profile field
  (``"profile:Gender"``) and for the profile description (``"profile:description"``), one semantic
  record per social relationship (``"1_2"``), one episodic record per event (``"1_0_0"``, dated by its
  creation time). The ``raw`` builder stores them next to the dialogue turns;
- ``metadata`` keeps the profile, description, relationships and events of the memory file, and the
  anchor phrases per question id (HTML entities unescaped; the offsets are not kept: in English they
  point into the Chinese original).
"""

from __future__ import annotations

import ast
import html
import re
from datetime import datetime
from pathlib import Path
from typing import Any

from memrl.data._parse import Where, as_text, parse_date, read_json
from memrl.data.types import Conversation, LoadReport, LoadResult, MemoryRecord, Question, Session, Turn

__all__ = ["PERLTQA_CATEGORIES", "load_perltqa"]

#: The QA sections of a PerLTQA character, used as question categories.
PERLTQA_CATEGORIES: tuple[str, ...] = ("profile", "social_relationship", "events", "dialogues")

_SECTIONS = {"profile", "social_relationship", "events", "dialogues", "profile_description"}
_SPEAKER = re.compile(r"\s*([^:：\n]{1,60}?)\s*[:：]\s*(.*)", re.DOTALL)


def _name_key(name: str) -> str:
    return " ".join(html.unescape(name).split()).casefold()


def _natural(key: str) -> tuple[int, ...]:
    return tuple(int(n) for n in re.findall(r"\d+", key))


def _unescape(text: str, report: LoadReport, where: str) -> str:
    out = html.unescape(text) if "&" in text else text
    if out != text:
        report.problem("html_entities_unescaped", f"{where}: {text[:60]!r}")
    return out


def _by_name(data: Any, where: Where, what: str) -> dict[str, tuple[str, dict]]:
    """``{name_key: (name, record)}`` from ``{name: record}`` or a list of such (or of bare records)."""
    where.expect(data, (dict, list), "the top level")
    pairs: list[tuple[str, Any]] = []
    for n, item in enumerate(data.items() if isinstance(data, dict) else data):
        if isinstance(data, dict):
            pairs.append(item)
            continue
        w = where / f"[{n}]"
        w.expect(item, dict, what)
        if _SECTIONS & set(item):  # a bare record: the name is its protagonist
            profile = w.require(item, "profile", dict)
            pairs.append((str((w / "profile").require(profile, "Protagonist", str)), item))
        else:
            pairs.extend(item.items())
    out: dict[str, tuple[str, dict]] = {}
    for name, record in pairs:
        (where / f"character {name!r}").expect(record, dict, what)
        out[_name_key(name)] = (html.unescape(name).strip(), record)
    return out


def load_perltqa(qa_path: str | Path, memory_path: str | Path) -> LoadResult:
    """Load PerLTQA's QA file and memory file. Returns ``LoadResult(records=list[Conversation], report)``.

    Conversations come in memory-file order; QA characters missing from the memory file are counted
    and skipped. Malformed structure raises :class:`~memrl.errors.DataError` naming file, record, field.
    """
    qa_path, memory_path = Path(qa_path), Path(memory_path)
    hint = "run `memrl data download perltqa`"
    memory = _by_name(read_json(memory_path, hint=hint), Where(memory_path), "memory record")
    qa = _by_name(read_json(qa_path, hint=hint), Where(qa_path), "QA record")
    report = LoadReport(source=f"{qa_path} + {memory_path}")
    conversations = []
    for key, (name, bank) in memory.items():
        if key not in qa:
            report.problem("characters_without_qa", name)
        char_qa = qa.get(key, (name, {}))[1]
        conversations.append(_character(name, bank, char_qa, memory_path, qa_path, report))
    for key in qa.keys() - memory.keys():
        report.problem("qa_characters_without_memory", f"{qa[key][0]!r} skipped")
    report.stats.update(
        conversations=len(conversations),
        sessions=sum(len(c.sessions) for c in conversations),
        turns=sum(len(s.turns) for c in conversations for s in c.sessions),
        questions=sum(len(c.questions) for c in conversations),
        memories=sum(len(c.memories) for c in conversations),
    )
    return LoadResult(conversations, report)


def _character(
    name: str, bank: dict, char_qa: dict, memory_path: Path, qa_path: Path, report: LoadReport
) -> Conversation:
    mw = Where(memory_path, f"character {name!r}")
    profile = bank.get("profile") or {}
    mw.expect(profile, dict, "field 'profile'")
    events = bank.get("events") or {}
    mw.expect(events, dict, "field 'events'")
    relations = bank.get("social_relationship") or {}
    mw.expect(relations, dict, "field 'social_relationship'")
    sessions, dialogue_event = _sessions(bank.get("dialogues") or {}, mw / "dialogues", name, report)
    for event_id in events.keys() - set(dialogue_event.values()):
        report.problem("events_without_dialogue", f"{name}: {event_id}")
    session_of = {s.id: s.index for s in sessions}
    speakers = [name] + sorted({t.speaker for s in sessions for t in s.turns if t.speaker} - {name})

    known = set(events) | set(session_of) | set(relations)
    questions: list[Question] = []
    anchors: dict[str, list[str]] = {}
    qw = Where(qa_path, f"character {name!r}")
    for category in PERLTQA_CATEGORIES:
        if category not in char_qa:
            continue
        for k, (memory_key, item, w) in enumerate(
            _items(char_qa[category], qw / category, flat=category == "profile")
        ):
            qid = f"{name}:{category}:{k}"
            text = _unescape(w.require(item, "Question", str), report, qid)
            answer = w.require(item, "Answer")
            if answer is None:
                raise w.error("field 'Answer' is null")
            ref = item.get("Reference Memory")
            if category == "profile":
                field = str(ref or "").strip()
                ids = [f"profile:{field}"] if field in profile else []
                if not ids:
                    report.problem("evidence_dangling", f"{qid}: profile field {field!r}")
            else:
                ids = []
                for mid in _reference_ids(ref, memory_key, qid, report):
                    if mid in known:
                        ids.append(mid)
                    else:
                        report.problem("evidence_dangling", f"{qid}: {mid!r} is not in the memory file")
            if not ids:
                report.problem("questions_without_evidence", qid)
            sessions_hit = {session_of[i] for i in ids if i in session_of}
            sessions_hit |= {session_of[d] for d, e in dialogue_event.items() if e in ids and d in session_of}
            anchors[qid] = _anchor_phrases(item.get("Memory Anchors"))
            report.categories[category] += 1
            questions.append(
                Question(
                    id=qid,
                    question=text,
                    answers=(_unescape(as_text(answer), report, qid),),
                    category=category,
                    category_id=None,
                    evidence=tuple(dict.fromkeys(ids)),
                    evidence_sessions=tuple(sorted(sessions_hit)),
                )
            )
    metadata = {
        "profile": profile,
        "profile_description": bank.get("profile_description"),
        "social_relationship": relations,
        "events": events,
        "dialogue_events": dialogue_event,
        "anchors": anchors,
    }
    memories = _memories(name, profile, bank.get("profile_description"), relations, events, mw, report)
    return Conversation(
        name, tuple(speakers), tuple(sessions), tuple(questions), "perltqa", metadata, memories=memories
    )


def _memories(
    name: str,
    profile: dict,
    description: Any,
    relations: dict,
    events: dict,
    where: Where,
    report: LoadReport,
) -> tuple[MemoryRecord, ...]:
    """The character's profile, relationships and events as memory records, under their evidence ids."""
    out = [
        MemoryRecord(f"profile:{field}", "semantic", "profile", f"{name}'s {field}: {as_text(value)}")
        for field, value in profile.items()
        if value not in (None, "")
    ]
    if isinstance(description, str) and description.strip():
        out.append(
            MemoryRecord("profile:description", "semantic", "profile", f"{name}: {description.strip()}")
        )
    for rid, rel in sorted(relations.items(), key=lambda kv: _natural(kv[0])):
        rel = (where / "social_relationship" / f"{rid!r}").expect(rel, dict, "relationship")
        who = as_text(rel.get("Supporting Characters") or "").strip()
        kind = as_text(rel.get("Relationship") or "").strip()
        head = f"{name} and {who}" + (f" ({kind})" if kind else "")
        text = " ".join(as_text(rel.get("Description") or "").split())
        out.append(
            MemoryRecord(str(rid), "semantic", "social_relationship", f"{head}: {text}" if text else head)
        )
    for eid, event in sorted(events.items(), key=lambda kv: _natural(kv[0])):
        event = (where / "events" / f"{eid!r}").expect(event, dict, "event")
        created = event.get("Creation Time")
        date = parse_date(created) if isinstance(created, str) else None
        if created is not None and date is None:
            report.problem("event_dates_unparsed", f"{name} {eid}: {created!r}")
        summary = " ".join(as_text(event.get("summary") or "").split())
        content = " ".join(as_text(event.get("content") or "").split())
        if not (summary or content):
            report.problem("events_empty", f"{name} {eid}")
            continue
        text = f"{summary}: {content}" if summary and content else summary or content
        out.append(
            MemoryRecord(
                str(eid), "episodic", "event", text, date, created if isinstance(created, str) else None
            )
        )
    return tuple(out)


def _items(block: Any, where: Where, *, flat: bool):
    """Yield ``(memory_key, item, where)`` from a flat item list (profile) or a list/dict of ``{key: [items]}``."""
    if flat:
        for i, item in enumerate(where.expect(block, list, "section")):
            (where / f"[{i}]").expect(item, dict, "item")
            yield None, item, where / f"[{i}]"
        return
    groups = block.items() if isinstance(block, dict) else None
    if groups is None:
        where.expect(block, list, "section")
        groups = []
        for g, group in enumerate(block):
            (where / f"[{g}]").expect(group, dict, "group")
            groups.extend(group.items())
    for key, items in groups:
        w = where / f"{key!r}"
        w.expect(items, list, "items")
        for i, item in enumerate(items):
            (w / f"[{i}]").expect(item, dict, "item")
            yield str(key), item, w / f"[{i}]"


def _reference_ids(ref: Any, memory_key: str | None, qid: str, report: LoadReport) -> list[str]:
    """Memory ids from "Reference Memory" (``"['1_0_0#0']"``: a Python literal, not JSON)."""
    if isinstance(ref, list):
        return [str(r).strip() for r in ref]
    if isinstance(ref, str) and ref.strip():
        try:
            value = ast.literal_eval(ref.strip())
        except (ValueError, SyntaxError):
            value = None
        if isinstance(value, (list, tuple)):
            return [str(v).strip() for v in value]
        if isinstance(value, str):
            return [value.strip()]
        ids = re.findall(r"\d+(?:_\d+)*(?:#\d+)?", ref)
        report.problem("references_unparsed", f"{qid}: {ref!r} -> {ids}")
        return ids
    if memory_key:  # no usable reference: fall back to the key the item is filed under
        report.problem("references_missing", f"{qid}: using {memory_key!r}")
        return [memory_key]
    return []


def _anchor_phrases(anchors: Any) -> list[str]:
    if not isinstance(anchors, list):
        return []
    return [html.unescape(str(k)) for a in anchors if isinstance(a, dict) for k in a]


def _sessions(
    dialogues: Any, where: Where, name: str, report: LoadReport
) -> tuple[list[Session], dict[str, str]]:
    where.expect(dialogues, dict, "field 'dialogues'")
    built: list[tuple[datetime, str, str | None, datetime | None, list[tuple[str, str]]]] = []
    dialogue_event: dict[str, str] = {}
    for did, dialogue in dialogues.items():
        w = where / f"{did!r}"
        contents = w.require(dialogue, "contents", dict)
        if isinstance(dialogue.get("events"), str):
            dialogue_event[did] = dialogue["events"]
        times = sorted(contents)
        utterances: list[tuple[str, str]] = []
        for t in times:
            for u, line in enumerate(w.expect(contents[t], list, f"contents[{t!r}]")):
                line = (w / f"contents[{t!r}][{u}]").expect(line, str, "utterance")
                m = _SPEAKER.fullmatch(line)
                if m:
                    utterances.append((m[1], m[2].strip()))
                else:
                    report.problem("turns_without_speaker", f"{name} {did}: {line[:60]!r}")
                    utterances.append(("", line.strip()))
        if not utterances:
            report.problem("dialogues_empty", f"{name} {did}")
            continue
        date = parse_date(times[0])
        if date is None:
            report.problem("session_dates_unparsed", f"{name} {did}: {times[0]!r}")
        built.append((date or datetime.max, did, times[0], date, utterances))
    built.sort(key=lambda b: (b[0], _natural(b[1]), b[1]))
    sessions = []
    for i, (_, did, date_text, date, utterances) in enumerate(built, 1):
        turns = tuple(
            Turn(f"S{i}:{j}", speaker, text, session=i, index=j)
            for j, (speaker, text) in enumerate(utterances, 1)
        )
        sessions.append(Session(i, date, date_text, turns, id=did))
    return sessions, dialogue_event
