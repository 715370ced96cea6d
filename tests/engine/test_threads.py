"""The selection step's thread count: a trial on the first compressing steps, then the faster of one thread and the
caller's, restored after every step."""

from __future__ import annotations

import pytest
import torch

from snapkv_cli.engine import threads as threads_module
from snapkv_cli.engine.threads import CLEARLY_FASTER, TRIAL, SelectionThreads

CPU = torch.device("cpu")


@pytest.fixture
def two_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


class Clock:
    """time.perf_counter for the module: each step takes what the test says a step on that many threads takes."""

    def __init__(self, monkeypatch, one: float, caller: float):
        self.now, self.seconds = 0.0, {1: one, 2: caller}
        monkeypatch.setattr(threads_module.time, "perf_counter", self)

    def __call__(self) -> float:
        return self.now

    def spend(self) -> None:
        self.now += self.seconds[torch.get_num_threads()]


def run_steps(chooser: SelectionThreads, clock: Clock, count: int, compresses: bool = True) -> list[int]:
    seen = []
    for _ in range(count):
        with chooser.step(CPU, compresses=compresses):
            seen.append(torch.get_num_threads())
            clock.spend()
        assert torch.get_num_threads() == 2
    return seen


def test_the_trial_alternates_and_the_caller_s_threads_win_when_clearly_faster(monkeypatch, two_threads):
    clock, chooser = Clock(monkeypatch, one=1.0, caller=0.625), SelectionThreads()
    assert TRIAL == (False, True, True, False)
    assert run_steps(chooser, clock, 6) == [1, 2, 2, 1, 2, 2]
    assert chooser.seconds == {False: 2.0, True: 1.25} and chooser.trials == 4 and chooser.use_caller is True


@pytest.mark.parametrize("caller", [1.0, 0.91, 3.0])
def test_one_thread_stays_unless_the_caller_s_threads_are_clearly_faster(monkeypatch, two_threads, caller):
    clock, chooser = Clock(monkeypatch, one=1.0, caller=caller), SelectionThreads()
    assert run_steps(chooser, clock, 7) == [1, 2, 2, 1, 1, 1, 1]
    assert chooser.use_caller is False


def test_just_under_the_margin_is_clearly_faster_and_at_it_is_not(monkeypatch, two_threads):
    assert CLEARLY_FASTER == 0.9  # (0.91 above: just over it is not)
    clock, chooser = Clock(monkeypatch, one=1.0, caller=0.89), SelectionThreads()
    run_steps(chooser, clock, 4)
    assert chooser.use_caller is True
    clock, chooser = Clock(monkeypatch, one=1.25, caller=1.125), SelectionThreads()  # exact binary fractions
    run_steps(chooser, clock, 4)
    assert chooser.seconds == {False: 2.5, True: 2.25} and chooser.use_caller is False


def test_steps_that_only_gather_run_on_one_thread_and_do_not_count(monkeypatch, two_threads):
    clock, chooser = Clock(monkeypatch, one=1.0, caller=0.5), SelectionThreads()
    assert run_steps(chooser, clock, 3, compresses=False) == [1, 1, 1]
    assert chooser.trials == 0 and chooser.seconds == {False: 0.0, True: 0.0}
    run_steps(chooser, clock, 4)
    assert chooser.use_caller is True
    assert run_steps(chooser, clock, 2, compresses=False) == [2, 2]  # once decided, every step follows it


def test_one_thread_callers_and_other_devices_are_left_alone(monkeypatch):
    chooser = SelectionThreads()
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with chooser.step(CPU, compresses=True):
            assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
    with chooser.step(torch.device("meta"), compresses=True):
        assert torch.get_num_threads() == before
    assert chooser.trials == 0


def test_a_failing_step_restores_the_count_and_is_no_trial(monkeypatch, two_threads):
    chooser = SelectionThreads()
    with pytest.raises(RuntimeError, match=r"^boom$"), chooser.step(CPU, compresses=True):
        assert torch.get_num_threads() == 1
        raise RuntimeError("boom")
    assert torch.get_num_threads() == 2 and chooser.trials == 0
