"""What a ``--model`` value names: a built-in model, a .gguf file, a local model directory or a Hugging Face id.

:func:`model_source` decides from the name and the file system alone, so a typo is refused at once (before torch is
imported, before anything is downloaded): a name that is none of these is an :class:`~snapkv_cli.errors.UnknownModel`
error that lists the built-in models. :func:`check_reachable` then makes sure that a Hugging Face id whose model is
not yet in the local Hugging Face cache can be fetched: one request with a short timeout and no retries, so that a
machine without network gets its error in seconds rather than after a minute of retries.

No torch or transformers here; huggingface_hub is imported only for a Hugging Face id.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from pathlib import Path

from snapkv_cli.errors import HubModelNotFound, HubUnreachable, UnknownModel, UserError
from snapkv_cli.models import catalog
from snapkv_cli.models.hf_utils import set_hf_env, short_reason
from snapkv_cli.paths import refuse_overlong

# A Hugging Face model id: owner/name, each of ASCII letters, digits, '-', '_' and '.'.
HUB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9_.-]+")
PROBED_FILE = "config.json"  # every transformers model has one: cached means the model is, and the Hub is asked for it
PROBE_TIMEOUT_S = 5.0

@dataclass(frozen=True)
class ModelSource:
    """Where a model comes from. kind: ``builtin`` (``entry``), ``gguf`` (``path``: the file), ``directory``
    (``path``: resolved) or ``hub`` (``name`` is the id); name: as given, stripped (a built-in model's canonical
    name)."""

    name: str
    kind: str
    entry: catalog.CatalogEntry | None = None
    path: Path | None = None


def looks_like_path(name: str) -> bool:
    """A name written as a path (``./x``, ``/x``, ``~/x``, ``x/``, ``x.gguf``): never a Hugging Face id."""
    return (
        name.startswith(("./", "../", "/", "~", ".\\", "..\\"))
        or name.endswith(("/", "\\"))
        or name in (".", "..")
        or name.lower().endswith(".gguf")
    )


def model_source(name: str | None) -> ModelSource:
    """What ``name`` names (None or "": the default model), judged without the network; a path that does not exist
    or is not a model, and a name that is nothing at all, are :class:`UserError`\\ s."""
    entry = catalog.find(name)
    if entry is not None:
        return ModelSource(entry.name, "builtin", entry=entry)
    assert name is not None
    raw = name.strip()
    path = Path(raw).expanduser()
    refuse_overlong(path)
    if raw.lower().endswith(".gguf"):
        if not path.is_file():
            raise UserError(f"model path not found: {raw}; pass an existing .gguf file")
        return ModelSource(raw, "gguf", path=path)
    if path.is_dir():
        return ModelSource(raw, "directory", path=path.resolve())
    if path.exists():
        raise UserError(f"model path {raw} is a file, not a model directory; pass a directory or a .gguf file")
    if looks_like_path(raw) or (path.parent.is_dir() and path.parent != Path(".")):  # models/x with models/ here
        raise UserError(f"model path not found: {raw}; pass an existing directory, a .gguf file or a Hugging Face id")
    if HUB_ID.fullmatch(raw):
        return ModelSource(raw, "hub")
    raise UnknownModel(raw, catalogue_text(), closest_builtin(raw))


def catalogue_text() -> str:
    """The built-in models as one phrase: each canonical name with its size, context and other names."""
    parts = []
    for entry in catalog.ENTRIES:
        others = [alias for alias in entry.aliases if alias.lower() != entry.name]
        default = "the default; " if entry.name == catalog.DEFAULT else ""
        also = f"; also {', '.join(others)}" if others else ""
        parts.append(f"{entry.name} ({default}{entry.parameters}, {entry.context // 1024}k context{also})")
    return ", ".join(parts)


def closest_builtin(name: str) -> str | None:
    """The built-in name or alias most like ``name`` (a likely typo of it), or None."""
    # the canonical name last, so that it is what a typo of any spelling of it is told
    spellings = {alias.lower(): alias for entry in catalog.ENTRIES for alias in (*entry.aliases, entry.name)}
    close = difflib.get_close_matches(name.strip().lower(), list(spellings), n=1, cutoff=0.6)
    return spellings[close[0]] if close else None


_reached: set[str] = set()  # Hugging Face ids this process found on the Hub (asked once per process)


def check_reachable(source: ModelSource) -> None:
    """Refuse, within seconds, a Hugging Face id that is not in the local Hugging Face cache when the Hub cannot be
    reached (:class:`HubUnreachable`, naming the offline options) or does not have it (:class:`HubModelNotFound`).

    One metadata request with a timeout of :data:`PROBE_TIMEOUT_S` and no retries; any other answer from the Hub
    is left to the loader to report. Other kinds of source need no network: nothing to check.
    """
    if source.kind != "hub" or source.name in _reached:
        return
    set_hf_env()
    from huggingface_hub import constants, get_hf_file_metadata, hf_hub_url, try_to_load_from_cache
    from huggingface_hub.errors import GatedRepoError, HfHubHTTPError, RepositoryNotFoundError

    repo_id = source.name
    if isinstance(try_to_load_from_cache(repo_id, PROBED_FILE), str):
        return  # cached: transformers reads it from there
    if constants.HF_HUB_OFFLINE:
        raise HubUnreachable(repo_id, None)
    try:
        get_hf_file_metadata(hf_hub_url(repo_id, PROBED_FILE), timeout=PROBE_TIMEOUT_S)
    except GatedRepoError:
        raise HubModelNotFound(repo_id, gated=True) from None
    except RepositoryNotFoundError:
        raise HubModelNotFound(repo_id) from None
    except HfHubHTTPError:
        pass  # the Hub answered: the loader reports whatever it makes of the model
    except Exception as error:  # a connection refused, a name that does not resolve, a timeout, offline mode
        raise HubUnreachable(repo_id, short_reason(error)) from None
    _reached.add(repo_id)
