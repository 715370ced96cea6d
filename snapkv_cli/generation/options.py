"""How to prefill and decode, declared once: :class:`GenerationOptions`, each field with what the rest of the program
shows of it.

Each field carries, in its metadata (:func:`option`), its command-line option (flag, help, environment variable,
lowest value, the values it takes), whether the report shows it (and under which key) and its label in tables. The
options of ``snapkv ask``, ``inspect``, ``chat`` and ``batch`` and those the benchmarks share
(:mod:`snapkv_cli.cli.options`), the check of a value (:class:`GenerationOptions` itself), the flags the ``Error:``
lines name (:mod:`snapkv_cli.cli.errors`), the report's ``stop`` block (:mod:`snapkv_cli.answering.report`) and the
benchmark tables' labels follow from it. Free of torch: the command line reads it before any model loads.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from ..engine.settings import alternatives
from ..errors import InvalidValue


@dataclass(frozen=True)
class GenerationOption:
    """What the rest of the program shows of one generation option (the metadata of a :class:`GenerationOptions`
    field).

    ``flag``: its option in every command that answers (None: the library's only), with ``help`` (``{name}`` in it
    is the flag of the option ``name``), ``envvar`` (the environment variable that sets it) and ``min`` (its lowest
    value). ``choices``: the only values it takes, each with what it means (shown in its help; "" for nothing to
    add), and ``aliases`` other spellings of them; a value is taken in any case, and any other is an
    :class:`~snapkv_cli.errors.InvalidValue` (:func:`choice`). ``with_model``: it is one of the model options, which
    every command that loads a model takes, the benchmarks included. ``reported``: the report's ``stop`` block shows
    it, under ``json`` (default: its name); ``label``: how tables name it.
    """

    help: str = ""
    flag: str | None = None
    envvar: str | None = None
    min: int | float | None = None
    choices: Mapping[str, str] = field(default_factory=dict)
    aliases: Mapping[str, str] = field(default_factory=dict)
    with_model: bool = False
    json: str | None = None
    reported: bool = False
    label: str | None = None


def option(default, **declaration):
    """A :class:`GenerationOptions` field with its :class:`GenerationOption`."""
    return field(default=default, metadata={"generation": GenerationOption(**declaration)})


def generation_declarations(cls: type | None = None) -> dict[str, GenerationOption]:
    """Every declared option (:class:`GenerationOption`) of ``cls`` (default: :class:`GenerationOptions`), by field
    name, in field order."""
    return {f.name: f.metadata["generation"] for f in fields(cls or GenerationOptions) if "generation" in f.metadata}


def generation_default(name: str) -> Any:
    """The default of the generation option ``name``: the command line's and the library's."""
    return GenerationOptions.__dataclass_fields__[name].default


def reported_options(options: GenerationOptions) -> dict[str, Any]:
    """The options declared ``reported``, as the report's JSON shows them: by their JSON keys, in declaration order
    (a tuple as a list)."""
    return {declared.json or name: list(value) if isinstance(value := getattr(options, name), tuple) else value
            for name, declared in generation_declarations(type(options)).items() if declared.reported}


def choice(name: str, value: Any, declared: GenerationOption | None = None) -> Any:
    """The value of the generation option ``name`` (declared ``declared``, default: as :class:`GenerationOptions`
    declares it) as one of its ``choices``: any case, an alias as the value it stands for. An option without choices
    takes any value; a value outside them is an :class:`~snapkv_cli.errors.InvalidValue`."""
    declared = declared or generation_declarations()[name]
    if not declared.choices:
        return value
    key = value.strip().lower() if isinstance(value, str) else value
    key = declared.aliases.get(key, key)
    if key not in declared.choices:
        raise InvalidValue(name, value, alternatives(declared.choices))
    return key


def choices_text(declared: GenerationOption) -> str:
    """The values an option takes, each with what it means where it says: ``a, b (what b does) or c``."""
    return alternatives(f"{value} ({meaning})" if meaning else value for value, meaning in declared.choices.items())


def generation_flag(name: str, *, off: bool = False) -> str:
    """The flag that sets the generation option ``name`` (an on/off pair's first, or with ``off`` its second):
    ``--max-new-tokens``, ``--no-stop-on-repeat``."""
    on, _, off_flag = generation_declarations()[name].flag.partition("/")
    return off_flag if off else on


@dataclass(frozen=True)
class GenerationOptions:
    """How to prefill and decode: ``max_new_tokens`` (also the room kept for the answer in the context),
    ``temperature`` (0 is greedy), ``seed`` (sampling), ``stop_at_eos``, ``prefill_chunk`` (prefill in chunks
    of that many tokens to bound activation memory; the selection stays exact; None is one pass),
    ``stop_strings``: the answer ends before the first of these (after its first visible character; a base
    model's rule, :data:`.stopping.BASE_MODEL_STOP`), ``stop_on_repeat``: an answer caught in a loop
    ends there (:data:`.stopping.LOOP_RULE`), and ``decode_weights``: ``same`` (the weights as loaded),
    ``bfloat16`` (the decoding steps' products read bfloat16 copies of a float32 model's weights,
    :mod:`.decode_path`) or ``int4`` (4-bit codes where the weights are 4-bit blocks, :mod:`.four_bit`).

    A value outside an option's declared ``choices`` is an :class:`~snapkv_cli.errors.InvalidValue` here, before any
    model loads; one of them in another case, or an alias, is kept as the value it names."""

    max_new_tokens: int = option(
        128, flag="--max-new-tokens", min=1, label="new tokens",
        help="Most tokens to generate per answer (also the room kept for it in the context).")
    temperature: float = option(0.0, flag="--temperature", min=0.0, help="0 is greedy.")
    seed: int | None = option(None, flag="--seed", help="Random seed (sampling, the random method).")
    stop_at_eos: bool = option(True)
    prefill_chunk: int | None = option(
        None, flag="--prefill-chunk", min=1, envvar="SNAPKV_PREFILL_CHUNK", with_model=True,
        help="Prefill in chunks of this many tokens (bounds activation memory; selection stays exact) "
             "(default: one pass).")
    stop_strings: tuple[str, ...] = option((), json="strings", reported=True)
    stop_on_repeat: bool = option(
        True, flag="--stop-on-repeat/--no-stop-on-repeat", reported=True,
        help="End an answer caught in a loop (the same run of tokens again and again) instead of letting it run to "
             "{max_new_tokens}.")
    decode_weights: str = option(
        "same", flag="--decode-weights", with_model=True, aliases={"bf16": "bfloat16"},
        choices={"same": "the weights as loaded",
                 "bfloat16": "bfloat16 copies of a float32 model's Linear weights for one-token decoding steps "
                             "(a CPU); the prefill, attention and KV cache stay float32",
                 "int4": "as bfloat16, but the layers whose weights are 4-bit blocks (a Q4_1 GGUF's, as the "
                         "built-in default model's) multiply by those 4-bit codes"},
        help="The weights the decoding steps multiply by.")

    def __post_init__(self) -> None:
        for name, declared in generation_declarations(type(self)).items():
            if declared.choices:
                object.__setattr__(self, name, choice(name, getattr(self, name), declared))
