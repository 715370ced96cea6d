"""``snapkv chat DOC``: ask question after question about one document, which is read (or loaded) once.

Questions are read from stdin one line at a time (the ``> `` prompt goes to stderr, and only on a terminal); each
answer streams to stdout followed by a newline (or one JSON line with ``--json``), and one report line goes to stderr.
End of input (Ctrl-D) leaves; Ctrl-C while an answer is being written cancels that answer, Ctrl-C at the prompt
leaves (exit code 130). The shared prefix is never modified by a question, so a cancelled answer leaves nothing
behind.
"""

from __future__ import annotations

import json
import sys
from typing import Callable, Optional, TextIO

from rich.console import Console

from .questions import AnswerStream, compact_line, doc_cache_line

PROMPT = "> "


def run_chat(document, template, settings, *, console: Console, model: Optional[str], device: str, dtype: str,
             device_map: Optional[str] = None, chunk_size: Optional[int] = None, max_new_tokens: int, temperature: float,
             seed: Optional[int], truncate: Optional[str], as_json: bool,
             quiet: bool, doc_cache, stdin: TextIO | None = None, stdout: TextIO | None = None,
             load_model: Callable | None = None) -> int:
    """Run the loop; return the exit code (0 at end of input, 130 after Ctrl-C at the prompt)."""
    from .questions import open_session

    stdin, stdout = stdin or sys.stdin, stdout or sys.stdout
    interactive = _is_terminal(stdin)
    status = console.status("Loading model...", spinner="dots") if not quiet else None

    def say(message: str) -> None:
        if not quiet:
            console.print(message, markup=False, highlight=False, soft_wrap=True)

    def on_progress(message: str) -> None:
        if status:
            status.update(message)

    if status:
        status.start()
    try:
        session = open_session(document, template, settings, model=model, device=device, dtype=dtype,
                               device_map=device_map, chunk_size=chunk_size, max_new_tokens=max_new_tokens,
                               truncate=truncate, doc_cache=doc_cache, on_progress=on_progress, load_model=load_model)
        # the prefix does not depend on the question (unless a long question forces more truncation)
        prefix, _ = session.prepare(session.build_prompt("?"))
    finally:
        if status:
            status.stop()
    how = "loaded from the document cache" if prefix.source == "disk" else "prefilled"
    say(f"{document.source}: {len(prefix.ids)} prompt tokens {how} in {prefix.seconds:.2f}s. "
        f"Ask a question{'' if not interactive else ' (Ctrl-D to leave, Ctrl-C to stop an answer)'}.")
    if prefix.doc_cache.get("status") in ("stored", "rebuilt", "not_stored"):
        say(doc_cache_line(prefix.doc_cache))

    count = 0
    while True:
        if interactive:
            console.file.write(PROMPT)
            console.file.flush()
        try:
            line = stdin.readline()
        except KeyboardInterrupt:
            if interactive:
                console.file.write("\n")
            return 130
        if not line:
            if interactive:
                console.file.write("\n")
            return 0
        question = line.strip()
        if not question:
            continue
        count += 1
        stream = AnswerStream(stdout)
        if status:
            status.update("Thinking...")
            status.start()

        def on_text(text: str) -> None:
            if status:
                status.stop()
            if not as_json:
                stream(text)

        try:
            answer = session.ask(question, temperature=temperature, seed=seed, on_text=on_text)
        except KeyboardInterrupt:
            if status:
                status.stop()
            if stream.started:
                stdout.write("\n")
                stdout.flush()
            say("(answer cancelled)")
            continue
        finally:
            if status:
                status.stop()
        if as_json:
            stdout.write(json.dumps(answer.report, ensure_ascii=False) + "\n")
        else:
            stdout.write("\n")
        stdout.flush()
        say(compact_line(answer.report, f"[{count}]"))


def _is_terminal(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
