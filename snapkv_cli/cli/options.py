"""The options every model-running command shares, declared once, and the :class:`RunOptions` they become.

:func:`run_options` adds every option in :data:`RUN_OPTIONS` to a command's signature (Typer reads signatures) and
hands the command one ``choices: RunChoices`` made of them, so ``ask``, ``inspect``, ``chat`` and ``batch`` all
take the same options with the same names, defaults, environment variables and checks. The checks come in two
steps, so that a mistake is reported before torch is imported: :func:`check_run_values` (the values' form, the
template, the compression settings) and the command's reading of its documents, then :meth:`RunChoices.build` (the
model's name, then the engine). To give every such command a new option: add its :class:`SharedOption` to
:data:`RUN_OPTIONS` and use its value in :func:`check_run_values` or :meth:`RunChoices.build`.
The compression options (:data:`SETTING_OPTIONS`) are generated from the settings' declaration
(:mod:`snapkv_cli.engine.settings`): a compression setting declared with a flag needs nothing here.
:data:`MODEL_OPTIONS` are the ones the benchmarks take too (:func:`model_options`).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Optional

import typer

from ..defaults import CPU_AUTO_BFLOAT16, MAX_NEW_TOKENS, METHOD, METHOD_SETTINGS, cli_setting
from ..doc_cache import DEFAULT_CAP_MB, DOC_CACHE_ENV, DOC_CACHE_MB_ENV
from ..documents import (
    DEFAULT_MAX_DOCUMENT_MB,
    MAX_DOCUMENT_MB_ENV,
    Document,
    load_document,
    megabytes,
    parse_page_ranges,
)
from ..engine.settings import CompressionSettings, Setting, alternatives, library_default, settings_declarations
from ..errors import InvalidValue, UserError
from ..models.placement import (
    DECODE_WEIGHTS,
    QUANTIZATIONS,
    parse_decode_weights,
    parse_device,
    parse_dtype,
    parse_quantize,
)
from ..models.sources import check_reachable, model_source
from ..prompting import TRUNCATIONS, Template, load_template

MODEL_PANEL, COMPRESSION_PANEL, PROMPT_PANEL, OUTPUT_PANEL = "Model", "Compression", "Prompt and answer", "Output"


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
    _option("decode_weights", str, "same", "--decode-weights", panel=MODEL_PANEL,
            help="The weights the decoding steps multiply by: " + ", ".join(
                f"{name} ({what})" for name, what in DECODE_WEIGHTS.items()) + "."),
    _option("device_map", Optional[str], None, "--device-map", panel=MODEL_PANEL,
            help="Shard the model over devices with accelerate (e.g. auto); overrides --device."),
    _option("prefill_chunk", Optional[int], None, "--prefill-chunk", min=1, envvar="SNAPKV_PREFILL_CHUNK",
            panel=MODEL_PANEL,
            help="Prefill in chunks of this many tokens (bounds activation memory; selection stays exact) "
                 "(default: one pass)."),
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
            f"{value} ({getattr(meaning, 'description', meaning)})" if meaning else value
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

RUN_OPTIONS: tuple[SharedOption, ...] = MODEL_OPTIONS + SETTING_OPTIONS + (
    _option("max_new_tokens", int, MAX_NEW_TOKENS, "--max-new-tokens", min=1, panel=PROMPT_PANEL,
            help="Most tokens to generate per answer (also the room kept for it in the context)."),
    _option("temperature", float, 0.0, "--temperature", min=0.0, panel=PROMPT_PANEL, help="0 is greedy."),
    _option("seed", Optional[int], None, "--seed", panel=PROMPT_PANEL,
            help="Random seed (sampling, the random method)."),
    _option("stop_on_repeat", bool, True, "--stop-on-repeat/--no-stop-on-repeat", panel=PROMPT_PANEL,
            help="End an answer caught in a loop (the same run of tokens again and again) instead of letting it run "
                 "to --max-new-tokens."),
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
    a fraction of a second), then :meth:`build`\ s the :class:`~snapkv_cli.runner.RunOptions`, which checks the
    model's name and imports the engine (torch).
    """

    values: dict
    settings: CompressionSettings
    template: Template

    def read(self, path: str, *, stdin=None) -> Document:
        """The document at ``path`` (``-``: stdin) with the options' pages and size limit."""
        return load_document(path, pages=self.values["pages"], stdin=stdin,
                             max_bytes=megabytes(self.values["max_document_mb"]))

    def build(self):
        """The :class:`~snapkv_cli.runner.RunOptions`. The model's name is checked first, still without torch (a name
        that is no model fails here, before any download; a Hugging Face model that is not cached is looked for on
        the Hub, an error within seconds when the Hub cannot be reached)."""
        check_reachable(model_source(self.values["model"]))
        from ..generation import GenerationOptions
        from ..runner import RunOptions

        values = self.values
        generation = GenerationOptions(max_new_tokens=values["max_new_tokens"], temperature=values["temperature"],
                                       seed=values["seed"], prefill_chunk=values["prefill_chunk"],
                                       stop_on_repeat=values["stop_on_repeat"],
                                       decode_weights=parse_decode_weights(values["decode_weights"]))
        return RunOptions(model=values["model"], device=values["device"], dtype=values["dtype"],
                          quantize=parse_quantize(values["quantize"]),
                          device_map=values["device_map"], settings=self.settings, generation=generation,
                          pages=values["pages"], max_document_mb=values["max_document_mb"], template=self.template,
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


def check_run_values(values: dict) -> RunChoices:
    """The parsed shared options checked without torch or a model: the truncation, the template, the compression
    settings, the page selection's form, the device's and dtype's names, the quantization and its library (the
    model's name is checked once the documents are read, by :meth:`RunChoices.build`)."""
    truncate = values["truncate"]
    if truncate is not None and truncate not in TRUNCATIONS:
        raise InvalidValue("truncate", truncate, f"one of {', '.join(TRUNCATIONS)}")
    template = load_template(values["template"])
    settings = compression_settings(values)
    if values["pages"]:
        parse_page_ranges(values["pages"])
    parse_device(values["device"])
    parse_dtype(values["dtype"])
    parse_quantize(values["quantize"])
    parse_decode_weights(values["decode_weights"])
    return RunChoices(values, settings, template)


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
    (model, device, dtype, quantization, device map, prefill chunk and decode weights set; the rest at their
    defaults)."""

    def build(values: dict) -> dict:
        parse_device(values["device"])  # the names are checked before torch is imported
        parse_dtype(values["dtype"])
        quantize = parse_quantize(values["quantize"])
        decode_weights = parse_decode_weights(values["decode_weights"])
        check_reachable(model_source(values["model"]))
        from ..generation import GenerationOptions
        from ..runner import RunOptions

        return {"options": RunOptions(model=values["model"], device=values["device"], dtype=values["dtype"],
                                      quantize=quantize, device_map=values["device_map"],
                                      generation=GenerationOptions(prefill_chunk=values["prefill_chunk"],
                                                                   decode_weights=decode_weights))}

    return _with_shared(MODEL_OPTIONS, build)(command)
