"""Scoring: the metrics, the answer step and the LLM judge that evaluation, rewards and agents share.

A layer below ``agents``, ``rewards`` and ``eval`` (it imports only ``data``, ``llm``, ``memory`` and the
bottom modules; see docs/design.md):

- :mod:`memrl.scoring.metrics`: pure answer and retrieval metrics (LoCoMo F1, SQuAD EM/F1, ``\\boxed{}``,
  recall@k, NDCG@k from :mod:`memrl.scoring.ranking`) and
  :func:`~memrl.scoring.metrics.score`, the data set's official metric for one question;
- :mod:`memrl.scoring.answer`: the answering prompt, one model call, and the clean-up of its reply;
- :mod:`memrl.scoring.judge`: the LLM judge (CORRECT / WRONG, failures counted, never scored).
"""
