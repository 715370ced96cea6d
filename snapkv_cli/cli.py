"""The ``snapkv`` command: parse options, call the library, render. Heavy imports happen inside commands."""

from __future__ import annotations

import functools
import json
import os
import sys
from typing import Optional

import typer
from rich.console import Console

from . import __version__
from .defaults import CLI_DEFAULTS
from .errors import UserError

DEBUG_ENV = "SNAPKV_DEBUG"
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

stderr = Console(stderr=True, highlight=False)


def fail_cleanly(command):
    """User mistakes become one ``Error:`` line and exit 1; other errors too, unless SNAPKV_DEBUG is set."""

    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        try:
            return command(*args, **kwargs)
        except (typer.Exit, typer.Abort, typer.TyperException):  # typer vendors click: usage errors exit 2
            raise
        except UserError as error:
            if os.environ.get(DEBUG_ENV):
                raise
            stderr.print(f"Error: {error}", markup=False, soft_wrap=True)
            raise typer.Exit(1) from None
        except KeyboardInterrupt:
            stderr.print("Interrupted", markup=False)
            raise typer.Exit(130) from None
        except Exception as error:
            if os.environ.get(DEBUG_ENV):
                raise
            stderr.print(f"Error: {type(error).__name__}: {error} (set {DEBUG_ENV}=1 for the traceback)",
                         markup=False, soft_wrap=True)
            raise typer.Exit(1) from None

    return wrapper


def _version(value: bool) -> None:
    if value:
        typer.echo(f"snapkv {__version__}")
        raise typer.Exit()


@app.callback()
def main_options(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Show the version."),
) -> None:
    """Ask questions of long documents with a local LLM whose KV cache is compressed by SnapKV."""


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


@app.command()
@fail_cleanly
def ask(
    inputs: list[str] = typer.Argument(..., metavar="DOC QUESTION",
                                       help="Document (PDF, .txt, .md, .html, or - for stdin) and question."),
    model: Optional[str] = typer.Option(None, "--model", "-m", envvar="SNAPKV_MODEL",
                                        help="Hugging Face id, local directory or .gguf file [default: SmolLM2-135M-Instruct]."),
    device: str = typer.Option("auto", envvar="SNAPKV_DEVICE", help="auto, cpu, cuda or cuda:N."),
    dtype: str = typer.Option("auto", help="auto, float32, bfloat16 or float16."),
    method: str = typer.Option("snapkv", help="snapkv, full, pyramidkv, h2o, tova, streamingllm or random."),
    budget: str = typer.Option(str(CLI_DEFAULTS["max_capacity_prompt"]), help="KV tokens kept per layer and head (window included), or a fraction such as 0.1."),
    window: int = typer.Option(CLI_DEFAULTS["window_size"], help="Observation window: the last prompt tokens that vote."),
    kernel: int = typer.Option(CLI_DEFAULTS["kernel_size"], help="Pooling kernel size (odd)."),
    pooling: str = typer.Option(CLI_DEFAULTS["pooling"], help="maxpool or avgpool."),
    gqa: str = typer.Option("mean", help="How query heads of a KV group combine their votes: mean or max."),
    max_new_tokens: int = typer.Option(128, min=1, help="Most tokens to generate."),
    temperature: float = typer.Option(0.0, min=0.0, help="0 is greedy."),
    seed: Optional[int] = typer.Option(None, help="Random seed for sampling."),
    pages: Optional[str] = typer.Option(None, help="PDF pages to read, e.g. 3-7,10."),
    template: Optional[str] = typer.Option(None, help="Prompt template name (in prompts/) or path."),
    truncate: Optional[str] = typer.Option(None, help="If the document is too long: middle, start or end."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object (answer and report) on stdout."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No report or progress on stderr."),
) -> None:
    """Answer a question about a document; the answer streams to stdout, the report goes to stderr."""
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
        loaded = load_model(model, device=device, dtype=dtype, progress=on_progress)
        answer = ask_question(loaded, document, question, settings, prompt_template, max_new_tokens=max_new_tokens,
                              temperature=temperature, seed=seed, truncate=truncate, on_prompt=on_prompt,
                              on_text=on_text)
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


def main() -> None:
    """Console entry point."""
    app()


if __name__ == "__main__":
    main()
