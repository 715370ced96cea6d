"""The options every model-running command shares, declared once, and the :class:`RunOptions` they become.

:func:`run_options` adds every option in :data:`RUN_OPTIONS` to a command's signature (Typer reads signatures) and
hands the command one ``choices: RunChoices`` made of them, so ``ask``, ``inspect``, ``chat`` and ``batch`` all
take the same options with the same names, defaults, environment variables and checks. The checks come in two
steps, so that a mistake is reported before torch is imported: :func:`check_run_values` (the values' form, the
template, the compression settings, the generation options) and the command's reading of its documents, then
:meth:`RunChoices.build` (the model's name, then the engine). To give every such command a new option: add its
:class:`SharedOption` to :data:`RUN_OPTIONS` and use its value in :func:`check_run_values` or
:meth:`RunChoices.build`.
The compression options (:data:`SETTING_OPTIONS`) are generated from the settings' declaration
(:mod:`snapkv_cli.engine.settings`) and the generation options (:data:`GENERATION_OPTIONS`, and the model's among
:data:`MODEL_OPTIONS`) from theirs (:mod:`snapkv_cli.generation.options`): a setting or a generation option declared
with a flag needs nothing here. :data:`MODEL_OPTIONS` are the ones the benchmarks take too (:func:`model_options`);
a benchmark takes another generation option with :func:`generation_option`.
"""

from __future__ import annotations

import functools
import inspect
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Optional

import typer

from ..answering.documents import (
    DEFAULT_MAX_DOCUMENT_MB,
    MAX_DOCUMENT_MB_ENV,
    Document,
    DocumentReader,
    parse_page_ranges,
)
from ..answering.prompting import TRUNCATIONS, Template, load_template
from ..defaults import CPU_AUTO_BFLOAT16, METHOD, METHOD_SETTINGS
from ..doc_cache import DEFAULT_CAP_MB, DOC_CACHE_ENV, DOC_CACHE_MB_ENV
from ..engine.settings import (
    CompressionSettings,
    Setting,
    alternatives,
    cli_setting,
    library_default,
    settings_declarations,
    with_defaults,
)
from ..errors import InvalidValue, UserError
from ..generation.options import (
    GenerationOptions,
    choices_text,
    generation_declarations,
    generation_default,
    generation_flag,
)
from ..models.placement import QUANTIZATIONS, parse_device, parse_dtype, parse_quantize
from ..models.sources import check_reachable, model_source

MODEL_PANEL, COMPRESSION_PANEL, PROMPT_PANEL, OUTPUT_PANEL = "Model", "Compression", "Prompt and answer", "Output"
_DECLARED = object()  # a default left to the declaration


@dataclass(frozen=True)
class SharedOption:
    """One command-line option shared by several commands: its parameter name, type, default and Typer option."""

    name: str
    annotation: Any
    default: Any
    option: Any  # typer.Option(...)

    def parameter(self) -> inspect.Parameter:
        return inspect.Parameter(self.name, inspect.Parameter.KEYWORD_ONLY, default=self.default,
                                 annotation=Annotated[self.annotation, self.option])


def _option(name: str, annotation, default, *flags: str, panel: str, **kwargs) -> SharedOption:
    return SharedOption(name, annotation, default, typer.Option(*flags, rich_help_panel=panel, **kwargs))


def generation_help(name: str) -> str:
    """The help of the generation option ``name``'s option: its declared help, naming the other options' flags, and
    the values it takes, each with what it means, where it declares them."""
    flags = {other: generation_flag(other) for other, declared in generation_declarations().items() if declared.flag}
    declared = generation_declarations()[name]
    text = declared.help.format(**flags)
    return f"{text.removesuffix('.')}: {choices_text(declared)}." if declared.choices else text


def _generation_kind(name: str):
    """The type of the generation option ``name``'s value, as Typer reads it (``Optional[int]`` for ``int | None``)."""
    kind = typing.get_type_hints(GenerationOptions)[name]
    kinds = [each for each in typing.get_args(kind) if each is not type(None)]
    return Optional[kinds[0]] if len(kinds) < len(typing.get_args(kind)) else kind


def _generation_details(name: str) -> dict:
    """The Typer option's details of the generation option ``name``: its declared help, environment variable and
    lowest value."""
    declared = generation_declarations()[name]
    return dict(envvar=declared.envvar, min=declared.min, help=generation_help(name))


def generation_option(name: str, default=_DECLARED, *, shown: str | None = None, min: int | None = None):
    """The ``typer.Option`` of the generation option ``name`` for a command's own signature: its declared flag,
    help, environment variable and lowest value, with ``default`` (and ``min``) where the command needs another than
    the declared one (``shown``: how the help says that default, where it is not a plain value)."""
    details = _generation_details(name)
    if min is not None:
        details["min"] = min
    if shown is not None:
        details["show_default"] = shown
    return typer.Option(generation_default(name) if default is _DECLARED else default,
                        generation_declarations()[name].flag, **details)


def _generation_option(name: str, *, panel: str) -> SharedOption:
    """The shared option of one generation option, from its declaration."""
    return _option(name, _generation_kind(name), generation_default(name), generation_declarations()[name].flag,
                   panel=panel, **_generation_details(name))


MODEL_OPTIONS: tuple[SharedOption, ...] = (
    _option("model", Optional[str], None, "--model", "-m", envvar="SNAPKV_MODEL", panel=MODEL_PANEL,
            help="A built-in model (snapkv models list), a local directory, a .gguf file or a Hugging Face id "
                 "org/name (default: SmolLM2-135M-Instruct)."),
    _option("device", str, "auto", "--device", envvar="SNAPKV_DEVICE", panel=MODEL_PANEL,
            help="auto, cpu, cuda or cuda:N."),
    _option("dtype", str, "auto", "--dtype", panel=MODEL_PANEL,
            help="auto, float32, bfloat16 or float16 (auto: bfloat16 on a GPU that has it, else float16; on a CPU "
                 + ("bfloat16 where it computes it natively, else float32)." if CPU_AUTO_BFLOAT16 else
                    "float32; bfloat16 prefills faster where the CPU computes it natively).")),
    _option("quantize", Optional[str], None, "--quantize", panel=MODEL_PANEL,
            help="Quantize the weights: " + ", ".join(f"{name} ({what})" for name, what in QUANTIZATIONS.items())
                 + "; needs torchao, the int8 extra of the package (default: none)."),
    _option("device_map", Optional[str], None, "--device-map", panel=MODEL_PANEL,
            help="Shard the model over devices with accelerate (e.g. auto); overrides --device."),
    *(_generation_option(name, panel=MODEL_PANEL) for name, declared in generation_declarations().items()
      if declared.flag is not None and declared.with_model),
)


def _setting_flag(name: str, value) -> str:
    """The option that gives the setting ``name`` this value: ``--pooling-window causal`` (the default method's
    settings, the only ones written this way, are all valued options, none an on/off flag)."""
    return f"{settings_declarations()[name].flag} {value}"


def setting_help(name: str) -> str:
    """The help of the compression setting ``name``'s option: its declared help, the values it takes and, where the
    method decides, its default in words."""
    declared, default = settings_declarations()[name], library_default(name)
    text = declared.help.removesuffix(".")
    if declared.choices:
        meanings = declared.choices if isinstance(declared.choices, Mapping) else dict.fromkeys(declared.choices, "")
        text += ": " + alternatives(
            f"{value} ({with_defaults(getattr(meaning, 'description', meaning))})" if meaning else value
            for value, meaning in meanings.items())
    if name == "method":
        text += (f" (default: {METHOD} with "
                 f"{' and '.join(_setting_flag(key, value) for key, value in METHOD_SETTINGS.items())}, chosen by "
                 "measurement)")
    elif _method_decides(name):
        own = "the method's own" if default is None else default
        text += (f" (default: {METHOD_SETTINGS[name]} for the default method, {own} otherwise)"
                 if name in METHOD_SETTINGS else f" (default: {own})")
    return text + "."


def _method_decides(name: str) -> bool:
    """Whether the option of the setting ``name`` is None unless given, the method deciding: the method itself, a
    setting whose library default is the method's own, one the default method comes with."""
    return name == "method" or name in METHOD_SETTINGS or library_default(name) is None


def _setting_option(name: str, declared: Setting) -> SharedOption:
    """The option of one compression setting, from its declaration."""
    default = None if _method_decides(name) else cli_setting(name)
    kind = str if declared.parse is not None or library_default(name) is None else type(library_default(name))
    return _option(name, Optional[kind] if default is None else kind,
                   str(default) if declared.parse is not None and default is not None else default,
                   declared.flag, panel=COMPRESSION_PANEL, help=setting_help(name))


# the compression options: one per setting declared with a flag (snapkv_cli.engine.settings)
SETTING_OPTIONS: tuple[SharedOption, ...] = tuple(
    _setting_option(name, declared) for name, declared in settings_declarations().items() if declared.flag is not None)

# the generation options of every command that answers: one per option declared with a flag
# (snapkv_cli.generation.options), those of the model options among MODEL_OPTIONS
GENERATION_OPTIONS: tuple[SharedOption, ...] = tuple(
    _generation_option(name, panel=PROMPT_PANEL) for name, declared in generation_declarations().items()
    if declared.flag is not None and not declared.with_model)

RUN_OPTIONS: tuple[SharedOption, ...] = MODEL_OPTIONS + SETTING_OPTIONS + GENERATION_OPTIONS + (
    _option("pages", Optional[str], None, "--pages", panel=PROMPT_PANEL, help="PDF pages to read, e.g. 3-7,10."),
    _option("max_document_mb", float, DEFAULT_MAX_DOCUMENT_MB, "--max-document-mb", min=0.001,
            envvar=MAX_DOCUMENT_MB_ENV, panel=PROMPT_PANEL, help="Refuse documents bigger than this many MB."),
    _option("template", Optional[str], None, "--template", panel=PROMPT_PANEL,
            help="Prompt template name (in prompts/) or path."),
    _option("truncate", Optional[str], None, "--truncate", panel=PROMPT_PANEL,
            help="If the document is too long: middle, start or end."),
    _option("cache_docs", bool, False, "--cache-docs/--no-cache-docs", envvar=DOC_CACHE_ENV, panel=PROMPT_PANEL,
            help="Keep the document's prefilled KV on disk, so a later run on it skips the prefill."),
    _option("cache_size", int, DEFAULT_CAP_MB, "--cache-size", min=1, envvar=DOC_CACHE_MB_ENV, panel=PROMPT_PANEL,
            help="Document cache cap in MB (least recently used entries are evicted)."),
    _option("as_json", bool, False, "--json", panel=OUTPUT_PANEL,
            help="Print JSON on stdout (one object per answer) instead of text."),
    _option("quiet", bool, False, "--quiet", "-q", panel=OUTPUT_PANEL, help="No report or progress on stderr."),
)


@dataclass(frozen=True)
class RunChoices:
    r"""The shared options of a command that runs the model, as given, with every check that needs neither torch nor
    a model already done (:func:`check_run_values`), the compression settings among them.

    A command reads its documents with :meth:`read` (a missing file, a directory, a page out of range fail here, in
    a fraction of a second), then :meth:`build`\ s the :class:`~snapkv_cli.answering.runner.RunOptions`, which checks
    the model's name and imports the engine (torch).
    """

    values: dict
    settings: CompressionSettings
    template: Template
    reader: DocumentReader
    generation: GenerationOptions

    def read(self, path: str, *, stdin=None) -> Document:
        """The document at ``path`` (``-``: stdin), read by :attr:`reader` (the options' pages and size limit)."""
        return self.reader.read(path, stdin=stdin)

    def build(self):
        """The :class:`~snapkv_cli.answering.runner.RunOptions`. The model's name is checked first, still without torch
        (a name that is no model fails here, before any download; a Hugging Face model that is not cached is looked for
        on the Hub, an error within seconds when the Hub cannot be reached)."""
        check_reachable(model_source(self.values["model"]))
        from ..answering.runner import RunOptions

        values = self.values
        return RunOptions(model=values["model"], device=values["device"], dtype=values["dtype"],
                          quantize=parse_quantize(values["quantize"]),
                          device_map=values["device_map"], settings=self.settings, generation=self.generation,
                          reader=self.reader, template=self.template,
                          truncate=values["truncate"],
                          doc_cache_mb=values["cache_size"] if values["cache_docs"] else None)


def compression_settings(values: dict) -> CompressionSettings:
    """The compression settings of the parsed options (torch-free): the default method with the settings it comes
    with unless the options say otherwise."""
    given = {option.name: values[option.name] for option in SETTING_OPTIONS if values[option.name] is not None}
    for name, declared in settings_declarations().items():
        if declared.parse is not None and name in given:
            given[name] = declared.parse(given[name])
    if "method" not in given:
        given = {**METHOD_SETTINGS, **given, "method": METHOD}
    if values["seed"] is not None:  # the random method's seed is the run's
        given["seed"] = values["seed"]
    try:
        return CompressionSettings(**given)
    except UserError:
        raise
    except ValueError as error:
        raise UserError(str(error)) from None


def generation_options(values: dict, *, model_only: bool = False) -> GenerationOptions:
    """The run's :class:`GenerationOptions` from the parsed options: every generation option declared with a flag
    (``model_only``: the model options', the rest at their defaults), each value checked by the declaration."""
    return GenerationOptions(**{name: values[name] for name, declared in generation_declarations().items()
                                if declared.flag is not None and (declared.with_model or not model_only)})


def check_run_values(values: dict) -> RunChoices:
    """The parsed shared options checked without torch or a model: the truncation, the template, the compression
    settings, the generation options, the page selection's form, the device's and dtype's names, the quantization
    and its library (the model's name is checked once the documents are read, by :meth:`RunChoices.build`)."""
    truncate = values["truncate"]
    if truncate is not None and truncate not in TRUNCATIONS:
        raise InvalidValue("truncate", truncate, f"one of {', '.join(TRUNCATIONS)}")
    template = load_template(values["template"])
    settings = compression_settings(values)
    generation = generation_options(values)
    if values["pages"]:
        parse_page_ranges(values["pages"])
    reader = DocumentReader(pages=values["pages"], max_document_mb=values["max_document_mb"])
    parse_device(values["device"])
    parse_dtype(values["dtype"])
    parse_quantize(values["quantize"])
    return RunChoices(values, settings, template, reader, generation)


@dataclass(frozen=True)
class Output:
    """Where a run's results go: JSON or text on stdout, and whether stderr stays silent."""

    as_json: bool
    quiet: bool


def _with_shared(shared: tuple[SharedOption, ...], build: Callable[[dict], dict]):
    """A decorator that adds ``shared`` options to a command and passes it what ``build`` makes of them."""

    def decorate(command):
        signature = inspect.signature(command, eval_str=True)
        own = [p for p in signature.parameters.values() if p.name not in ("options", "choices", "output")]
        names = [option.name for option in shared]

        @functools.wraps(command)
        def wrapper(*args, **kwargs):
            values = {name: kwargs.pop(name) for name in names}
            return command(*args, **kwargs, **build(values))

        wrapper.__signature__ = signature.replace(parameters=own + [option.parameter() for option in shared])
        wrapper.__annotations__ = {p.name: p.annotation for p in wrapper.__signature__.parameters.values()}
        return wrapper

    return decorate


def run_options(command):
    """Give ``command`` every shared option; it receives them checked as ``choices: RunChoices`` (it reads its
    documents with them, then builds its ``RunOptions``) and ``output: Output``."""
    return _with_shared(RUN_OPTIONS, lambda values: {
        "choices": check_run_values(values), "output": Output(values["as_json"], values["quiet"])})(command)


def model_options(command):
    """Give ``command`` the model options (:data:`MODEL_OPTIONS`); it receives them as ``options: RunOptions``
    (model, device, dtype, quantization, device map and the generation options declared ``with_model`` set; the rest
    at their defaults)."""

    def build(values: dict) -> dict:
        parse_device(values["device"])  # the names are checked before torch is imported
        parse_dtype(values["dtype"])
        quantize = parse_quantize(values["quantize"])
        generation = generation_options(values, model_only=True)
        check_reachable(model_source(values["model"]))
        from ..answering.runner import RunOptions

        return {"options": RunOptions(model=values["model"], device=values["device"], dtype=values["dtype"],
                                      quantize=quantize, device_map=values["device_map"], generation=generation)}

    return _with_shared(MODEL_OPTIONS, build)(command)
