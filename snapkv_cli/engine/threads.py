"""The selection step on one CPU thread.

Choosing what to keep is many small tensor operations per layer (the window's queries, pooling, top-k, CriticalKV's
and DefensiveKV's value norms a block at a time). Split over threads, each of them waits for the slowest thread; on
a CPU that other work shares, that thread is often descheduled, and the waits dominate. Measured on the default
model's captured layers at 2,048 tokens, two threads, with two one-thread jobs beside it: the default method's whole
selection took 8.5-11.0 s on two threads and 1.5-2.0 s on one, keeping the same positions
(docs/decisions/2026-12-02-selection-on-one-thread.md). The model's own matrix products, which are large, keep every
thread.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch


@contextmanager
def one_cpu_thread(device: torch.device) -> Iterator[None]:
    """Inside, torch's CPU operations run on one thread (``device`` on the CPU only); the count is restored after."""
    threads = torch.get_num_threads()
    if device.type != "cpu" or threads == 1:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
