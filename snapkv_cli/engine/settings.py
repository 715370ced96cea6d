"""Compression settings shared by every policy, declared once and validated once.

Each field of :class:`CompressionSettings` carries, in its metadata (:func:`setting`), what the rest of the program
shows of it: its command-line option and help, the values it takes, its place in the report and in the terminal
report, the benchmark label suffixes that set it, and which methods it applies to. The options of ``snapkv ask``,
``inspect``, ``chat`` and ``batch`` (:mod:`snapkv_cli.cli.options`), the report's settings block
(:mod:`snapkv_cli.answering.report`), the terminal report's method line and the benchmark labels and their help
(:mod:`snapkv_cli.bench.grid`) are generated from it. Free of torch: the command line reads it before any model loads.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from ..errors import BudgetTooSmall, InvalidValue
from .methods import METHODS, Method

# More tokens than any supported model's context: a fraction that keeps no more than the window even of this many
# tokens cannot work with any model, so it is refused before a model is loaded.
MAX_CONTEXT_TOKENS = 2**24


def compresses(method: Method) -> bool:
    return method.compresses


def pools_votes(method: Method) -> bool:
    return method.pools_votes


@dataclass(frozen=True)
class Suffix:
    """A benchmark label suffix (``snapkv+causalpool``) that sets its setting to ``value`` for that method alone.

    It is offered for a method the setting applies to whose own value differs, and that ``when`` (if given) accepts;
    ``rank`` is its place in a label (suffixes follow each other by rank).
    """

    name: str
    value: Any
    help: str
    rank: int
    when: Callable[[Method], bool] | None = None


@dataclass(frozen=True)
class Setting:
    """What the rest of the program shows of one setting (the metadata of a :class:`CompressionSettings` field).

    ``flag``: its option in ``ask``, ``inspect``, ``chat`` and ``batch`` (None: the library's only), with ``help``;
    ``parse`` turns the option's text into the value (the option then takes text). ``choices``: the values it takes,
    each with what it means (a mapping; a :class:`~.methods.Method`'s ``description`` for the methods).
    ``reported``: in the report's settings block, as applied to the prompt; ``given_as``: also as given, under this
    key. ``label``: how the terminal report's method line shows it (``{}`` is the value; a flag's label shows when it
    is on). ``applies``: the methods it changes anything for. ``own``: the :class:`~.methods.Method` fact that gives
    its value when it is None (the method's own). ``suffixes``: the benchmark label suffixes that set it.
    """

    help: str = ""
    flag: str | None = None
    parse: Callable[[str], Any] | None = None
    choices: Mapping[str, Any] | Collection[str] = ()
    reported: bool = False
    given_as: str | None = None
    label: str | None = None
    applies: Callable[[Method], bool] = compresses
    own: str | None = None
    suffixes: tuple[Suffix, ...] = ()


def setting(default, **declaration):
    """A :class:`CompressionSettings` field with its :class:`Setting`."""
    return field(default=default, metadata={"setting": Setting(**declaration)})


def settings_declarations(cls: type | None = None) -> dict[str, Setting]:
    """Every declared setting (:class:`Setting`) of ``cls`` (default: :class:`CompressionSettings`), by field name,
    in field order."""
    return {f.name: f.metadata["setting"] for f in fields(cls or CompressionSettings) if "setting" in f.metadata}


def library_default(name: str):
    """The library's default of the setting ``name`` (the paper's; the command line may use another)."""
    return CompressionSettings.__dataclass_fields__[name].default


def cli_setting(name: str):
    """The command line's default for the setting ``name``: :data:`snapkv_cli.defaults.CLI_DEFAULTS`', else the
    library's."""
    from ..defaults import CLI_DEFAULTS

    return CLI_DEFAULTS[name] if name in CLI_DEFAULTS else library_default(name)


def with_defaults(text: str) -> str:
    """A method's ``description`` or ``keeps`` (:mod:`.methods`) as shown: each ``{setting}`` in it (with a format
    spec if any) replaced by that setting's library default, so the text never restates a default that may change."""
    return text.format(**{field_.name: field_.default for field_ in fields(CompressionSettings)})


def alternatives(values) -> str:
    """``a, b or c``."""
    values = [str(value) for value in values]
    return values[0] if len(values) == 1 else f"{', '.join(values[:-1])} or {values[-1]}"


def parse_budget(text: str) -> int | float:
    """'1024' -> 1024 tokens; '0.1' -> a tenth of the prompt."""
    try:
        value = float(text)
    except ValueError:
        raise InvalidValue("budget", text, "a token count (e.g. 1024) or a fraction (e.g. 0.1)") from None
    if value.is_integer() and value >= 1:
        return int(value)
    if 0 < value < 1:
        return value
    raise InvalidValue("budget", text, "a token count >= 1 or a fraction in (0, 1)")


@dataclass(frozen=True)
class CompressionSettings:
    """What to keep of a prompt's KV cache.

    ``max_capacity_prompt`` is the number of prompt tokens each layer and KV head keeps (the
    observation window included), or, when it is a float in (0, 1), that fraction of the prompt.

    The votes are pooled over ``kernel_size`` positions (``pooling``: avgpool or maxpool) in a window
    ``pooling_window``: ``centered`` (SnapKV: ``kernel_size // 2`` positions either side) or ``causal`` (the position
    and the ``kernel_size - 1`` before it, so the tokens that follow a voted phrase share its votes: the code after
    "the pass code is" rather than the prose before it).

    How the budget is shared out, for any scoring method: ``layer_budgets`` ``uniform`` (every layer the same) or
    ``pyramid`` (PyramidKV: decreasing with depth, same mean); ``head_budgets`` ``uniform`` (every KV head the same)
    or ``adaptive`` (AdaKV: one top-k over all KV heads of a layer, each head keeping at least ``head_floor`` of its
    even share) or ``shared`` (every KV head of a layer keeps the same positions, each head's favourites first:
    :func:`snapkv_cli.engine.allotment.shared_ranking`). ``None`` takes the method's own choice (``pyramidkv`` is
    pyramid; ``adakv`` and ``defensivekv`` are adaptive; the rest uniform). ``critical_first_stage`` is CriticalKV's
    share of each head's budget chosen by attention alone (the rest by attention x projected value norm);
    ``chunk_size`` is ChunkKV's chunk length.

    ``whole_words``: every token of a word ranks with the word's best token, so a head keeps numbers and names whole
    (:mod:`snapkv_cli.engine.words`; the cache needs the prompt's word ids, which generation gives it).
    """

    method: str = setting("snapkv", flag="--method", help="The compression method", choices=METHODS)
    window_size: int = setting(32, flag="--window", help="Observation window: the last prompt tokens that vote.",
                               reported=True)
    max_capacity_prompt: int | float = setting(
        4096, flag="--budget", parse=parse_budget, reported=True, given_as="budget", label="budget {}",
        help="KV tokens kept per layer and head (window included), or a fraction such as 0.1.")
    kernel_size: int = setting(5, flag="--kernel", help="Pooling kernel size (odd).", reported=True,
                               label="kernel {}", applies=pools_votes)
    pooling: str = setting("avgpool", flag="--pooling", help="How the votes are pooled",
                           choices=("avgpool", "maxpool"), reported=True, label="{}", applies=pools_votes)
    pooling_window: str = setting(
        "centered", flag="--pooling-window", help="Where the pooling kernel sits",
        choices={"centered": "on each position, as SnapKV", "causal": "the position and the ones before it"},
        reported=True, label="{} window", applies=pools_votes,
        suffixes=(Suffix("causalpool", "causal", "the causal pooling window", rank=4),))
    gqa_aggregation: str = setting("mean", flag="--gqa", help="How query heads of a KV group combine their votes",
                                   choices=("mean", "max"), reported=True)
    sink_tokens: int = 4
    pyramid_beta: int = 20
    layer_budgets: str | None = setting(
        None, flag="--layer-budgets", help="How the budget is shared over layers",
        choices={"uniform": "", "pyramid": "decreasing with depth, same mean"}, reported=True, label="{} layers",
        own="default_layer_budgets",
        suffixes=(Suffix("pyramid", "pyramid", "PyramidKV's per-layer allotment on top of it", rank=1),))
    head_budgets: str | None = setting(
        None, flag="--head-budgets", help="How a layer's budget is shared over KV heads",
        choices={"uniform": "", "adaptive": "one top-k over the layer's heads, as AdaKV",
                 "shared": "the same positions for every head"},
        reported=True, label="{} heads", own="default_head_budgets",
        suffixes=(Suffix("uniformheads", "uniform", "the same budget for every KV head", rank=2),
                  Suffix("sharedheads", "shared", "the same positions for every KV head", rank=3,
                         when=lambda method: not method.same_on_every_head)))
    head_floor: float = 0.2
    critical_first_stage: float = 0.5
    chunk_size: int = 10
    whole_words: bool = setting(
        False, flag="--whole-words/--no-whole-words", reported=True, label="whole words",
        help="Keep every token of a word (a number, a name) with the word's best one, so that codes are kept whole.",
        suffixes=(Suffix("wholewords", True, "every token of a word ranked with its best one", rank=5),))
    query_block_size: int = 256
    seed: int = 0

    def __post_init__(self) -> None:
        for name, declared in settings_declarations(type(self)).items():
            value = getattr(self, name)
            if declared.choices and value not in declared.choices and (value is not None or declared.own is None):
                raise ValueError(f"unknown {name} {value!r}: choose {alternatives(declared.choices)}")
        if not isinstance(self.window_size, int) or self.window_size < 1:
            raise ValueError(f"window_size must be a positive integer, got {self.window_size!r}")
        capacity = self.max_capacity_prompt
        if isinstance(capacity, bool) or not isinstance(capacity, (int, float)):
            raise ValueError(f"max_capacity_prompt must be a token count or a fraction, got {capacity!r}")
        if isinstance(capacity, float) and not capacity.is_integer():
            if not 0.0 < capacity < 1.0:
                raise ValueError(
                    f"max_capacity_prompt {capacity} is neither a token count nor a fraction in (0, 1): "
                    "give e.g. 1024 or 0.1"
                )
            if math.ceil(capacity * MAX_CONTEXT_TOKENS) <= self.window_size:
                raise BudgetTooSmall(capacity, math.ceil(capacity * MAX_CONTEXT_TOKENS), self.window_size,
                                     MAX_CONTEXT_TOKENS)
        elif int(capacity) <= self.window_size:
            raise ValueError(
                f"max_capacity_prompt ({int(capacity)}) must exceed window_size ({self.window_size}): "
                "raise the budget or shrink the window"
            )
        if not isinstance(self.kernel_size, int) or self.kernel_size < 1 or self.kernel_size % 2 == 0:
            raise ValueError(f"kernel_size must be a positive odd integer such as 5 or 7, got {self.kernel_size!r}")
        if self.sink_tokens < 0 or self.pyramid_beta < 1 or self.query_block_size < 1:
            raise ValueError("sink_tokens must be >= 0, pyramid_beta and query_block_size >= 1")
        for name in ("head_floor", "critical_first_stage"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be a fraction between 0 and 1, got {value!r}")
        if isinstance(self.chunk_size, bool) or not isinstance(self.chunk_size, int) or self.chunk_size < 1:
            raise ValueError(f"chunk_size must be a positive integer, got {self.chunk_size!r}")
        if not isinstance(self.whole_words, bool):
            raise ValueError(f"whole_words must be True or False, got {self.whole_words!r}")

    @property
    def is_fraction(self) -> bool:
        capacity = self.max_capacity_prompt
        return isinstance(capacity, float) and not capacity.is_integer()

    def capacity_for(self, prompt_length: int) -> int:
        """Tokens each layer/KV head keeps for a prompt of ``prompt_length`` tokens (before per-layer allocation)."""
        if not self.is_fraction:
            return int(self.max_capacity_prompt)
        if prompt_length <= self.window_size:
            return prompt_length  # the whole prompt is the window: nothing to compress
        capacity = math.ceil(self.max_capacity_prompt * prompt_length)
        if capacity <= self.window_size:
            raise BudgetTooSmall(self.max_capacity_prompt, capacity, self.window_size, prompt_length)
        return capacity

    def applied(self, prompt_length: int) -> dict[str, Any]:
        """The reported settings as applied to a prompt of ``prompt_length`` tokens, in declaration order: the
        method's own choice where a setting is None, the budget in tokens (and, ``given_as``, as given)."""
        method = METHODS[self.method]
        values = {}
        for name, declared in settings_declarations(type(self)).items():
            if declared.reported:
                value = getattr(self, name)
                if declared.own is not None and value is None:
                    value = getattr(method, declared.own)
                values[name] = self.capacity_for(prompt_length) if name == "max_capacity_prompt" else value
                if declared.given_as is not None:
                    values[declared.given_as] = getattr(self, name)
        return values

    def as_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}
