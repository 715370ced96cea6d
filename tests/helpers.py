"""Helpers shared by the tests: a stand-in tokenizer, the check of a one-line ``Error:``, a command's ``--json``
object, a record of what each forward of a model received, and a built-in model's pins replaced for a test."""

from __future__ import annotations

import json
from contextlib import contextmanager

# Environment variables that would change what a run does; cleared before every test (conftest.clean_env).
RUN_ENVIRONMENT = ("SNAPKV_MODEL", "SNAPKV_DEBUG", "SNAPKV_DEVICE", "SNAPKV_PREFILL_CHUNK", "SNAPKV_CACHE_DOCS",
                   "SNAPKV_DOC_CACHE_MB", "SNAPKV_MODEL_WHEELS", "SNAPKV_MAX_DOCUMENT_MB")


class WordTokenizer:
    """Token ids decode to words of a few tokens: an id divisible by four starts a word, the others continue it."""

    eos_token_id = None

    def decode(self, ids, skip_special_tokens=True):
        return "".join(f" w{i}" if i % 4 == 0 else f"x{i}" for i in ids)


class DigitTokenizer:
    """Just enough of a tokenizer for ``generate_answer`` on tiny models: token ids decode to their digits, but the
    ``special`` ones are left out when asked to skip special tokens."""

    eos_token_id = None

    def __init__(self, special: frozenset[int] = frozenset()):
        self.special = special

    def decode(self, ids, skip_special_tokens=False):
        return " ".join(str(i) for i in ids if not (skip_special_tokens and i in self.special))


def assert_user_error(result, *fragments: str, code: int = 1) -> str:
    """One ``Error: ...`` line on stderr that holds every fragment, nothing on stdout, no traceback, exit ``code``.

    Fragments may be split over lines by the console's wrapping; returns stderr.
    """
    assert result.exit_code == code, (result.stdout, result.stderr, result.exception)
    assert result.stdout == ""
    assert result.stderr.startswith("Error: ") and result.stderr.endswith("\n"), result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    assert "Traceback" not in result.stderr
    squashed = " ".join(result.stderr.split())
    for fragment in fragments:
        assert fragment in result.stderr or fragment in squashed, (fragment, result.stderr)
    return result.stderr


def snapkv_json(*args: str, input: str | bytes | None = None, env: dict | None = None,
                stderr: str | None = "") -> dict:
    """``snapkv ARGS --json --quiet`` through Typer's ``CliRunner``: it succeeds, stdout is one JSON object on one
    line and nothing else, stderr is ``stderr`` (None: not checked, for a run that may print a notice); returns the
    object."""
    from typer.testing import CliRunner

    from snapkv_cli import cli

    result = CliRunner().invoke(cli.app, [*args, "--json", "--quiet"], input=input, env=env)
    assert result.exit_code == 0, (result.stderr, result.exception)
    if stderr is not None:
        assert result.stderr == stderr
    assert result.stdout.endswith("}\n") and result.stdout.count("\n") == 1, result.stdout
    return json.loads(result.stdout)


class Forwards(list):
    """``(first position, tokens)`` of every forward a model received, in order (the position is None when the
    caller passed no ``cache_position``). Filled by a forward pre-hook: what the model really saw."""

    def hook(self, module, args, kwargs) -> None:
        input_ids = args[0] if args else kwargs["input_ids"]
        cache_position = kwargs.get("cache_position")
        start = int(cache_position[0]) if cache_position is not None else None
        self.append((start, int(input_ids.shape[1])))

    def sizes(self) -> list[int]:
        return [tokens for _, tokens in self]


@contextmanager
def recorded_forwards(model):
    """``with recorded_forwards(model) as forwards:`` records every forward of ``model`` inside the block."""
    forwards = Forwards()
    handle = model.register_forward_pre_hook(forwards.hook, with_kwargs=True)
    try:
        yield forwards
    finally:
        handle.remove()


def record_loaded_forwards(monkeypatch) -> tuple[Forwards, list]:
    """Make every model the command line loads record its forwards: returns the forwards of all of them, in order,
    and the loaded models (``LoadedModel``), for tests that drive ``snapkv`` through its CLI."""
    from snapkv_cli.models import loader

    forwards, loaded_models = Forwards(), []
    real_load_model = getattr(loader.load_model, "__wrapped__", loader.load_model)  # called again: start afresh

    def load_and_record(*args, **kwargs):
        loaded = real_load_model(*args, **kwargs)
        loaded.model.register_forward_pre_hook(forwards.hook, with_kwargs=True)
        loaded_models.append(loaded)
        return loaded

    load_and_record.__wrapped__ = real_load_model
    monkeypatch.setattr(loader, "load_model", load_and_record)
    return forwards, loaded_models


def chunks(first: int, end: int, size: int | None) -> list[tuple[int, int]]:
    """The ``(first position, tokens)`` forwards that prefill positions [first, end) in chunks of ``size``."""
    size = size or end - first
    return [(start, min(size, end - start)) for start in range(first, end, size)]



def recording_presenter():
    """A :class:`~snapkv_cli.answering.presenter.Presenter` whose ``events`` list records progress, phases (with the
    units advanced in each) and notices."""
    from snapkv_cli.answering.presenter import Presenter

    class Recording(Presenter):
        def __init__(self):
            self.events: list = []

        def progress(self, message: str) -> None:
            self.events.append(("progress", message))

        def phase(self, name: str, total, unit: str) -> None:
            self.events.append(["phase", name, total, unit, 0])

        def advance(self, done: int = 1) -> None:
            self.events[-1][4] += done

        def notice(self, message: str) -> None:
            self.events.append(("notice", message))

    return Recording()


def panel_text(text: str) -> str:
    """The words of ``text`` (a report panel on stderr) with its borders and line breaks taken out, so that a phrase
    the panel wrapped over two lines reads as one."""
    import re

    return " ".join(re.sub(r"[│╭╮╰╯─]", " ", text).split())


def replace_builtin(monkeypatch, name: str, *, sha256: str | None = None, size: int | None = None, parts=None,
                    **fields):
    """Put a copy of the built-in model ``name`` in the catalogue for this test, with its GGUF's pinned SHA-256
    (``sha256``), size (``size``), parts (``parts``: :class:`~snapkv_cli.models.wheel_gguf.WheelPart`\\ s) or any
    of the entry's own ``fields`` replaced; returns the new entry (``catalog.by_name`` and ``find`` give it from then
    on)."""
    from dataclasses import replace

    from snapkv_cli.models import catalog

    entry = catalog.by_name(name)
    gguf = entry.gguf
    if sha256 is not None:
        gguf = replace(gguf, sha256=sha256)
    if size is not None:
        gguf = replace(gguf, size=size)
    if parts is not None:
        gguf = replace(gguf, parts=tuple(parts))
    pinned = replace(entry, gguf=gguf, **fields)
    monkeypatch.setattr(catalog, "ENTRIES", tuple(pinned if e.name == name else e for e in catalog.ENTRIES))
    return pinned
