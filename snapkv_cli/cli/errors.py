"""How the command line reports errors: one ``Error:`` line (exit 1) that names the flag to change.

Library errors (:mod:`snapkv_cli.errors`) carry their facts; :func:`message` turns each kind into the line a user
reads, adding the command-line flag where the library only knows the setting. Anything unexpected is one line too,
unless ``SNAPKV_DEBUG`` is set (then the traceback shows).
"""

from __future__ import annotations

import functools
import os

import typer

from ..engine.settings import settings_declarations
from ..errors import (
    BudgetTooSmall,
    DeviceUnavailable,
    DocumentTooLarge,
    InvalidValue,
    ModelOutOfMemory,
    OutOfRange,
    PromptTooLong,
    UnsupportedAttention,
    UserError,
)
from ..generation.options import generation_declarations, generation_flag
from . import console

DEBUG_ENV = "SNAPKV_DEBUG"

# settings (library names) -> the flag that sets them; the compression settings' and the generation options' from
# their declarations
FLAGS = {**{key: declared.flag.partition("/")[0] for name, declared in settings_declarations().items()
            if declared.flag is not None for key in (name, declared.given_as) if key is not None},
         **{name: generation_flag(name) for name, declared in generation_declarations().items()
            if declared.flag is not None},
         "truncate": "--truncate", "older_than": "--older-than", "layer": "--layer", "head": "--head",
         "workers": "--workers", "depths": "--depths", "lengths": "--lengths"}


def message(error: UserError) -> str:
    """The one-line message for ``error``, naming flags."""
    if isinstance(error, InvalidValue):
        return f"{FLAGS.get(error.name, error.name)} must be {error.expected}, got {error.value!r}"
    if isinstance(error, PromptTooLong):
        hint = "select pages with --pages, or pass --truncate middle|start|end"
        if error.alternative:
            name, context = error.alternative
            hint = f"try --model {name} ({context // 1024}k) or --truncate middle"
        return f"{error}: {hint}"
    if isinstance(error, BudgetTooSmall):
        return f"{error} (--budget, --window)"
    if isinstance(error, OutOfRange):
        return f"{FLAGS[error.what]} {str(error).removeprefix(error.what + ' ')}"
    if isinstance(error, DeviceUnavailable):
        return f"{error}; use --device cpu or auto"
    if isinstance(error, DocumentTooLarge):
        return (f"'{error.source}' is {error.size_text}, over the {error.limit_text} limit for documents; raise "
                f"--max-document-mb (env {error.environment}) or give a smaller document")
    if isinstance(error, UnsupportedAttention):
        return (f"method {error.method!r} keeps a different number of tokens per KV head, which needs an attention "
                f"mask that {error.implementation!r} attention does not take: use --head-budgets uniform, or a model "
                f"loaded with {' or '.join(error.supported)} attention")
    if isinstance(error, ModelOutOfMemory):
        return f"{error}; try a smaller --dtype (bfloat16, float16), another --device, or a smaller model"
    return str(error)


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
            console.stderr.print(f"Error: {message(error)}", markup=False, soft_wrap=True)
            raise typer.Exit(1) from None
        except KeyboardInterrupt:
            console.stderr.print("Interrupted", markup=False)
            raise typer.Exit(130) from None
        except Exception as error:
            if os.environ.get(DEBUG_ENV):
                raise
            console.stderr.print(f"Error: {type(error).__name__}: {error} (set {DEBUG_ENV}=1 for the traceback)",
                                 markup=False, soft_wrap=True)
            raise typer.Exit(1) from None

    return wrapper
