"""The ``snapkv`` command: parse options, call the library, render. Heavy imports happen inside commands."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console

from . import __version__
from .bench.cli import bench_app
from .console import fail_cleanly, stderr
from .defaults import CLI_DEFAULTS
from .doc_cache import DEFAULT_CAP_MB, DOC_CACHE_ENV, DOC_CACHE_MB_ENV
from .errors import UserError
EXAMPLE = 'snapkv ask examples/annual_report.pdf "Who is the chief executive?"'

app = typer.Typer(
    help=f"Ask questions of long documents with a local LLM whose KV cache is compressed by SnapKV.\n\n"
         f"Example:\n\n    {EXAMPLE}",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
models_app = typer.Typer(help="The default model and what is cached.", no_args_is_help=True)
app.add_typer(models_app, name="models")
app.add_typer(bench_app, name="bench")
cache_app = typer.Typer(help="The on-disk cache of prefilled documents (ask/chat --cache-docs).", no_args_is_help=True)
app.add_typer(cache_app, name="cache")

# Options shared by ask, inspect and chat (typer reads the Annotated metadata).
ModelOption = Annotated[Optional[str], typer.Option(
    "--model", "-m", envvar="SNAPKV_MODEL",
    help="Hugging Face id, local directory or .gguf file [default: SmolLM2-135M-Instruct].")]
DeviceOption = Annotated[str, typer.Option(envvar="SNAPKV_DEVICE", help="auto, cpu, cuda or cuda:N.")]
DeviceMapOption = Annotated[Optional[str], typer.Option(
    "--device-map", help="Shard the model over devices with accelerate (e.g. auto); overrides --device.")]
DtypeOption = Annotated[str, typer.Option(help="auto, float32, bfloat16 or float16.")]
MethodOption = Annotated[str, typer.Option(
    help="snapkv, full, pyramidkv, adakv, criticalkv, defensivekv, chunkkv, h2o, tova, streamingllm or random.")]
BudgetOption = Annotated[str, typer.Option(
    help="KV tokens kept per layer and head (window included), or a fraction such as 0.1.")]
WindowOption = Annotated[int, typer.Option(help="Observation window: the last prompt tokens that vote.")]
KernelOption = Annotated[int, typer.Option(help="Pooling kernel size (odd).")]
PoolingOption = Annotated[str, typer.Option(help="maxpool or avgpool.")]
GqaOption = Annotated[str, typer.Option(help="How query heads of a KV group combine their votes: mean or max.")]
TemperatureOption = Annotated[float, typer.Option(min=0.0, help="0 is greedy.")]
SeedOption = Annotated[Optional[int], typer.Option(help="Random seed for sampling.")]
PagesOption = Annotated[Optional[str], typer.Option(help="PDF pages to read, e.g. 3-7,10.")]
TemplateOption = Annotated[Optional[str], typer.Option(help="Prompt template name (in prompts/) or path.")]
TruncateOption = Annotated[Optional[str], typer.Option(help="If the document is too long: middle, start or end.")]
PrefillChunkOption = Annotated[Optional[int], typer.Option(
    "--prefill-chunk", min=1, envvar="SNAPKV_PREFILL_CHUNK",
    help="Prefill in chunks of this many tokens (bounds activation memory; selection stays exact) [default: one pass].")]
CacheDocsOption = Annotated[bool, typer.Option(
    "--cache-docs/--no-cache-docs", envvar=DOC_CACHE_ENV,
    help="Keep the document's prefilled KV on disk, so a later run on it skips the prefill.")]
CacheSizeOption = Annotated[int, typer.Option(
    "--cache-size", envvar=DOC_CACHE_MB_ENV, min=1,
    help="Document cache cap in MB (least recently used entries are evicted).")]



def _version(value: bool) -> None:
    if value:
        typer.echo(f"snapkv {__version__}")
        raise typer.Exit()


@app.callback()
def main_options(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Show the version."),
) -> None:
    """Ask questions of long documents with a local LLM whose KV cache is compressed by SnapKV."""
    from .allocator import return_freed_memory_to_os

    return_freed_memory_to_os()


def parse_budget(text: str) -> int | float:
    """'1024' -> 1024 tokens; '0.1' -> a tenth of the prompt."""
    try:
        value = float(text)
    except ValueError:
        raise UserError(f"--budget must be a token count (e.g. 1024) or a fraction (e.g. 0.1), got {text!r}") from None
    if value.is_integer() and value >= 1:
        return int(value)
    if 0 < value < 1:
        return value
    raise UserError(f"--budget must be a token count >= 1 or a fraction in (0, 1), got {text!r}")


def _split_inputs(inputs: list[str]) -> tuple[str, str]:
    """``DOC QUESTION``, or just ``QUESTION`` with the document piped on stdin."""
    if len(inputs) == 2:
        return inputs[0], inputs[1]
    if len(inputs) == 1 and not sys.stdin.isatty():
        return "-", inputs[0]
    if len(inputs) == 1:
        raise typer.BadParameter("give a document and a question, or pipe the document in", param_hint="DOC QUESTION")
    raise typer.BadParameter(f"expected DOC and QUESTION, got {len(inputs)} arguments (quote the question)",
                             param_hint="DOC QUESTION")


def _parse_request(inputs: list[str], *, pages: Optional[str], template: Optional[str], truncate: Optional[str],
                   method: str, window: int, budget: str, kernel: int, pooling: str, gqa: str, seed: Optional[int]):
    """The options shared by ``ask`` and ``inspect`` -> (document, question, template, settings), checked in order."""
    document_path, question = _split_inputs(inputs)
    from .documents import load_document
    from .prompting import TRUNCATIONS, load_template

    if truncate is not None and truncate not in TRUNCATIONS:
        raise UserError(f"--truncate must be one of {', '.join(TRUNCATIONS)}, got {truncate!r}")
    if not question.strip():
        raise UserError("the question is empty: pass the question as the second argument")
    document = load_document(document_path, pages=pages)
    prompt_template = load_template(template)
    from .engine import CompressionSettings

    try:
        settings = CompressionSettings(method=method, window_size=window, max_capacity_prompt=parse_budget(budget),
                                       kernel_size=kernel, pooling=pooling, gqa_aggregation=gqa,
                                       seed=seed if seed is not None else 0)
    except ValueError as error:
        raise UserError(str(error)) from None
    return document, question, prompt_template, settings


@app.command()
@fail_cleanly
def ask(
    inputs: Optional[list[str]] = typer.Argument(None, metavar="DOC QUESTION",
                                                 help="Document (PDF, .txt, .md, .html, or - for stdin) and question."),
    model: ModelOption = None,
    device: DeviceOption = "auto",
    dtype: DtypeOption = "auto",
    device_map: DeviceMapOption = None,
    prefill_chunk: PrefillChunkOption = None,
    method: MethodOption = "snapkv",
    budget: BudgetOption = str(CLI_DEFAULTS["max_capacity_prompt"]),
    window: WindowOption = CLI_DEFAULTS["window_size"],
    kernel: KernelOption = CLI_DEFAULTS["kernel_size"],
    pooling: PoolingOption = CLI_DEFAULTS["pooling"],
    gqa: GqaOption = "mean",
    max_new_tokens: int = typer.Option(128, min=1, help="Most tokens to generate."),
    temperature: TemperatureOption = 0.0,
    seed: SeedOption = None,
    pages: PagesOption = None,
    template: TemplateOption = None,
    truncate: TruncateOption = None,
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object (answer and report) on stdout."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No report or progress on stderr."),
    questions: Optional[list[str]] = typer.Option(None, "--question", "-Q", help="A question; repeat it to ask several (the document is read once)."),
    questions_file: Optional[str] = typer.Option(None, "--questions", help="A file of questions, one per line (- for stdin)."),
    cache_docs: CacheDocsOption = False,
    cache_size: CacheSizeOption = DEFAULT_CAP_MB,
) -> None:
    """Answer a question about a document; the answer streams to stdout, the report goes to stderr.

    Several questions (-Q ... -Q ..., --questions FILE) share one prefill of the document.
    """
    if questions or questions_file is not None or cache_docs:
        from .questions import gather_questions, open_doc_cache, run_questions

        document_path, asked = gather_questions(inputs, questions, questions_file, sys.stdin.isatty())
        document, _, prompt_template, settings = _parse_request(
            [document_path, asked[0]], pages=pages, template=template, truncate=truncate, method=method, window=window,
            budget=budget, kernel=kernel, pooling=pooling, gqa=gqa, seed=seed)
        run_questions(document, asked, prompt_template, settings, console=stderr, model=model, device=device,
                      dtype=dtype, device_map=device_map, chunk_size=prefill_chunk, max_new_tokens=max_new_tokens, temperature=temperature, seed=seed, truncate=truncate,
                      as_json=as_json, quiet=quiet, doc_cache=open_doc_cache(cache_docs, cache_size))
        return
    document, question, prompt_template, settings = _parse_request(
        inputs or [], pages=pages, template=template, truncate=truncate, method=method, window=window, budget=budget,
        kernel=kernel, pooling=pooling, gqa=gqa, seed=seed)

    from .models.loader import load_model
    from .pipeline import ask as ask_question

    status = stderr.status("Loading model...", spinner="dots") if not quiet else None
    if status:
        status.start()
    streamed = False
    held = ""  # trailing whitespace, written only once more text follows (the answer is stripped at both ends)

    def on_progress(message: str) -> None:
        if status:
            status.update(message)

    def on_prompt(prompt) -> None:
        if status:
            status.update(f"Prefill: {prompt.length} tokens...")
        report = prompt.window_report(window)
        if not report["question_fits"] and not quiet:
            stderr.print(f"[yellow]Warning:[/] the question has {report['question_tokens']} tokens but only "
                         f"{report['question_tokens_in_window']} fall in the {window}-token window; raise --window")

    def on_text(text: str) -> None:
        nonlocal streamed, held
        if status:
            status.stop()
        if as_json:
            return
        if not streamed:
            text = text.lstrip()
            streamed = bool(text)
        text = held + text
        body = text.rstrip()
        held = text[len(body):]
        if body:
            sys.stdout.write(body)
            sys.stdout.flush()

    try:
        loaded = load_model(model, device=device, dtype=dtype, device_map=device_map, progress=on_progress)
        answer = ask_question(loaded, document, question, settings, prompt_template, max_new_tokens=max_new_tokens,
                              temperature=temperature, seed=seed, truncate=truncate, chunk_size=prefill_chunk,
                              on_prompt=on_prompt, on_text=on_text)
    finally:
        if status:
            status.stop()
    if as_json:
        sys.stdout.write(json.dumps(answer.report, ensure_ascii=False) + "\n")
    else:
        sys.stdout.write("\n")
    sys.stdout.flush()
    if not quiet:
        from .report_view import render_report

        render_report(answer.report, stderr)


@app.command()
@fail_cleanly
def inspect(
    inputs: list[str] = typer.Argument(..., metavar="DOC QUESTION",
                                       help="Document (PDF, .txt, .md, .html, or - for stdin) and question."),
    model: ModelOption = None,
    device: DeviceOption = "auto",
    dtype: DtypeOption = "auto",
    method: MethodOption = "snapkv",
    budget: BudgetOption = str(CLI_DEFAULTS["max_capacity_prompt"]),
    window: WindowOption = CLI_DEFAULTS["window_size"],
    kernel: KernelOption = CLI_DEFAULTS["kernel_size"],
    pooling: PoolingOption = CLI_DEFAULTS["pooling"],
    gqa: GqaOption = "mean",
    max_new_tokens: int = typer.Option(128, min=1, help="Room kept for the answer (as in ask); with --answer, most tokens to generate."),
    temperature: float = typer.Option(0.0, min=0.0, help="With --answer: 0 is greedy."),
    seed: SeedOption = None,
    pages: PagesOption = None,
    template: TemplateOption = None,
    truncate: TruncateOption = None,
    answer: bool = typer.Option(False, "--answer", help="Also generate the answer (stdout, or \"answer\" in the JSON)."),
    layer: Optional[int] = typer.Option(None, min=0, help="Show only this layer (terminal view; the HTML's first choice)."),
    head: Optional[int] = typer.Option(None, min=0, help="Show only this KV head (terminal view, PNG; the HTML's first choice)."),
    full: bool = typer.Option(False, "--full", help="Shade the whole prompt (paged on a terminal), not only the most-kept passages."),
    html: Optional[Path] = typer.Option(None, "--html", help="Write a self-contained HTML view to this file."),
    png: Optional[Path] = typer.Option(None, "--png", help="Write a layers x positions heatmap to this PNG file."),
    png_scores: bool = typer.Option(False, "--png-scores", help="The heatmap shows pooled scores instead of kept share."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object (tokens, kept positions, scores) on stdout."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress on stderr."),
) -> None:
    """Show which document tokens the compressed cache kept (same prefill and selection as ask)."""
    document, question, prompt_template, settings = _parse_request(
        inputs, pages=pages, template=template, truncate=truncate, method=method, window=window, budget=budget,
        kernel=kernel, pooling=pooling, gqa=gqa, seed=seed)
    from .views.atomic import check_writable

    for path in (html, png):
        if path is not None:
            check_writable(path)
    if png_scores and png is None:
        raise UserError("--png-scores needs --png FILE")

    from .inspection import inspect_answer
    from .models.loader import load_model
    from . import pipeline

    status = stderr.status("Loading model...", spinner="dots") if not quiet else None
    if status:
        status.start()

    def on_progress(message: str) -> None:
        if status:
            status.update(message)

    def on_prompt(prompt) -> None:
        on_progress(f"Prefill: {prompt.length} tokens...")

    try:
        loaded = load_model(model, device=device, dtype=dtype, progress=on_progress)
        _check_layer_and_head(loaded.model.config, layer, head)
        if answer:
            result = pipeline.ask(loaded, document, question, settings, prompt_template,
                                  max_new_tokens=max_new_tokens, temperature=temperature, seed=seed,
                                  truncate=truncate, on_prompt=on_prompt)
        else:
            result = pipeline.select(loaded, document, question, settings, prompt_template,
                                     max_new_tokens=max_new_tokens, truncate=truncate, on_prompt=on_prompt)
        on_progress("Reading the cache...")
        inspection = inspect_answer(result, loaded.tokenizer, with_answer=answer)
        inspection.check_selection(layer, head)
        if html is not None:
            from .views.html import write_html

            on_progress(f"Writing {html}...")
            write_html(inspection, html, layer=layer, head=head)
        if png is not None:
            from .views.heatmap import write_heatmap

            on_progress(f"Writing {png}...")
            write_heatmap(inspection, png, scores=png_scores, head=head)
    finally:
        if status:
            status.stop()
    if as_json:
        sys.stdout.write(json.dumps(inspection.to_json(), ensure_ascii=False) + "\n")
        sys.stdout.flush()
    else:
        if answer:
            sys.stdout.write(inspection.answer + "\n")
            sys.stdout.flush()
        from .views.terminal import render

        render(inspection, Console(highlight=False), layer=layer, head=head, full=full)
    if not quiet:
        for path in (html, png):
            if path is not None:
                stderr.print(f"Wrote {path}", markup=False, highlight=False)


def _check_layer_and_head(config, layer: Optional[int], head: Optional[int]) -> None:
    """Refuse --layer/--head beyond the model before the prefill (the cache records confirm it after)."""
    config = config.get_text_config()
    layers = getattr(config, "num_hidden_layers", None)
    heads = getattr(config, "num_key_value_heads", None) or getattr(config, "num_attention_heads", None)
    if layer is not None and layers and layer >= layers:
        raise UserError(f"--layer {layer} is out of range: the model has {layers} layers (0-{layers - 1})")
    if head is not None and heads and head >= heads:
        raise UserError(f"--head {head} is out of range: the model has {heads} KV heads (0-{heads - 1})")


@models_app.command("list")
@fail_cleanly
def models_list(as_json: bool = typer.Option(False, "--json", help="Print JSON on stdout.")) -> None:
    """Show the default model and whether it is cached."""
    from .models.default_model import default_model_status

    status = default_model_status()
    if as_json:
        typer.echo(json.dumps(status))
        return
    state = "cached" if status["present"] else "not downloaded yet (snapkv models pull)"
    typer.echo(f"{status['name']}\t{state}\t{status['path']}")


@models_app.command("pull")
@fail_cleanly
def models_pull(name: Optional[str] = typer.Argument(None, help="Model to fetch [default: the default model].")) -> None:
    """Fetch and convert a model now, so later runs need no network."""
    from .models.loader import load_model

    with stderr.status("Fetching model...", spinner="dots") as status:
        loaded = load_model(name, device="cpu", dtype="float32", progress=status.update)
    typer.echo(loaded.source)


@app.command()
@fail_cleanly
def chat(
    doc: str = typer.Argument(..., metavar="DOC", help="Document (PDF, .txt, .md, .html); questions come from stdin."),
    model: ModelOption = None,
    device: DeviceOption = "auto",
    dtype: DtypeOption = "auto",
    device_map: DeviceMapOption = None,
    prefill_chunk: PrefillChunkOption = None,
    method: MethodOption = "snapkv",
    budget: BudgetOption = str(CLI_DEFAULTS["max_capacity_prompt"]),
    window: WindowOption = CLI_DEFAULTS["window_size"],
    kernel: KernelOption = CLI_DEFAULTS["kernel_size"],
    pooling: PoolingOption = CLI_DEFAULTS["pooling"],
    gqa: GqaOption = "mean",
    max_new_tokens: int = typer.Option(128, min=1, help="Most tokens to generate per answer."),
    temperature: TemperatureOption = 0.0,
    seed: SeedOption = None,
    pages: PagesOption = None,
    template: TemplateOption = None,
    truncate: TruncateOption = None,
    as_json: bool = typer.Option(False, "--json", help="Print one JSON line (answer and report) per answer."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No report or progress on stderr."),
    cache_docs: CacheDocsOption = False,
    cache_size: CacheSizeOption = DEFAULT_CAP_MB,
) -> None:
    """Ask question after question about one document, read once: one question per line on stdin, Ctrl-D to leave."""
    if doc == "-":
        raise UserError("snapkv chat reads your questions from stdin, so the document cannot come from stdin: "
                        "give the document as a file path")
    document, _, prompt_template, settings = _parse_request(
        [doc, "(chat)"], pages=pages, template=template, truncate=truncate, method=method, window=window,
        budget=budget, kernel=kernel, pooling=pooling, gqa=gqa, seed=seed)
    from .chat import run_chat
    from .questions import open_doc_cache

    code = run_chat(document, prompt_template, settings, console=stderr, model=model, device=device, dtype=dtype,
                    device_map=device_map, chunk_size=prefill_chunk, max_new_tokens=max_new_tokens, temperature=temperature, seed=seed, truncate=truncate,
                    as_json=as_json, quiet=quiet, doc_cache=open_doc_cache(cache_docs, cache_size))
    if code:
        raise typer.Exit(code)


@cache_app.command("list")
@fail_cleanly
def cache_list(as_json: bool = typer.Option(False, "--json", help="Print one JSON object on stdout.")) -> None:
    """Show the cached documents: size, last use, model, prompt tokens, document."""
    from .doc_cache import DocCache
    from .questions import render_cache_list

    render_cache_list(DocCache(), as_json=as_json)


@cache_app.command("clear")
@fail_cleanly
def cache_clear(
    older_than: Optional[str] = typer.Option(None, "--older-than", help="Only entries unused for this long: 30m, 12h, 7d, 2w."),
) -> None:
    """Remove cached documents (all, or those not used for --older-than)."""
    from .doc_cache import DocCache, parse_age
    from .report_view import human_bytes

    age = parse_age(older_than) if older_than is not None else None
    removed = DocCache().clear(older_than_s=age)
    typer.echo(f"removed {len(removed)} cached document(s), {human_bytes(sum(e.bytes for e in removed))}")


def main() -> None:
    """Console entry point."""
    app()


if __name__ == "__main__":
    main()
