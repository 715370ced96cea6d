"""Several questions about one document on the command line: ``snapkv ask DOC -Q ... -Q ...`` and ``--questions``.

The document's prompt prefix is prefilled once (or loaded from the document cache) and each question is answered on
a fork of it (:class:`snapkv_cli.pipeline.DocumentSession`). stdout stays machine-friendly: with one question it
carries exactly the answer, as a plain ``ask`` does; with several, ``Q: <question>``, the answer and a blank line for
each; with ``--json`` one JSON object per answer and line (JSONL). stderr gets the full report for the first answer
and one line for each later one.
"""

from __future__ import annotations

import json
import sys
from typing import Callable, Optional, TextIO

import typer
from rich.console import Console

from .errors import UserError


def read_questions(source: str, stdin: TextIO | None = None) -> list[str]:
    """One question per line of the file ``source`` (``-``: stdin); blank lines are skipped."""
    if source == "-":
        text = (stdin or sys.stdin).read()
        if isinstance(text, bytes):
            text = text.decode("utf-8", errors="replace")
        name = "<stdin>"
    else:
        try:
            with open(source, encoding="utf-8", errors="replace") as file:
                text = file.read()
        except FileNotFoundError:
            raise UserError(f"questions file not found: {source}; give a text file with one question per line") \
                from None
        except IsADirectoryError:
            raise UserError(f"questions file {source} is a directory; give a text file with one question per line") \
                from None
        except OSError as error:
            raise UserError(f"cannot read questions file {source}: {error.strerror}") from None
        name = source
    questions = [line.strip() for line in text.splitlines() if line.strip()]
    if not questions:
        raise UserError(f"no questions in {name}: write one question per line")
    return questions


def gather_questions(inputs: list[str] | None, options: list[str] | None, questions_file: str | None,
                     stdin_is_terminal: bool) -> tuple[str, list[str]]:
    """(document path, questions) from ``[DOC [QUESTION]]``, the repeated ``--question`` and ``--questions FILE``.

    The positional question (if any) comes first, then ``--question``s in order, then the file's lines. Without
    ``--question`` or ``--questions`` (``--cache-docs`` alone), the arguments mean what they mean to a plain ``ask``:
    ``DOC QUESTION``, or ``QUESTION`` alone with the document piped in.
    """
    inputs = list(inputs or [])
    if not options and questions_file is None and len(inputs) == 1 and not stdin_is_terminal:
        inputs = ["-", inputs[0]]
    if len(inputs) > 2:
        raise typer.BadParameter(f"expected DOC and at most one QUESTION, got {len(inputs)} arguments (quote the "
                                 "question)", param_hint="DOC QUESTION")
    if not inputs:
        if questions_file == "-":
            raise UserError("--questions - reads the questions from stdin, so the document cannot come from stdin "
                            "too: give the document as a file path")
        if stdin_is_terminal:
            raise typer.BadParameter("give a document, or pipe the document in", param_hint="DOC QUESTION")
        inputs = ["-"]
    document_path = inputs[0]
    if document_path == "-" and questions_file == "-":
        raise UserError("--questions - reads the questions from stdin, so the document cannot come from stdin too: "
                        "give the document as a file path")
    questions = inputs[1:] + list(options or [])
    if questions_file is not None:
        questions += read_questions(questions_file)
    if not questions:
        raise typer.BadParameter("give a question (QUESTION, --question or --questions FILE)",
                                 param_hint="DOC QUESTION")
    for question in questions:
        if not question.strip():
            raise UserError("a question is empty: every --question needs some text")
    return document_path, questions


def open_doc_cache(enabled: bool, cache_size_mb: int):
    """The document cache, or None when it is off."""
    if not enabled:
        return None
    from .doc_cache import DocCache

    return DocCache(max_bytes=cache_size_mb * 1024 * 1024)


class AnswerStream:
    """Write a streamed answer to ``out`` as the stripped answer: leading whitespace dropped, trailing held back."""

    def __init__(self, out: TextIO):
        self.out, self.started, self.held = out, False, ""

    def __call__(self, text: str) -> None:
        if not self.started:
            text = text.lstrip()
            self.started = bool(text)
        text = self.held + text
        body = text.rstrip()
        self.held = text[len(body):]
        if body:
            self.out.write(body)
            self.out.flush()


def compact_line(report: dict, label: str) -> str:
    """One line of an answer's report: cache, prefix reuse, times."""
    cache, timings, prefix = report["cache"], report["timings"], report.get("prefix", {})
    source = {"prefill": "prefilled", "disk": "loaded from the document cache", "memory": "reused"}.get(
        prefix.get("source"), "")
    parts = [f"{label} {cache['tokens_before']} → {cache['tokens_after']:g} tokens ({cache['compression_ratio']:.2f}x)"]
    if prefix:
        text = f"prefix {prefix['tokens']} tokens {source}"
        if prefix.get("source") != "memory":
            text += f" in {prefix['seconds']:.2f}s"
        parts.append(text)
    parts.append(f"prefill {timings['prefill_s']:.2f}s")
    parts.append(f"decode {report['generated_tokens']} tokens in {timings['decode_s']:.2f}s")
    line = " · ".join(parts)
    doc_cache = report.get("doc_cache") or {}
    if prefix.get("source") != "memory" and doc_cache.get("status") in ("stored", "rebuilt", "not_stored"):
        line += "\n" + doc_cache_line(doc_cache)
    return line


def doc_cache_line(doc_cache: dict) -> str:
    from .report_view import human_bytes

    size = f" ({human_bytes(doc_cache['bytes'])})" if doc_cache.get("bytes") else ""
    if doc_cache["status"] == "stored":
        return f"document cache: stored{size} in {doc_cache['path']}"
    if doc_cache["status"] == "rebuilt":
        return f"document cache: the entry was rebuilt ({doc_cache['reason']}){size}"
    return f"document cache: not stored: {doc_cache['reason']}"


def open_session(document, template, settings, *, model: Optional[str], device: str, dtype: str,
                 device_map: Optional[str], chunk_size: Optional[int], max_new_tokens: int, truncate: Optional[str],
                 doc_cache, on_progress: Callable[[str], None], load_model: Callable | None = None):
    """Load the model and open a :class:`~snapkv_cli.pipeline.DocumentSession` on ``document`` (ask -Q, chat)."""
    from .models.loader import load_model as default_load_model
    from .pipeline import DocumentSession

    loaded = (load_model or default_load_model)(model, device=device, dtype=dtype, device_map=device_map,
                                                progress=on_progress)
    return DocumentSession(loaded, document, settings, template, max_new_tokens=max_new_tokens, truncate=truncate,
                           doc_cache=doc_cache, chunk_size=chunk_size, on_progress=on_progress)


def run_questions(document, questions: list[str], template, settings, *, console: Console, model: Optional[str],
                  device: str, dtype: str, device_map: Optional[str] = None, chunk_size: Optional[int] = None,
                  max_new_tokens: int, temperature: float, seed: Optional[int],
                  truncate: Optional[str], as_json: bool, quiet: bool, doc_cache,
                  load_model: Callable | None = None) -> None:
    """Answer every question about ``document`` with one shared prefix; print as the module docstring says."""
    from .report_view import render_report

    status = console.status("Loading model...", spinner="dots") if not quiet else None
    if status:
        status.start()

    def on_progress(message: str) -> None:
        if status:
            status.update(message)

    several = len(questions) > 1
    try:
        session = open_session(document, template, settings, model=model, device=device, dtype=dtype,
                               device_map=device_map, chunk_size=chunk_size, max_new_tokens=max_new_tokens,
                               truncate=truncate, doc_cache=doc_cache, on_progress=on_progress, load_model=load_model)
        for index, question in enumerate(questions):
            if status and index:
                status.start()
            stream = AnswerStream(sys.stdout)

            def on_prompt(prompt) -> None:
                report = prompt.window_report(settings.window_size)
                if not report["question_fits"] and not quiet:
                    console.print(f"[yellow]Warning:[/] question {index + 1}: the question has "
                                  f"{report['question_tokens']} tokens but only "
                                  f"{report['question_tokens_in_window']} fall in the {settings.window_size}-token "
                                  "window; raise --window")

            def on_text(text: str) -> None:
                if status:
                    status.stop()
                if not as_json:
                    stream(text)

            if several and not as_json:
                sys.stdout.write(f"Q: {' '.join(question.split())}\n")
                sys.stdout.flush()
            answer = session.ask(question, temperature=temperature, seed=seed, on_prompt=on_prompt,
                                 on_text=on_text)
            if status:
                status.stop()
            if as_json:
                sys.stdout.write(json.dumps(answer.report, ensure_ascii=False) + "\n")
            else:
                sys.stdout.write("\n\n" if several else "\n")
            sys.stdout.flush()
            if quiet:
                continue
            if index == 0:  # the full report once, then one line per answer
                render_report(answer.report, console)
            console.print(compact_line(answer.report, f"[{index + 1}/{len(questions)}]"), markup=False,
                          highlight=False, soft_wrap=True)
    finally:
        if status:
            status.stop()


def render_cache_list(doc_cache, *, as_json: bool, now: float | None = None) -> None:
    """``snapkv cache list``: one line per entry, most recently used first, then the total (or one JSON object)."""
    import time

    from .report_view import human_bytes

    entries = [entry.describe() for entry in reversed(doc_cache.entries())]
    total = sum(entry["bytes"] for entry in entries)
    if as_json:
        sys.stdout.write(json.dumps({"directory": str(doc_cache.directory), "cap_bytes": doc_cache.max_bytes,
                                     "total_bytes": total, "entries": entries}) + "\n")
        return
    now = time.time() if now is None else now
    rows = [("LAST USED", "SIZE", "TOKENS", "MODEL", "DTYPE", "TEMPLATE", "DOCUMENT")]
    for entry in entries:
        rows.append((_ago(now - entry["last_used"]), human_bytes(entry["bytes"]),
                     str(entry["prefix_tokens"] if entry["prefix_tokens"] is not None else "?"),
                     entry["model"] or "(unreadable)", entry["dtype"] or "?", entry["template"] or "?",
                     entry["document"] or "?"))
    if entries:
        widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]) - 1)]
        for row in rows:
            sys.stdout.write("  ".join(cell.ljust(width) for cell, width in zip(row, widths)) + "  " + row[-1] + "\n")
    sys.stdout.write(f"{len(entries)} cached document(s), {human_bytes(total)} of {human_bytes(doc_cache.max_bytes)} "
                     f"in {doc_cache.directory}\n")


def _ago(seconds: float) -> str:
    seconds = max(0.0, seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit} ago"
    return f"{int(seconds)}s ago"
