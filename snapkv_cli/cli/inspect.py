"""``snapkv inspect DOC QUESTION``: which prompt tokens the compressed cache kept (same prefill and selection as
``ask``), as a terminal view, JSON, a self-contained HTML page or a PNG heatmap."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ..answering.documents import named_formats
from ..errors import OutOfRange, UserError
from . import console
from .app import app
from .errors import fail_cleanly
from .inputs import ARGUMENTS, document_and_questions
from .options import Output, RunChoices, run_options


@app.command()
@fail_cleanly
@run_options
def inspect(
    inputs: list[str] = typer.Argument(..., metavar=ARGUMENTS,
                                       help=f"Document ({named_formats(', ')}, or - for stdin) and question."),
    answer: bool = typer.Option(
        False, "--answer", help="Also generate the answer (stdout, or \"answer\" in the JSON)."),
    layer: Optional[int] = typer.Option(
        None, min=0, help="Show only this layer (terminal view; the HTML's first choice)."),
    head: Optional[int] = typer.Option(
        None, min=0, help="Show only this KV head (terminal view, PNG; the HTML's first choice)."),
    full: bool = typer.Option(
        False, "--full", help="Shade the whole prompt (paged on a terminal), not only the most-kept passages."),
    html: Optional[Path] = typer.Option(None, "--html", help="Write a self-contained HTML view to this file."),
    png: Optional[Path] = typer.Option(
        None, "--png", help="Write a layers x positions heatmap to this PNG file (--find texts marked on it)."),
    png_scores: bool = typer.Option(
        False, "--png-scores", help="The heatmap shows pooled scores instead of kept share."),
    find: Optional[list[str]] = typer.Option(
        None, "--find", help="Count, for each place this text occurs in the prompt, the (layer, KV head) pairs "
                             "that kept all, some or none of its tokens (repeatable; \"found\" in the JSON)."),
    *,
    choices: RunChoices,
    output: Output,
) -> None:
    """Show which document tokens the compressed cache kept (same prefill and selection as ask)."""
    from ..output_files import check_writable

    document_path, questions = document_and_questions(inputs)
    if len(questions) != 1:
        raise UserError("inspect takes one question")
    for path in (html, png):
        if path is not None:
            check_writable(path)
    if png_scores and png is None:
        raise UserError("--png-scores needs --png FILE")
    document = choices.read(document_path)  # bad input fails here, before the engine (torch) is imported
    searched = check_searched(find or [], document.text, questions[0])
    options = choices.build()

    from ..answering.inspection import inspect_answer
    from ..answering.runner import Runner
    from .presenters import InspectPresenter

    presenter = InspectPresenter(console.stderr, quiet=output.quiet, as_json=output.as_json, html=html, png=png,
                                 png_scores=png_scores, layer=layer, head=head, full=full, with_answer=answer)
    runner = Runner(options, presenter)
    try:
        check_layer_and_head(runner.loaded.model.config, layer, head)
        result = runner.answer(runner.open(document, questions=1), questions[0], total=1, generate=answer)
        presenter.progress("Reading the cache...")
        inspection = inspect_answer(result, runner.loaded.tokenizer, with_answer=answer)
        inspection.check_selection(layer, head)
        found = tuple(inspection.find(text) for text in searched)
        for text, occurrences in zip(searched, found):
            if not occurrences:  # the document had it, but the prompt does not (--truncate cut it out)
                raise UserError(f"--find {text!r}: not in the prompt (truncated out of the document?)")
        presenter.write_files(inspection, found)
    finally:
        presenter.close()
    presenter.inspected(inspection, found)


def check_layer_and_head(config, layer: Optional[int], head: Optional[int]) -> None:
    """Refuse a layer or KV head beyond the model before the prefill (the cache records confirm it after)."""
    config = config.get_text_config()
    layers = getattr(config, "num_hidden_layers", None)
    heads = getattr(config, "num_key_value_heads", None) or getattr(config, "num_attention_heads", None)
    if layer is not None and layers and layer >= layers:
        raise OutOfRange("layer", layer, layers)
    if head is not None and heads and head >= heads:
        raise OutOfRange("head", head, heads)


def check_searched(texts: list[str], document_text: str, question: str) -> list[str]:
    """The ``--find`` texts, refused before the prefill when empty or in neither the document nor the question."""
    for text in texts:
        if not text:
            raise UserError("--find needs some text")
        if text not in document_text and text not in question:
            raise UserError(f"--find {text!r}: not in the document or the question")
    return list(dict.fromkeys(texts))
