"""Give freed tensor memory back to the operating system once a prefill is done, without slowing the prefill.

During a SnapKV prefill each layer's uncompressed keys and values are freed as soon as the layer is compressed.
glibc's allocator, left to its defaults (as plain transformers runs), keeps such freed blocks in its heap and reuses
them for the next layer's activations and KV, so the peak RSS stays near what is alive at once: below the full
cache's by about the KV that compression saves (``tools/bench/prefill_bench.py`` measures it; docs/benchmarks.md has
its results).

What this module must not do is fix glibc's mmap threshold low (at 64 KiB, say): every block above it then becomes
a fresh mapping whose pages fault in again on every layer; at 8k tokens that doubled the prefill's page faults
(4.6 M against 2.3 M) and cost 10-15% of its time against plain transformers (``prefill_bench``'s
``default-mmap64k`` variant measures it). Instead, :func:`return_freed_memory_to_os` asks glibc once, after the
prefill, to hand back the free pages of its heap (``malloc_trim``), so the resident memory while decoding reflects
the compressed cache.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import sys


@functools.lru_cache(maxsize=1)
def _libc():
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.malloc_trim  # noqa: B018 - glibc only (musl has no malloc_trim)
        return libc
    except (OSError, AttributeError):
        return None


def return_freed_memory_to_os() -> bool:
    """Hand the free pages of glibc's heap back to the system now; True if done (Linux with glibc)."""
    libc = _libc()
    if libc is None:
        return False
    libc.malloc_trim(0)
    return True
