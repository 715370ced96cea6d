"""Methods x budgets and the compression settings shared by every cell of a benchmark grid.

A method is a label: a method's name (``snapkv``, ``defensivekv``...), optionally followed by suffixes that change
one setting of the grid's for that method alone, as ``snapkv ask``'s options would (``defensivekv+pyramid``,
``defensivekv+uniformheads+causalpool``). The suffixes, what they set and which methods they apply to are declared
with the settings (:class:`snapkv_cli.engine.settings.Suffix`); :data:`SUFFIXES` and :func:`methods_help` follow from
that declaration, and a grid's shared settings default to the command line's (:func:`snapkv_cli.defaults.cli_setting`).
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations

from .. import defaults
from ..engine.methods import METHODS, Method
from ..engine.settings import (
    CompressionSettings,
    Suffix,
    alternatives,
    cli_setting,
    library_default,
    settings_declarations,
)
from ..generation.options import generation_default

DEFAULT_METHODS = tuple(name for name, method in METHODS.items() if method.benchmarked_by_default)
# Tokens generated per answer where a benchmark needs another number than --max-new-tokens' declared default
# (snapkv_cli.generation.options): the needle's one sentence, and speed's decode steps per configuration. bench
# accuracy (and sample) give each task its own (snapkv_cli.bench.tasks.NEW_TOKENS).
BENCH_NEW_TOKENS = {"niah": 48, "speed": 64}
# label suffix -> (the settings field it sets, its declaration), in label order
SUFFIXES: dict[str, tuple[str, Suffix]] = {
    suffix.name: (name, suffix) for name, suffix in sorted(
        ((name, suffix) for name, declared in settings_declarations().items() for suffix in declared.suffixes),
        key=lambda pair: pair[1].rank)}


def changes(suffix: str, method: Method) -> bool:
    """Whether ``suffix`` changes anything for ``method``: a compressing method the setting applies to, whose own
    value differs (and that the suffix's ``when`` accepts)."""
    name, declared = SUFFIXES[suffix]
    setting = settings_declarations()[name]
    own = getattr(method, setting.own) if setting.own else library_default(name)
    return (method.compresses and setting.applies(method) and own != declared.value
            and (declared.when is None or declared.when(method)))


def parse_label(label: str) -> tuple[str, dict[str, str | bool]]:
    """A method label as (method name, settings overrides): ``defensivekv+pyramid`` -> ``("defensivekv",
    {"layer_budgets": "pyramid"})``. Only labels of :func:`method_labels` are meant (the CLI checks)."""
    method, *suffixes = label.split("+")
    return method, {SUFFIXES[suffix][0]: SUFFIXES[suffix][1].value for suffix in suffixes}


def method_labels() -> tuple[str, ...]:
    """Every label a grid takes: each method, and each compressing method with any of the suffixes that change it
    (in :data:`SUFFIXES`' order), at most one suffix per setting."""
    labels = []
    for name, method in METHODS.items():
        changing = [suffix for suffix in SUFFIXES if changes(suffix, method)]
        labels += ["+".join((name, *chosen)) for count in range(len(changing) + 1)
                   for chosen in combinations(changing, count)
                   if len({SUFFIXES[suffix][0] for suffix in chosen}) == len(chosen)]
    return tuple(labels)


def default_label() -> str:
    """The command line's default method (:data:`snapkv_cli.defaults.METHOD` with its ``METHOD_SETTINGS``) as a
    grid label, such as ``defensivekv+uniformheads+causalpool``: what a benchmark runs to measure what users get."""
    suffixes = [suffix for suffix, (name, declared) in SUFFIXES.items()
                if defaults.METHOD_SETTINGS.get(name, object()) == declared.value]
    return "+".join([defaults.METHOD, *suffixes])


def _and(names: list[str]) -> str:
    return alternatives(names).replace(" or ", " and ")


def methods_help() -> str:
    """The help of a benchmark's ``--methods``: every method, the label grammar, each suffix with the methods it
    applies to."""
    compressing = [name for name, method in METHODS.items() if method.compresses]
    parts = []
    for suffix, (_, declared) in SUFFIXES.items():
        names = [name for name, method in METHODS.items() if changes(suffix, method)]
        others = [name for name in compressing if name not in names]
        methods = (_and(names) if len(names) <= len(others) else
                   f"any compressing method but {_and(others)}" if others else "any compressing method")
        parts.append(f"+{suffix} ({declared.help}, for {methods})")
    return (f"Comma-separated methods: a method ({alternatives(list(METHODS))}), optionally with, in this order, "
            + ", ".join(parts) +
            "; at most one suffix per setting.")


@dataclass
class MethodGrid:
    """The methods and budgets a benchmark runs, and the settings they share (the CLI's defaults)."""

    methods: tuple[str, ...] = DEFAULT_METHODS
    budgets: tuple[int, ...] = (128, 256, 512, 1024, 2048)
    window_size: int = cli_setting("window_size")
    kernel_size: int = cli_setting("kernel_size")
    pooling: str = cli_setting("pooling")
    gqa_aggregation: str = cli_setting("gqa_aggregation")
    max_new_tokens: int = generation_default("max_new_tokens")
    seed: int = 0

    def settings(self, method: str, budget: int | None) -> CompressionSettings:
        """The settings of one cell; ``method`` is a label (:func:`method_labels`)."""
        name, overrides = parse_label(method)
        return CompressionSettings(method=name, window_size=self.window_size,
                                   max_capacity_prompt=budget or self.window_size + 1, kernel_size=self.kernel_size,
                                   pooling=self.pooling, gqa_aggregation=self.gqa_aggregation, seed=self.seed,
                                   **overrides)

    def cells(self) -> list[tuple[str, int | None]]:
        """(method, budget) pairs; the full cache has no budget."""
        return [(m, None) for m in self.methods if m == "full"] + [
            (m, b) for m in self.methods if m != "full" for b in self.budgets]

    def needs_attention_sums(self) -> bool:
        """Whether a shared prefix must keep attention sums (a method such as H2O reads them)."""
        return any(METHODS[parse_label(m)[0]].accumulates_attention for m in self.methods)
