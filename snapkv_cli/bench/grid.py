"""Methods x budgets and the compression settings shared by every cell of a benchmark grid.

A method is a policy name (``snapkv``, ``defensivekv``...) or a policy name with PyramidKV's per-layer allotment on
top (``defensivekv+pyramid``): the budget then decreases with depth at the same mean, as ``--layer-budgets pyramid``
does for ``snapkv ask``.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..engine import CompressionSettings

DEFAULT_METHODS = ("full", "snapkv", "pyramidkv", "h2o", "streamingllm", "random")
LAYER_ALLOTMENT = "+pyramid"  # the suffix of a method label that asks for PyramidKV's per-layer allotment


def policy_of(label: str) -> str:
    """The policy a method label runs: ``defensivekv+pyramid`` -> ``defensivekv``."""
    return label.removesuffix(LAYER_ALLOTMENT)


def method_labels() -> tuple[str, ...]:
    """Every method label a grid takes: each policy, and each compressing policy but PyramidKV with ``+pyramid``."""
    from ..engine.policies import POLICY_NAMES

    return (*POLICY_NAMES, *(name + LAYER_ALLOTMENT for name in POLICY_NAMES if name not in ("full", "pyramidkv")))


@dataclass
class MethodGrid:
    """The methods and budgets a benchmark runs, and the settings they share (the CLI's defaults)."""

    methods: tuple[str, ...] = DEFAULT_METHODS
    budgets: tuple[int, ...] = (128, 256, 512, 1024, 2048)
    window_size: int = 32
    kernel_size: int = 15
    pooling: str = "maxpool"
    gqa_aggregation: str = "mean"
    max_new_tokens: int = 24
    seed: int = 0

    def settings(self, method: str, budget: int | None) -> CompressionSettings:
        """The settings of one cell; ``method`` is a label (:func:`method_labels`)."""
        return CompressionSettings(method=policy_of(method), window_size=self.window_size,
                                   max_capacity_prompt=budget or self.window_size + 1, kernel_size=self.kernel_size,
                                   pooling=self.pooling, gqa_aggregation=self.gqa_aggregation, seed=self.seed,
                                   layer_budgets="pyramid" if method.endswith(LAYER_ALLOTMENT) else None)

    def cells(self) -> list[tuple[str, int | None]]:
        """(method, budget) pairs; the full cache has no budget."""
        return [(m, None) for m in self.methods if m == "full"] + [
            (m, b) for m in self.methods if m != "full" for b in self.budgets]

    def needs_attention_sums(self) -> bool:
        """Whether a shared prefix must keep attention sums (a method such as H2O reads them)."""
        from ..engine.policies import POLICIES

        return any(POLICIES[policy_of(m)].accumulates_attention for m in self.methods)
