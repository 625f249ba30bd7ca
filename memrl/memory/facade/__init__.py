"""The user-facing memory API: :class:`AsyncMemory` (:mod:`.memory`, with its read side :mod:`.reads` and
its agent jobs :mod:`.writes`) and :class:`Memory`, its blocking wrapper (:mod:`.blocking`). The top of
memrl.memory: it may import every other sub-package's interface.
"""

from memrl.memory.facade.blocking import Memory
from memrl.memory.facade.memory import AsyncMemory

__all__ = ["AsyncMemory", "Memory"]
