"""RULER's synthetic tasks by context length (``memrl eval ruler``).

- ``run``: :class:`~memrl.eval.ruler.run.RulerEvaluation` and :func:`~memrl.eval.ruler.run.run_ruler_eval`;
- ``config``: :class:`~memrl.eval.ruler.config.RulerEvalConfig`, every flag of a run;
- ``report``: accuracy by task and length with intervals, ``report.md``, the plot.

Before this package these were flat modules (``memrl.eval.ruler_eval``, ``memrl.eval.ruler_config``,
``memrl.eval.ruler_report``); those paths still import, with a ``DeprecationWarning``
(:mod:`memrl.eval._moved`).
"""
