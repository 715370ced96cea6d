"""Methods x budgets and the compression settings shared by every cell of a benchmark grid.

A method is a label: a policy name (``snapkv``, ``defensivekv``...), optionally followed by suffixes that change one
setting of the grid's for that method alone, as ``snapkv ask``'s options would, in this order:

- ``+pyramid``: PyramidKV's per-layer allotment (the budget decreasing with depth at the same mean), for a policy
  whose own is uniform (``defensivekv+pyramid``);
- ``+uniformheads``: every KV head of a layer the same budget, for a policy whose own split is adaptive
  (``defensivekv+uniformheads``: DefensiveKV's votes and ranking without AdaKV's padded layout);
- ``+sharedheads``: every KV head of a layer the same positions (``head_budgets="shared"``), for a policy whose
  ranking differs between heads (not with ``+uniformheads``: both set the heads' split);
- ``+causalpool``: the causal pooling window (``pooling_window="causal"``), for a policy that pools votes;
- ``+wholewords``: every token of a word ranks with its best one (``whole_words=True``), for any compressing policy.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from itertools import combinations

from ..engine import CompressionSettings

DEFAULT_METHODS = ("full", "snapkv", "pyramidkv", "h2o", "streamingllm", "random")
# label suffix -> (the settings field it sets, its value, whether it changes a policy class), in label order
SUFFIXES: dict[str, tuple[str, str | bool, Callable[[type], bool]]] = {
    "pyramid": ("layer_budgets", "pyramid", lambda policy: policy.default_layer_budgets == "uniform"),
    "uniformheads": ("head_budgets", "uniform", lambda policy: policy.default_head_budgets == "adaptive"),
    "sharedheads": ("head_budgets", "shared", lambda policy: not policy.same_on_every_head),
    "causalpool": ("pooling_window", "causal", lambda policy: policy.pools_votes),
    "wholewords": ("whole_words", True, lambda policy: True),
}


def parse_label(label: str) -> tuple[str, dict[str, str | bool]]:
    """A method label as (policy name, settings overrides): ``defensivekv+pyramid`` -> ``("defensivekv",
    {"layer_budgets": "pyramid"})``. Only labels of :func:`method_labels` are meant (the CLI checks)."""
    policy, *suffixes = label.split("+")
    return policy, {SUFFIXES[suffix][0]: SUFFIXES[suffix][1] for suffix in suffixes}


def method_labels() -> tuple[str, ...]:
    """Every label a grid takes: each policy, and each compressing policy with any of the suffixes that change it
    (in :data:`SUFFIXES`' order), at most one suffix per setting."""
    from ..engine.policies import POLICIES

    labels = []
    for name, policy in POLICIES.items():
        changing = [suffix for suffix, (_, _, changes) in SUFFIXES.items() if policy.compresses and changes(policy)]
        labels += ["+".join((name, *chosen)) for count in range(len(changing) + 1)
                   for chosen in combinations(changing, count)
                   if len({SUFFIXES[suffix][0] for suffix in chosen}) == len(chosen)]
    return tuple(labels)


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
        policy, overrides = parse_label(method)
        return CompressionSettings(method=policy, window_size=self.window_size,
                                   max_capacity_prompt=budget or self.window_size + 1, kernel_size=self.kernel_size,
                                   pooling=self.pooling, gqa_aggregation=self.gqa_aggregation, seed=self.seed,
                                   **overrides)

    def cells(self) -> list[tuple[str, int | None]]:
        """(method, budget) pairs; the full cache has no budget."""
        return [(m, None) for m in self.methods if m == "full"] + [
            (m, b) for m in self.methods if m != "full" for b in self.budgets]

    def needs_attention_sums(self) -> bool:
        """Whether a shared prefix must keep attention sums (a method such as H2O reads them)."""
        from ..engine.policies import POLICIES

        return any(POLICIES[parse_label(m)[0]].accumulates_attention for m in self.methods)
