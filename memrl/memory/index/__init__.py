"""The in-process indexes a store's namespaces are searched with: exact dense matrices and the embedding
cache (:mod:`.dense`), HNSW candidate graphs and their files (:mod:`.ann`, :mod:`.ann_files`), and BM25
postings (:mod:`.lexical`). Each follows the store (:mod:`.follow`). Imports records, analysis, embedders
and store.
"""

from memrl.memory.index.dense import DenseIndex, DenseIndexes, cache_scope, vector_key
from memrl.memory.index.lexical import LexicalIndex, LexicalIndexes

__all__ = ["DenseIndex", "DenseIndexes", "LexicalIndex", "LexicalIndexes", "cache_scope", "vector_key"]
