"""How many CPU threads the selection step gets: one, or the caller's, whichever this prefill measures faster.

Choosing what to keep is many tensor operations per layer (the window's queries, pooling, top-k, CriticalKV's and
DefensiveKV's value norms a block at a time). Split over threads, each of them waits for the slowest thread. On a
CPU that other work shares, that thread is often descheduled and the waits dominate; on an idle CPU the second
thread pays. Measured on the default model's captured layers (the default method, budget 1024, two threads;
docs/decisions/2026-12-02-selection-on-one-thread.md and docs/decisions/2026-12-05-selection-threads.md):

- at 2,048 tokens with two one-thread jobs beside it, the whole step took 8.5-11.0 s on two threads, 1.5-2.0 s on one;
- at 8,192 tokens, idle: 1.20-1.50 s on two threads, 1.80-2.09 s on one; with two one-thread jobs beside it:
  6.6-47.4 s on two, 2.7-3.4 s on one.

Which case holds is not known before the prefill and can change while a program runs (a server, a chat), so each
prefill measures it: its first compressing steps alternate one thread and the caller's (one, caller's, caller's,
one: the order cancels a steady drift), and its later steps run on whichever took less in total. The caller's
threads must be clearly faster (:data:`CLEARLY_FASTER`): a wrong choice that way costs several times what it saves
the other. Steps that only gather (a chunk before the last) run on one thread and do not count. The model's own
matrix products, which are large, always keep every thread. Every choice keeps the same positions.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

import torch

TRIAL = (False, True, True, False)  # each trial step: whether it runs on the caller's threads
CLEARLY_FASTER = 0.9  # the caller's threads are chosen when their trial steps took less than this share of one's


class SelectionThreads:
    """The thread count of one prefill's selection steps (:meth:`step`), chosen by timing its first ones."""

    def __init__(self) -> None:
        self.seconds = {False: 0.0, True: 0.0}  # trial seconds on one thread (False) and on the caller's (True)
        self.trials = 0
        self.use_caller: bool | None = None  # decided once the trial steps are done

    @contextmanager
    def step(self, device: torch.device, *, compresses: bool) -> Iterator[None]:
        """Inside, torch's CPU operations run on the thread count this prefill chose (one while undecided, except
        on a trial step); the count is restored after. ``compresses``: the step selects (it may be a trial step)."""
        threads = torch.get_num_threads()
        if device.type != "cpu" or threads == 1:
            yield
            return
        trial = compresses and self.use_caller is None
        caller = TRIAL[self.trials] if trial else bool(self.use_caller)
        if not caller:
            torch.set_num_threads(1)
        started = time.perf_counter()
        try:
            yield
        finally:
            torch.set_num_threads(threads)
        if trial:
            self._record(caller, time.perf_counter() - started)

    def _record(self, caller: bool, seconds: float) -> None:
        self.seconds[caller] += seconds
        self.trials += 1
        if self.trials == len(TRIAL):
            self.use_caller = self.seconds[True] < CLEARLY_FASTER * self.seconds[False]
