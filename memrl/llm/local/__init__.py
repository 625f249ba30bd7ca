"""Local transformers models: :mod:`~memrl.llm.local.engine` (:class:`LocalLLM`, its batched
:class:`LocalEngine`), :mod:`~memrl.llm.local.hf_models` (finding and loading a model: a hub id, a folder, the
offline packaged model), :mod:`~memrl.llm.local.packaged` (models shipped inside PyPI packages) and
:mod:`~memrl.llm.local.adapters` (LoRA adapter folders). Importing it loads neither torch nor transformers."""

from memrl.llm.local.engine import LocalEngine, LocalLLM

__all__ = ["LocalEngine", "LocalLLM"]
