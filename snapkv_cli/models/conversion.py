"""A GGUF converted once into a cached model directory (float32 safetensors, tokenizer, chat template).

transformers dequantizes a GGUF on every load (15-90 s for the built-in models, and a high peak RSS); the same weights
saved as safetensors load in well under a second. :func:`build_once` turns a GGUF into such a directory under a
cross-process lock, in a staging directory that is renamed into place only when complete; the completion marker
(written last) names the GGUF's SHA-256, so a directory without it, or made from another file, is rebuilt.

The built-in models (``catalog.py``) and any local ``.gguf`` (``local_gguf.py``) come this way.
:func:`dtype_copy` keeps a copy of such a directory in another dtype (bfloat16) inside it, built once the same way
(lock, staging directory, marker written last), so a bfloat16 run does not convert the float32 weights at every
start; it goes when its directory is rebuilt. No torch or transformers at import time: ``snapkv models list``
imports this.
"""

from __future__ import annotations

import gc
import hashlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from snapkv_cli.errors import CacheNotWritable
from snapkv_cli.models.cache_dir import dir_size_bytes
from snapkv_cli.models.locks import exclusive

Progress = Callable[[str], None]
# obtain(work_dir, progress) -> the GGUF to convert (in work_dir, or anywhere it already lies)
ObtainGGUF = Callable[[Path, Progress], Path]

MARKER_NAME = "snapkv-complete.json"


def read_marker(path: Path) -> dict[str, Any] | None:
    """The completion marker of a converted directory, or None when missing or unreadable."""
    try:
        info = json.loads((path / MARKER_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return info if isinstance(info, dict) else None


def is_complete(path: Path, gguf_sha256: str) -> bool:
    """A converted directory whose marker names ``gguf_sha256`` and that holds a config, weights and a tokenizer."""
    info = read_marker(path)
    if info is None or info.get("gguf_sha256") != gguf_sha256:
        return False
    if not (path / "config.json").is_file() or not any(path.glob("*.safetensors")):
        return False
    return (path / "tokenizer.json").is_file() or (path / "tokenizer_config.json").is_file()


def build_once(target: Path, gguf_sha256: str, obtain: ObtainGGUF, *, title: str, info: dict[str, Any],
               progress: Progress | None = None, needed: str = "about 1 GB", memory: str | None = None) -> Path:
    """Return ``target``, converting the GGUF that ``obtain`` provides into it unless it is already complete.

    ``title`` names the model in progress messages; ``info`` goes into the marker (with the GGUF's hash, versions
    and the time taken); ``needed`` is the disk space it takes at its peak, told before it starts with ``memory`` (its
    peak RSS, when known) and named again when the cache cannot be written. ``obtain`` runs in a
    temporary work directory (removed afterwards, whatever happens) and must return a GGUF whose SHA-256 it checked.
    Whatever fails, nothing half-written is left under ``target``'s name: a later call starts over.
    """
    say = progress or (lambda _msg: None)
    if is_complete(target, gguf_sha256):
        return target
    parent = target.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _not_writable(parent, exc, needed) from None
    waiting = f"Another snapkv process is setting up {title}; waiting for it..."
    with exclusive(parent / f".{target.name}.lock", waiting, say, needed, "model cache"):
        if is_complete(target, gguf_sha256):  # another process finished while we waited
            return target
        _remove_stale_work_dirs(parent, target.name)
        return _build(target, gguf_sha256, obtain, title, info, say, needed, memory)


def dtype_copy(source: Path, dtype: str, progress: Progress | None = None) -> Path:
    """The copy of the converted directory ``source`` with its floating-point weights in ``dtype`` (``bfloat16``),
    at ``source/<dtype>/``, made on first use under a lock (the float32 weights are converted once, not at every
    load). Its marker names the source's GGUF hash, so a copy left from another conversion is rebuilt. Returns
    ``source`` itself for its own dtype; a cache that cannot be written is :class:`CacheNotWritable`."""
    say = progress or (lambda _msg: None)
    info = read_marker(source)
    if info is None or dtype == info.get("dtype", "float32"):
        return source
    sha = str(info.get("gguf_sha256"))
    target = source / dtype

    def done() -> bool:
        marker = read_marker(target)
        return marker is not None and marker.get("dtype") == dtype and is_complete(target, sha)

    if done():
        return target
    waiting = f"Another snapkv process is making the {dtype} copy of {source.name}; waiting for it..."
    with exclusive(source / f".{dtype}.lock", waiting, say, "about 300 MB", "model cache"):
        if done():
            return target
        _remove_stale_work_dirs(source, dtype)
        started = time.monotonic()
        say(f"Saving a {dtype} copy of {source.name} (once)...")
        staging = None
        try:
            try:
                staging = Path(tempfile.mkdtemp(prefix=f".{dtype}.partial-", dir=source))
                versions = save_in_dtype(source, staging, dtype)
            except OSError as exc:
                raise _not_writable(source, exc, "about 300 MB") from None
            marker = {**info, **versions, "created_unix": int(time.time()),
                      "conversion_s": round(time.monotonic() - started, 1), "converted_from": "float32"}
            try:
                (staging / MARKER_NAME).write_text(json.dumps(marker, indent=2) + "\n", encoding="utf-8")  # last
                if target.exists():
                    shutil.rmtree(target)
                os.rename(staging, target)
            except OSError as exc:
                raise _not_writable(source, exc, "about 300 MB") from None
            staging = None
        finally:
            if staging is not None:
                shutil.rmtree(staging, ignore_errors=True)
    return target


def save_in_dtype(source: Path, out_dir: Path, dtype: str) -> dict[str, Any]:
    """Load the model at ``source`` in ``dtype`` and save it with its tokenizer into ``out_dir`` as safetensors;
    the versions used, for the marker."""
    from snapkv_cli.models.hf_utils import quiet_transformers

    quiet_transformers()
    import torch
    import transformers
    from safetensors import SafetensorError
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        model = AutoModelForCausalLM.from_pretrained(str(source), dtype=getattr(torch, dtype))
        model.save_pretrained(str(out_dir))
        AutoTokenizer.from_pretrained(str(source)).save_pretrained(str(out_dir))
    except SafetensorError as exc:  # a full disk reaches us from the writer
        raise OSError(str(exc)) from None
    return {"transformers_version": transformers.__version__, "torch_version": torch.__version__, "dtype": dtype}


def _build(target: Path, gguf_sha256: str, obtain: ObtainGGUF, title: str, info: dict[str, Any], say: Progress,
           needed: str, memory: str | None) -> Path:
    started = time.monotonic()
    parent = target.parent
    if target.exists():
        say(f"The model cache at {target} is incomplete; rebuilding it.")
    else:
        cost = f"{needed} of disk" + (f" and {memory} of memory" if memory else "")
        say(f"Setting up {title} in {target} (once; {cost} at its peak).")
    work = staging = None
    try:
        try:
            work = Path(tempfile.mkdtemp(prefix=f".{target.name}.download-", dir=parent))
            staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.partial-", dir=parent))
        except OSError as exc:
            raise _not_writable(parent, exc, needed) from None
        try:
            gguf = obtain(work, say)
        except OSError as exc:  # writing the GGUF into the work directory (a full disk)
            raise _not_writable(parent, exc, needed) from None
        say("Converting the GGUF to float32 safetensors (once)...")
        from safetensors import SafetensorError

        try:
            versions = convert_gguf(gguf, staging, say)
        except (OSError, SafetensorError) as exc:  # a full disk reaches us as SafetensorError from the writer
            raise _not_writable(parent, exc, needed) from None
        marker = {**info, **versions, "gguf_sha256": gguf_sha256, "created_unix": int(time.time()),
                  "conversion_s": round(time.monotonic() - started, 1)}
        try:
            (staging / MARKER_NAME).write_text(json.dumps(marker, indent=2) + "\n", encoding="utf-8")  # last
            if target.is_symlink() or target.is_file():
                target.unlink()
            elif target.exists():
                shutil.rmtree(target)
            os.rename(staging, target)
        except OSError as exc:
            raise _not_writable(parent, exc, needed) from None
        staging = None
    finally:
        for leftover in (work, staging):
            if leftover is not None:
                shutil.rmtree(leftover, ignore_errors=True)
    size_mb = dir_size_bytes(target) / 1e6
    say(f"{title} ready at {target} ({size_mb:.0f} MB, took {time.monotonic() - started:.0f} s).")
    return target


def convert_gguf(gguf: Path, out_dir: Path, say: Progress) -> dict[str, Any]:
    """Dequantize ``gguf`` with transformers and save it into ``out_dir`` as float32 safetensors with its tokenizer.

    Checks that the saved copy reloads to identical weights and token ids and to the same logits (within float
    rounding) on a chat-formatted message when the tokenizer has a chat template, on plain text otherwise.
    Returns the versions used, for the marker.
    """
    from snapkv_cli.models.hf_utils import no_gguf_progress_bar, quiet_transformers, strip_gguf_quantizer

    quiet_transformers()
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = Path(gguf)
    with no_gguf_progress_bar():
        tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    model.eval()
    strip_gguf_quantizer(model)
    model.save_pretrained(str(out_dir))
    tokenizer.save_pretrained(str(out_dir))

    say("Checking the converted model...")
    # What the reloaded copy must reproduce, taken before the GGUF's model is dropped: one model in memory at a
    # time keeps the conversion's peak at the GGUF load's rather than at two float32 models.
    ids = _probe_ids(tokenizer)
    input_ids = torch.tensor([ids], dtype=torch.long)
    with torch.no_grad():
        expected = model(input_ids=input_ids, logits_to_keep=1).logits
    digests = {name: _digest(tensor) for name, tensor in model.state_dict().items()}
    del model
    gc.collect()
    reloaded = AutoModelForCausalLM.from_pretrained(str(out_dir), dtype=torch.float32)
    reloaded.eval()
    if _probe_ids(AutoTokenizer.from_pretrained(str(out_dir))) != ids:
        raise RuntimeError("the converted tokenizer encodes differently from the GGUF's; conversion aborted")
    saved = reloaded.state_dict()
    for name, digest in digests.items():
        if name not in saved or _digest(saved[name]) != digest:
            raise RuntimeError(f"the converted weight {name} differs from the GGUF's; conversion aborted")
    with torch.no_grad():
        actual = reloaded(input_ids=input_ids, logits_to_keep=1).logits
    # Same weights; the kernels may round differently with other memory layouts (seen: 4e-6 on Gemma 3).
    if not torch.allclose(expected, actual, rtol=1e-4, atol=1e-4):
        diff = (expected - actual).abs().max().item()
        raise RuntimeError(f"the converted model's logits differ from the GGUF's (max diff {diff}); conversion aborted")
    return {"transformers_version": transformers.__version__, "torch_version": torch.__version__, "dtype": "float32"}


def _digest(tensor) -> tuple[str, tuple[int, ...], str]:
    """A tensor's dtype, shape and SHA-256 of its bytes: equal digests, equal tensors."""
    import torch

    data = tensor.detach().reshape(-1).contiguous().view(torch.uint8).numpy() if tensor.numel() else b""
    return str(tensor.dtype), tuple(tensor.shape), hashlib.sha256(data).hexdigest()


def _probe_ids(tokenizer) -> list[int]:
    question = "What is the capital of France?"
    if getattr(tokenizer, "chat_template", None):
        encoded = tokenizer.apply_chat_template([{"role": "user", "content": question}], add_generation_prompt=True,
                                                tokenize=True, return_dict=True)
        return list(encoded["input_ids"])
    return list(tokenizer(f"Question: {question}\nAnswer:")["input_ids"])


def _not_writable(where: Path, exc: Exception, needed: str) -> CacheNotWritable:
    return CacheNotWritable(where, getattr(exc, "strerror", None) or str(exc), needed, what="model cache")


def _remove_stale_work_dirs(parent: Path, name: str) -> None:
    """Drop download/staging directories of ``name`` left behind by killed conversions (called under its lock)."""
    for pattern in (f".{name}.download-*", f".{name}.partial-*"):
        for leftover in parent.glob(pattern):
            if leftover.is_dir() and not leftover.is_symlink():
                shutil.rmtree(leftover, ignore_errors=True)
