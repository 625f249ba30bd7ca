"""Text and query analysis, no store involved: the words of a query (:mod:`.words`), FTS5's tokenizer and the
Porter stemmer (:mod:`.tokenizer`), the BM25 weight (:mod:`.bm25`), what an item is about (:mod:`.terms`:
content terms and entities), what a question asks (:mod:`.query`: names, months, *when*) and the dates a
question or a turn talks about (:mod:`.dates`). Imports only :mod:`memrl.memory.records`.
"""

from memrl.memory.analysis.query import (
    asks_abstract,
    asks_aggregate,
    asks_when,
    date_matches,
    mentioned_dates,
    mentions_time,
    named_in,
    speakers_meant,
)  # fmt: skip
from memrl.memory.analysis.terms import content_terms, rule_entities, spacy_model_installed, tagger_of
from memrl.memory.analysis.tokenizer import query_terms, term_counts, tokens
from memrl.memory.analysis.words import STOPWORDS, TOKEN, query_words, strip_question_words

__all__ = [
    "STOPWORDS", "TOKEN", "asks_abstract", "asks_aggregate", "asks_when", "content_terms", "date_matches",
    "mentioned_dates", "mentions_time", "named_in", "query_terms", "query_words", "rule_entities",
    "spacy_model_installed", "speakers_meant", "strip_question_words", "tagger_of", "term_counts", "tokens",
]  # fmt: skip
