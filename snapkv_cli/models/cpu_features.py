"""Whether this CPU computes bfloat16 natively, detected rather than guessed, and the dtype ``--dtype auto`` picks.

On x86 the answer is AVX512_BF16 (bfloat16 dot products in vector registers) or AMX (bfloat16 tile multiplies);
on aarch64 the ``bf16`` feature (BFDOT / BFMMLA). torch's own checks come first
(``torch.cpu._is_avx512_bf16_supported``, ``torch.cpu._is_amx_tile_supported``): they ask the CPU through the same
library torch's kernels dispatch on, so they answer for the kernels that will run, and they also see what the
operating system has enabled. They are private and only cover x86, so the feature flags the Linux kernel lists in
``/proc/cpuinfo`` are the documented fallback (``avx512_bf16`` / ``amx_bf16`` on x86, ``bf16`` on aarch64). Where
neither answers (another system, another architecture) the CPU counts as without native bfloat16: float32.

Whether ``auto`` takes bfloat16 on such a CPU at all is one declared value,
:data:`snapkv_cli.defaults.CPU_AUTO_BFLOAT16`. No torch at import time.
"""

from __future__ import annotations

import platform
from collections.abc import Callable
from pathlib import Path

CPUINFO = Path("/proc/cpuinfo")
X86 = ("x86_64", "amd64", "i386", "i686")
ARM64 = ("aarch64", "arm64")


def cpuinfo_flags(path: Path | None = None) -> set[str]:
    """The feature flags of the first processor in ``path`` (default :data:`CPUINFO`, read at call time) (``flags``
    on x86, ``Features`` on arm); empty where the file does not exist or cannot be read."""
    try:
        text = (path or CPUINFO).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return set()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip().lower() in ("flags", "features"):
            return set(value.split())
    return set()


def _torch_check(name: str) -> bool | None:
    """torch's own CPU capability check ``torch.cpu.<name>()``, or None where this torch has none."""
    try:
        import torch.cpu
    except ImportError:  # pragma: no cover - torch is a dependency
        return None
    check: Callable[[], bool] | None = getattr(torch.cpu, name, None)
    if check is None:
        return None
    try:
        return bool(check())
    except (RuntimeError, OSError):  # pragma: no cover - a check that cannot run answers nothing
        return None


def native_bf16_feature(machine: str | None = None, flags: set[str] | None = None) -> str | None:
    """The name of the feature by which this CPU computes bfloat16 natively (``AVX512_BF16``, ``AMX``, ``bf16``), or
    None. ``machine`` and ``flags`` stand in for this machine's (tests)."""
    machine = (machine or platform.machine()).lower()
    if machine in X86:
        if flags is None:
            if _torch_check("_is_avx512_bf16_supported"):
                return "AVX512_BF16"
            if _torch_check("_is_amx_tile_supported"):
                return "AMX"
            flags = cpuinfo_flags()
        if "avx512_bf16" in flags:
            return "AVX512_BF16"
        if "amx_bf16" in flags:
            return "AMX"
        return None
    if machine in ARM64:
        return "bf16" if "bf16" in (cpuinfo_flags() if flags is None else flags) else None
    return None


def cpu_auto_dtype() -> tuple[str, str]:
    """``(dtype name, reason)`` that ``--dtype auto`` picks on a CPU: bfloat16 where the CPU computes it natively
    (:func:`native_bf16_feature`) and :data:`~snapkv_cli.defaults.CPU_AUTO_BFLOAT16` allows it, else float32."""
    from snapkv_cli import defaults

    prefer_bfloat16 = defaults.CPU_AUTO_BFLOAT16
    found = native_bf16_feature()
    if found is None:
        return "float32", "this CPU has no native bfloat16: float32"
    if not prefer_bfloat16:
        return "float32", f"float32 on CPUs (this one computes bfloat16 natively ({found}), not chosen by default)"
    return "bfloat16", f"this CPU computes bfloat16 natively ({found})"
