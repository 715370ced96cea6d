"""Let freed tensor memory go back to the operating system.

glibc raises its mmap threshold each time a large block is freed (up to 32 MiB), so after the first layer's
uncompressed KV is freed, later blocks of that size come from the heap and stay in the process when freed: the peak
RSS of a compressed run then barely differs from a full-cache one. Fixing the threshold keeps large tensors in their
own mappings, returned to the system on free (measured in docs/benchmarks.md).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

_M_MMAP_THRESHOLD = -3
_THRESHOLD_BYTES = 64 * 1024


def return_freed_memory_to_os() -> bool:
    """Fix glibc's mmap threshold at 64 KiB; True if applied (Linux with glibc), False elsewhere."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return bool(libc.mallopt(_M_MMAP_THRESHOLD, _THRESHOLD_BYTES))
    except (OSError, AttributeError):
        return False
