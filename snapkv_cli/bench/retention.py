"""Accuracy and retention of a compressed cache against the full cache, per sample, with 95% intervals.

Retention compares a method with the full cache on the same samples, one sample at a time:

- ``kept``: samples both answered right; ``lost``: the full cache right, the method wrong; ``gained``: the method
  right, the full cache wrong;
- retention = kept / (kept + lost) = kept / full-correct: the share of the full cache's right answers the method
  keeps. Gains are reported beside it and never offset losses (a ratio of accuracies would let them cancel).

Intervals are Wilson score intervals (95%), which stay inside [0, 1] and behave at 0/n and n/n.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

Z_95 = 1.959963984540054


def wilson_interval(successes: int, trials: int, z: float = Z_95) -> tuple[float, float] | None:
    """The Wilson score interval of ``successes`` in ``trials``; None without trials."""
    if trials <= 0:
        return None
    if not 0 <= successes <= trials:
        raise ValueError(f"successes must be within 0..{trials}, got {successes}")
    share = successes / trials
    denominator = 1 + z * z / trials
    centre = (share + z * z / (2 * trials)) / denominator
    half = z * math.sqrt(share * (1 - share) / trials + z * z / (4 * trials * trials)) / denominator
    low = 0.0 if successes == 0 else max(0.0, centre - half)
    high = 1.0 if successes == trials else min(1.0, centre + half)
    return low, high


@dataclass(frozen=True)
class Paired:
    """One sample's outcome with a method and with the full cache."""

    method_correct: bool
    full_correct: bool


@dataclass
class Tally:
    """Counts over the samples of one cell (a method and budget at one length, over one task or several)."""

    samples: int = 0
    correct: int = 0
    full_correct: int = 0
    kept: int = 0
    gained: int = 0
    lost: int = 0

    def add(self, pair: Paired) -> None:
        self.samples += 1
        self.correct += pair.method_correct
        self.full_correct += pair.full_correct
        self.kept += pair.method_correct and pair.full_correct
        self.gained += pair.method_correct and not pair.full_correct
        self.lost += pair.full_correct and not pair.method_correct

    @property
    def accuracy(self) -> float | None:
        return self.correct / self.samples if self.samples else None

    @property
    def accuracy_interval(self) -> tuple[float, float] | None:
        return wilson_interval(self.correct, self.samples)

    @property
    def retention(self) -> float | None:
        """kept / full-correct; None when the full cache answered none of the samples."""
        return self.kept / self.full_correct if self.full_correct else None

    @property
    def retention_interval(self) -> tuple[float, float] | None:
        return wilson_interval(self.kept, self.full_correct)

    def as_dict(self) -> dict:
        def rounded(value):
            return None if value is None else round(value, 4)

        def interval(pair):
            return None if pair is None else [round(pair[0], 4), round(pair[1], 4)]

        return {"samples": self.samples, "correct": self.correct, "full_correct": self.full_correct,
                "kept": self.kept, "gained": self.gained, "lost": self.lost,
                "accuracy": rounded(self.accuracy), "accuracy_interval": interval(self.accuracy_interval),
                "retention": rounded(self.retention), "retention_interval": interval(self.retention_interval)}
