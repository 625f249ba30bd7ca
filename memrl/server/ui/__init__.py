"""The web memory browser (``memrl serve memory``'s ``/``, ``memrl ui``): :mod:`~memrl.server.ui.browse`
(the pages and :func:`ui_router`), :mod:`~memrl.server.ui.edit` (forms), :mod:`~memrl.server.ui.jobs` (agent
jobs and undo), :mod:`~memrl.server.ui.runs` (evaluation and training runs, read by
:mod:`~memrl.server.ui.run_files`) and :mod:`~memrl.server.ui.pages` (HTML helpers)."""

from memrl.server.ui.browse import UI, ui_router

__all__ = ["UI", "ui_router"]
