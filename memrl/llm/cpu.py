"""What the CPU does with bfloat16: native on AVX-512 BF16 / AMX cores, emulated (several times slower
than float32) elsewhere.

``--autocast bf16`` (SFT) and ``prefill_bf16`` (the read benchmark's evaluations) were measured 1.23x and
1.17x faster on an AVX-512 BF16 EPYC; on an AVX2-only core the same SFT forward pass took 4.3x *longer*
than in float32 (docs/training.md, "What SFT costs"). :func:`warn_slow_bf16` says so once per
process where bf16 is asked for on such a CPU; it changes nothing else (the user's choice stands).
"""

from __future__ import annotations

import functools
import logging

log = logging.getLogger(__name__)

__all__ = ["cpu_bf16_native", "warn_slow_bf16"]


@functools.cache
def cpu_bf16_native() -> bool:
    """True where oneDNN runs bfloat16 natively on this CPU (AVX-512 BF16 or AMX)."""
    import torch

    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):  # an older or trimmed torch: assume the fast path is there
        return True


def warn_slow_bf16(device: str, what: str) -> bool:
    """Log a warning (once per ``what``) when ``what`` runs in bfloat16 on a CPU without native bf16;
    returns whether it warned."""
    if str(device).split(":")[0] != "cpu" or cpu_bf16_native():
        return False
    return _warn_once(what)


@functools.cache
def _warn_once(what: str) -> bool:
    import torch

    log.warning(
        "%s runs in bfloat16, but this CPU (%s) has no native bfloat16 (AVX-512 BF16 or AMX): bf16 is emulated "
        "and several times slower than float32 here; drop the bf16 option on this machine",
        what,
        torch.backends.cpu.get_cpu_capability(),
    )
    return True
