"""Smaller hostile cases: a budget fraction too small for any prompt, Rich markup in names, termination signals
while ``--html``/``--png`` are written, and a full disk while the default model is converted."""

from __future__ import annotations

import hashlib
import json
import signal
import subprocess
import sys
import textwrap
import zipfile
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

import snapkv_cli.cli as cli
from snapkv_cli.engine import CompressionSettings
from snapkv_cli.engine.settings import MAX_CONTEXT_TOKENS
from snapkv_cli.errors import BudgetTooSmall, UserError
from snapkv_cli.models import catalog
from tests.helpers import replace_builtin

runner = CliRunner()
ROOT = Path(__file__).resolve().parent.parent
NOTES = "Skerrow Point Light, winter log. The station's coastguard code is K-4417. Agnes counted 117 steps.\n"
QUESTION = "What is the coastguard code?"


def one_error_line(result) -> str:
    assert result.exit_code == 1, (result.stdout, result.stderr, result.exception)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    return lines[0]


# --------------------------------------------------------------------------- budgets


def test_a_tiny_fraction_is_a_clean_error_before_the_prefill(notes, tiny_model_path):
    for extra in ([], ["-Q", "Who counted the steps?"]):
        line = one_error_line(runner.invoke(cli.app, ["ask", notes, QUESTION, "--model", tiny_model_path,
                                                      "--budget", "0.0001", "--max-new-tokens", "3", *extra]))
        assert "budget fraction 0.0001 of a" in line and "not more than the window (32)" in line
        assert "ValueError" not in line and "Traceback" not in line


def test_a_fraction_too_small_for_any_context_fails_before_the_model_loads(notes, tmp_path):
    with pytest.raises(BudgetTooSmall) as info:
        CompressionSettings(max_capacity_prompt=1e-6, window_size=32)
    assert isinstance(info.value, ValueError) and info.value.prompt_tokens == MAX_CONTEXT_TOKENS
    CompressionSettings(max_capacity_prompt=1e-4, window_size=32)  # fine for prompts of 320k tokens and more
    # the model named here is an empty directory, which only loading it would find out: the budget is refused first
    line = one_error_line(runner.invoke(cli.app, ["ask", notes, QUESTION, "--model", str(tmp_path),
                                                  "--budget", "0.000001"]))
    assert "budget fraction 1e-06" in line and "model" not in line.split("budget")[0]


# --------------------------------------------------------------------------- markup


def test_markup_in_the_model_name_and_paths_is_printed_as_text(tmp_path, notes, monkeypatch):
    from tests.tiny_models import save_tiny_model_dir

    (tmp_path / "models" / "my[").mkdir(parents=True)
    save_tiny_model_dir(tmp_path / "models" / "my[" / "]model")
    (tmp_path / "out[" / "]").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    common = ["--model", "./models/my[/]model", "--budget", "64", "--window", "16"]
    result = runner.invoke(cli.app, ["ask", notes, QUESTION, *common, "--max-new-tokens", "3"])
    assert result.exit_code == 0, (result.stderr, result.exception)
    assert "./models/my[/]model  (cpu)" in result.stderr
    result = runner.invoke(cli.app, ["inspect", notes, QUESTION, *common, "--html", "out[/]/view.html"])
    assert result.exit_code == 0, (result.stderr, result.exception)
    assert (tmp_path / "out[" / "]" / "view.html").stat().st_size > 0


# --------------------------------------------------------------------------- signals during atomic writes

WRITER = textwrap.dedent("""
    import signal, sys, time
    from snapkv_cli.output_files import atomic_output
    # a process in a terminal: SIGHUP at its default, whatever this test run inherited (under nohup it is ignored)
    signal.signal(signal.SIGHUP, signal.SIG_IGN if sys.argv[2] == "ignore-hup" else signal.SIG_DFL)
    with atomic_output(sys.argv[1]) as file:
        file.write("half of a page")
        file.flush()
        print("writing", flush=True)
        time.sleep(30)
        file.write(" and the rest")
    print("done", flush=True)
""")


def start_writer(target: Path, mode: str = "") -> subprocess.Popen:
    process = subprocess.Popen([sys.executable, "-c", WRITER, str(target), mode], stdout=subprocess.PIPE, text=True,
                               cwd=ROOT)
    assert process.stdout.readline().strip() == "writing"
    assert [p.name for p in target.parent.iterdir() if p.name.endswith(".tmp")], "the temporary file is there"
    return process


@pytest.mark.skipif(not hasattr(signal, "SIGHUP"), reason="POSIX signals")
@pytest.mark.parametrize("signum", [signal.SIGTERM, getattr(signal, "SIGHUP", signal.SIGTERM)])
def test_a_termination_signal_leaves_no_temporary_file(tmp_path, signum):
    target = tmp_path / "view.html"
    process = start_writer(target)
    process.send_signal(signum)
    assert process.wait(timeout=30) == -signum  # still ended by the signal, as without the handler
    assert list(tmp_path.iterdir()) == []  # neither the target nor a *.tmp


@pytest.mark.skipif(not hasattr(signal, "SIGHUP"), reason="POSIX signals")
def test_an_ignored_hangup_stays_ignored(tmp_path):
    target = tmp_path / "view.html"
    process = start_writer(target, "ignore-hup")
    process.send_signal(signal.SIGHUP)  # as under nohup: the write goes on
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=30) == -signal.SIGTERM
    assert list(tmp_path.iterdir()) == []


def test_an_error_while_writing_still_removes_the_temporary_file(tmp_path):
    from snapkv_cli.output_files import atomic_output

    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(RuntimeError), atomic_output(tmp_path / "x.png", binary=True) as file:
        file.write(b"\x89PNG")
        raise RuntimeError("renderer failed")
    assert list(tmp_path.iterdir()) == []
    assert signal.getsignal(signal.SIGTERM) == before  # handlers restored


# --------------------------------------------------------------------------- a full disk during the conversion


def test_a_full_disk_while_converting_the_default_model(tmp_path, monkeypatch):
    """The weights' writer fails with SafetensorError (as a full disk makes it): one user error, nothing left."""
    import transformers
    from safetensors import SafetensorError

    cache = tmp_path / "cache"
    monkeypatch.setenv("SNAPKV_CACHE_DIR", str(cache))
    payload = b"GGUF stand-in"
    default = catalog.by_name(catalog.DEFAULT)
    part = default.gguf.parts[0]
    wheel = tmp_path / part.filename
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr(part.member, payload)
    monkeypatch.setenv(catalog.WHEELS_ENV, str(wheel))
    default = replace_builtin(monkeypatch, catalog.DEFAULT, sha256=hashlib.sha256(payload).hexdigest(),
                              parts=[replace(part, sha256=hashlib.sha256(wheel.read_bytes()).hexdigest())])

    class FullDiskModel:
        config = None

        def eval(self):
            return self

        def save_pretrained(self, directory, **_options):
            Path(directory, "model.safetensors").write_bytes(b"\x00" * 4096)  # half written
            raise SafetensorError("Error while serializing: IoError(No space left on device (os error 28))")

    class Loader:
        @staticmethod
        def from_pretrained(*_args, **_kwargs):
            return FullDiskModel()

    monkeypatch.setattr(transformers, "AutoModelForCausalLM", Loader)
    monkeypatch.setattr(transformers, "AutoTokenizer", Loader)
    with pytest.raises(UserError) as info:
        default.ensure()
    message = str(info.value)
    assert "could not write the model cache" in message and "No space left on device" in message
    assert "free some disk space" in message and "\n" not in message
    models = cache / "models"
    assert not default.directory().exists()
    assert not [p for p in models.iterdir() if p.is_dir()]  # no download or staging directory left
    assert json.dumps(default.status()) and default.status()["cached"] is False  # and the status still reads


# --------------------------------------------------------------------------- names too long for the file system


@pytest.mark.parametrize("option", ["--template", "--model", "--html", "--png"])
def test_a_file_name_too_long_in_any_option_is_a_clean_error(notes, tmp_path, option):
    long_name = str(tmp_path / ("x" * 300 + (".txt" if option == "--template" else "")))
    command = "inspect" if option in ("--html", "--png") else "ask"
    line = one_error_line(runner.invoke(cli.app, [command, notes, QUESTION, option, long_name]))
    assert "too long for the file system" in line and "Errno" not in line and len(line) < 250


def test_error_messages_for_an_unwritable_cache_and_a_too_long_file_name():
    from snapkv_cli.errors import CacheNotWritable, FileNameTooLong

    assert str(CacheNotWritable("/c", "No space left on device", needed="about 1 GB", what="model cache")) == (
        "could not write the model cache in /c: No space left on device; free some disk space (about 1 GB needed) "
        "or set SNAPKV_CACHE_DIR to another directory")
    assert str(CacheNotWritable("/c", "Permission denied")) == (
        "could not write the cache in /c: Permission denied; free some disk space or set SNAPKV_CACHE_DIR to another "
        "directory")
    sixty = "/d/" + "n" * 57
    assert str(FileNameTooLong(sixty, 300)) == (
        f"a file name in '{sixty}' has 300 bytes, too long for the file system (at most 255 per name): use a shorter "
        "name")
    for longer in (sixty + "x", sixty + "x.txt"):  # over 60 characters: the first 57 shown, then an ellipsis
        assert str(FileNameTooLong(longer, 305)).startswith(f"a file name in '{sixty[:57]}...' has 305 bytes")
