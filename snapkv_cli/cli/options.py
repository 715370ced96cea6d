"""The options every model-running command shares, declared once, and the :class:`RunOptions` they become.

:func:`run_options` adds every option in :data:`RUN_OPTIONS` to a command's signature (Typer reads signatures) and
hands the command one ``options: RunOptions`` built from them, so ``ask``, ``inspect``, ``chat`` and ``batch`` all
take the same options with the same names, defaults, environment variables and checks. To give every such command
a new option: add its :class:`SharedOption` to :data:`RUN_OPTIONS` and use its value in :func:`build_run_options`.
:data:`MODEL_OPTIONS` are the ones the benchmarks take too (:func:`model_options`).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, Optional

import typer

from ..defaults import CLI_DEFAULTS, GQA_AGGREGATION, MAX_NEW_TOKENS, METHOD, METHOD_SETTINGS
from ..doc_cache import DEFAULT_CAP_MB, DOC_CACHE_ENV, DOC_CACHE_MB_ENV
from ..documents import DEFAULT_MAX_DOCUMENT_MB, MAX_DOCUMENT_MB_ENV
from ..errors import InvalidValue, UserError

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
            help="Hugging Face id, local directory or .gguf file (default: SmolLM2-135M-Instruct)."),
    _option("device", str, "auto", "--device", envvar="SNAPKV_DEVICE", panel=MODEL_PANEL,
            help="auto, cpu, cuda or cuda:N."),
    _option("dtype", str, "auto", "--dtype", panel=MODEL_PANEL, help="auto, float32, bfloat16 or float16."),
    _option("device_map", Optional[str], None, "--device-map", panel=MODEL_PANEL,
            help="Shard the model over devices with accelerate (e.g. auto); overrides --device."),
    _option("prefill_chunk", Optional[int], None, "--prefill-chunk", min=1, envvar="SNAPKV_PREFILL_CHUNK",
            panel=MODEL_PANEL,
            help="Prefill in chunks of this many tokens (bounds activation memory; selection stays exact) "
                 "(default: one pass)."),
)

RUN_OPTIONS: tuple[SharedOption, ...] = MODEL_OPTIONS + (
    _option("method", Optional[str], None, "--method", panel=COMPRESSION_PANEL,
            help="snapkv, full, pyramidkv, adakv, criticalkv, defensivekv, chunkkv, h2o, tova, streamingllm or "
            f"random (default: {METHOD} with --head-budgets {METHOD_SETTINGS['head_budgets']} and --pooling-window "
            f"{METHOD_SETTINGS['pooling_window']}, chosen by measurement)."),
    _option("budget", str, str(CLI_DEFAULTS["max_capacity_prompt"]), "--budget", panel=COMPRESSION_PANEL,
            help="KV tokens kept per layer and head (window included), or a fraction such as 0.1."),
    _option("window", int, CLI_DEFAULTS["window_size"], "--window", panel=COMPRESSION_PANEL,
            help="Observation window: the last prompt tokens that vote."),
    _option("kernel", int, CLI_DEFAULTS["kernel_size"], "--kernel", panel=COMPRESSION_PANEL,
            help="Pooling kernel size (odd)."),
    _option("pooling", str, CLI_DEFAULTS["pooling"], "--pooling", panel=COMPRESSION_PANEL,
            help="maxpool or avgpool."),
    _option("pooling_window", Optional[str], None, "--pooling-window", panel=COMPRESSION_PANEL,
            help="Where the pooling kernel sits: centered on each position (SnapKV) or causal (the position and the "
                 f"ones before it) (default: {METHOD_SETTINGS['pooling_window']} for the default method, centered "
                 "otherwise)."),
    _option("whole_words", Optional[bool], None, "--whole-words/--no-whole-words", panel=COMPRESSION_PANEL,
            help="Keep every token of a word (a number, a name) with the word's best one, so that codes are kept whole "
                 f"(default: {'on' if METHOD_SETTINGS.get('whole_words') else 'off'} for the default method, off "
                 "otherwise)."),
    _option("gqa", str, GQA_AGGREGATION, "--gqa", panel=COMPRESSION_PANEL,
            help="How query heads of a KV group combine their votes: mean or max."),
    _option("layer_budgets", Optional[str], None, "--layer-budgets", panel=COMPRESSION_PANEL,
            help="How the budget is shared over layers: uniform or pyramid (default: the method's own)."),
    _option("head_budgets", Optional[str], None, "--head-budgets", panel=COMPRESSION_PANEL,
            help="How a layer's budget is shared over KV heads: uniform, adaptive, or shared (the same positions "
                 "for every head) (default: the method's own)."),
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


# settings whose option is None unless given: then the method's own (the default method's: METHOD_SETTINGS)
METHOD_DEFAULTED = ("head_budgets", "pooling_window", "whole_words")


def build_run_options(values: dict):
    """The :class:`~snapkv_cli.runner.RunOptions` of the parsed shared options, checked before any model loads."""
    from ..engine import CompressionSettings
    from ..generation import GenerationOptions
    from ..prompting import TRUNCATIONS, load_template
    from ..runner import RunOptions

    truncate = values["truncate"]
    if truncate is not None and truncate not in TRUNCATIONS:
        raise InvalidValue("truncate", truncate, f"one of {', '.join(TRUNCATIONS)}")
    template = load_template(values["template"])
    method = values["method"]
    given = {name: values[name] for name in METHOD_DEFAULTED if values[name] is not None}
    if method is None:  # the default method, with the settings it comes with unless the options say otherwise
        method, given = METHOD, {**METHOD_SETTINGS, **given}
    try:
        settings = CompressionSettings(
            method=method, window_size=values["window"], max_capacity_prompt=parse_budget(values["budget"]),
            kernel_size=values["kernel"], pooling=values["pooling"], gqa_aggregation=values["gqa"],
            layer_budgets=values["layer_budgets"], **given,
            seed=values["seed"] if values["seed"] is not None else 0)
    except UserError:
        raise
    except ValueError as error:
        raise UserError(str(error)) from None
    generation = GenerationOptions(max_new_tokens=values["max_new_tokens"], temperature=values["temperature"],
                                   seed=values["seed"], prefill_chunk=values["prefill_chunk"],
                                   stop_on_repeat=values["stop_on_repeat"])
    return RunOptions(model=values["model"], device=values["device"], dtype=values["dtype"],
                      device_map=values["device_map"], settings=settings, generation=generation,
                      pages=values["pages"], max_document_mb=values["max_document_mb"], template=template,
                      truncate=truncate,
                      doc_cache_mb=values["cache_size"] if values["cache_docs"] else None)


@dataclass(frozen=True)
class Output:
    """Where a run's results go: JSON or text on stdout, and whether stderr stays silent."""

    as_json: bool
    quiet: bool


def _with_shared(shared: tuple[SharedOption, ...], build: Callable[[dict], dict]):
    """A decorator that adds ``shared`` options to a command and passes it what ``build`` makes of them."""

    def decorate(command):
        signature = inspect.signature(command, eval_str=True)
        own = [p for p in signature.parameters.values() if p.name not in ("options", "output")]
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
    """Give ``command`` every shared option; it receives ``options: RunOptions`` and ``output: Output``."""
    return _with_shared(RUN_OPTIONS, lambda values: {
        "options": build_run_options(values), "output": Output(values["as_json"], values["quiet"])})(command)


def model_options(command):
    """Give ``command`` the model options (:data:`MODEL_OPTIONS`); it receives them as ``options: RunOptions``
    (model, device, dtype, device map and prefill chunk set; the rest at their defaults)."""

    def build(values: dict) -> dict:
        from ..generation import GenerationOptions
        from ..runner import RunOptions

        return {"options": RunOptions(model=values["model"], device=values["device"], dtype=values["dtype"],
                                      device_map=values["device_map"],
                                      generation=GenerationOptions(prefill_chunk=values["prefill_chunk"]))}

    return _with_shared(MODEL_OPTIONS, build)(command)
