"""memrl.eval: the evaluations, their reports and intervals.

- ``qa``: the QA evaluation (build memory, answer from it, score, report; :class:`~memrl.eval.qa.QAEvaluation`),
  its configuration, verdicts, judges' checks and rates, the full-context reader, LoCoMo's corrected gold,
  run comparison;
- ``retrieval``: the retrieval evaluation, no LLM (:func:`~memrl.eval.retrieval.aevaluate`), its search
  work, report and the ablation;
- ``ruler``: RULER's synthetic tasks by context length (``memrl eval ruler``);
- ``redteam``: the adversarial campaign; ``systems``: other memory systems behind the QA harness;
- ``stats`` (bootstrap intervals and tables, every evaluation's) and ``protocol`` (the learning protocol's
  splits and test ledger).

The flat module paths of earlier releases (``memrl.eval.qa_config``, ``memrl.eval.retrieval_search``, ...)
still import, with a ``DeprecationWarning`` (:mod:`memrl.eval._moved`).
"""

from memrl.eval import _moved

_moved.install()
