"""A local .gguf is converted once and cached by its content hash: the same bytes under another name or place hit
the cache, changed bytes make a new entry, a failed conversion leaves nothing. The transformers conversion is
replaced by a stand-in that saves a tiny model, so the loader's path is exercised end to end."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest

from snapkv_cli.errors import UserError
from snapkv_cli.models import checksums, conversion, local_gguf
from snapkv_cli.models.loader import load_model


@pytest.fixture
def cache(tmp_path, monkeypatch):
    root = tmp_path / "cache"
    monkeypatch.setenv("SNAPKV_CACHE_DIR", str(root))
    return root


def _gguf(path: Path, payload: bytes = b"GGUF v3 pretend weights") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(payload)
    return path


def test_converted_once_and_keyed_by_content(cache, conversions, tmp_path):
    first = _gguf(tmp_path / "a" / "model-q4.gguf")
    target = local_gguf.ensure(first)
    sha = hashlib.sha256(first.read_bytes()).hexdigest()
    assert target == cache / "models" / f"gguf-{sha[:16]}"
    assert json.loads((target / conversion.MARKER_NAME).read_text())["gguf_sha256"] == sha
    assert len(conversions) == 1

    assert local_gguf.ensure(first) == target  # again: no conversion
    moved = tmp_path / "b" / "renamed.gguf"
    moved.parent.mkdir()
    shutil.copy(first, moved)
    assert local_gguf.ensure(moved) == target  # same bytes elsewhere, under another name: the same entry
    assert len(conversions) == 1

    changed = _gguf(tmp_path / "a" / "model-q4.gguf", b"GGUF v3 other weights")
    other = local_gguf.ensure(changed)
    assert other != target and len(conversions) == 2  # new bytes under the old name: a new entry


def test_unchanged_file_is_not_hashed_again(cache, conversions, tmp_path, monkeypatch):
    gguf = _gguf(tmp_path / "m.gguf")
    local_gguf.ensure(gguf)
    hashed: list[Path] = []
    real = checksums.sha256_file
    monkeypatch.setattr(local_gguf, "sha256_file", lambda path: hashed.append(path) or real(path))
    local_gguf.ensure(gguf)
    assert hashed == []  # size and modification time unchanged: the index's hash is used
    stat = gguf.stat()
    os.utime(gguf, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    local_gguf.ensure(gguf)
    assert hashed == [gguf.resolve()]  # touched: hashed again (same content, so still no conversion)
    assert len(conversions) == 1


def test_loader_uses_the_converted_copy(cache, conversions, tmp_path):
    gguf = _gguf(tmp_path / "tiny.gguf")
    first = load_model(str(gguf), device="cpu")
    second = load_model(str(gguf), device="cpu")
    assert first.name == second.name == str(gguf)
    assert Path(first.source) == local_gguf.converted_dir(hashlib.sha256(gguf.read_bytes()).hexdigest())
    assert len(conversions) == 1
    assert first.base_model is False  # the tiny model's tokenizer has a chat template


def test_failed_conversion_leaves_nothing_and_is_a_user_error(cache, tmp_path):
    broken = _gguf(tmp_path / "broken.gguf", b"not a gguf at all")
    with pytest.raises(UserError, match="could not load model") as info:
        load_model(str(broken), device="cpu")
    assert "\n" not in str(info.value)
    models = cache / "models"
    assert not [p for p in models.iterdir() if p.is_dir()]


def test_cached_entries_are_listed(cache, conversions, tmp_path):
    from snapkv_cli.models.catalog import catalogue_rows

    gguf = _gguf(tmp_path / "listed.gguf")
    local_gguf.ensure(gguf)
    rows = catalogue_rows()
    assert rows[-1]["name"] == "listed.gguf" and rows[-1]["cached"] and rows[-1]["source"] == str(gguf.resolve())
    assert rows[-1]["size_bytes"] > 0


def test_first_use_tells_the_hashing_and_the_setup_and_records_the_file(cache, conversions, tmp_path):
    gguf = tmp_path / "big.gguf"
    with gguf.open("wb") as fh:
        fh.truncate(87_500_000)  # sparse: 87.5 MB of zeros, shown as 88 MB
    messages: list[str] = []
    target = local_gguf.ensure(gguf, progress=messages.append)
    assert messages[:2] == ["Hashing big.gguf (88 MB)...",
                            f"Setting up big.gguf in {target} (once; about 0.4 GB of disk at its peak)."]
    marker = json.loads((target / conversion.MARKER_NAME).read_text())
    assert {key: marker[key] for key in ("model", "source", "gguf_file")} == {
        "model": "big.gguf", "source": str(gguf.resolve()), "gguf_file": "big.gguf"}


def test_an_unwritable_cache_names_four_times_the_file_as_the_space_needed(tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("SNAPKV_CACHE_DIR", str(blocker))
    gguf = tmp_path / "big.gguf"
    with gguf.open("wb") as fh:
        fh.truncate(87_500_000)  # 4 x 0.0875 GB + 0.1 GB of margin
    with pytest.raises(UserError) as info:
        local_gguf.ensure(gguf)
    assert "; free some disk space (about 0.4 GB needed) or set SNAPKV_CACHE_DIR" in str(info.value)


@pytest.mark.parametrize("damage", [{"sha256": 12345}, {"sha256": "abc"}, "a list instead of a mapping"])
def test_a_damaged_hash_index_costs_only_a_new_hash(cache, tmp_path, damage):
    gguf = _gguf(tmp_path / "m.gguf")
    stat = gguf.stat()
    index_file = cache / "models" / local_gguf.INDEX_NAME
    index_file.parent.mkdir(parents=True)
    if isinstance(damage, dict):
        entry = {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns, **damage}
        index_file.write_text(json.dumps({str(gguf.resolve()): entry}), encoding="utf-8")
    else:
        index_file.write_text(json.dumps([damage]), encoding="utf-8")
    messages: list[str] = []
    assert local_gguf.content_hash(gguf, messages.append) == hashlib.sha256(gguf.read_bytes()).hexdigest()
    assert messages == ["Hashing m.gguf (0 MB)..."]


def test_every_hashed_file_is_remembered(cache, tmp_path, monkeypatch):
    first, second = _gguf(tmp_path / "one.gguf", b"one"), _gguf(tmp_path / "two.gguf", b"two")
    local_gguf.content_hash(first)
    local_gguf.content_hash(second)  # the index's directory exists by now
    monkeypatch.setattr(local_gguf, "sha256_file", lambda path: pytest.fail(f"{path} hashed again"))
    assert local_gguf.content_hash(first) == hashlib.sha256(b"one").hexdigest()
    assert local_gguf.content_hash(second) == hashlib.sha256(b"two").hexdigest()


def test_cached_entries_skip_what_is_not_a_finished_conversion(cache, conversions, tmp_path):
    """Only complete conversions are listed, whatever sorts before them: a directory without a marker, one whose
    conversion stopped before its weights, a stray file."""
    gguf = _gguf(tmp_path / "listed.gguf")
    target = local_gguf.ensure(gguf)
    sha = hashlib.sha256(gguf.read_bytes()).hexdigest()
    models = cache / "models"
    (models / "gguf-0000000000000000").mkdir()
    unfinished = models / "gguf-0000000000000001"
    unfinished.mkdir()
    (unfinished / conversion.MARKER_NAME).write_text(json.dumps({"gguf_sha256": "01" * 32}), encoding="utf-8")
    (models / "gguf-0000000000000002").write_text("a file", encoding="utf-8")
    assert local_gguf.cached_entries() == [
        {"name": "listed.gguf", "source": str(gguf.resolve()), "path": str(target), "gguf_sha256": sha}]


def test_a_gguf_loaded_in_bfloat16_reads_its_bfloat16_copy_and_tells_each_step(cache, conversions, tmp_path):
    import torch

    gguf = _gguf(tmp_path / "tiny.gguf")
    target = local_gguf.converted_dir(hashlib.sha256(gguf.read_bytes()).hexdigest())
    messages: list[str] = []
    loaded = load_model(str(gguf), device="cpu", dtype="bfloat16", progress=messages.append)
    assert loaded.source == str(target / "bfloat16") and loaded.dtype == torch.bfloat16
    assert messages[:2] == ["Hashing tiny.gguf (0 MB)...",
                            f"Setting up tiny.gguf in {target} (once; about 0.1 GB of disk at its peak)."]
    assert f"Saving a bfloat16 copy of {target.name} (once)..." in messages
    assert messages[-1] == f"Loading {gguf} (bfloat16, cpu)..."
    assert 0 <= loaded.load_seconds < 600


def test_a_gguf_whose_copy_cannot_be_saved_is_converted_at_load(cache, conversions, tmp_path):
    import torch

    gguf = _gguf(tmp_path / "tiny.gguf")
    target = local_gguf.ensure(gguf)
    (target / ".bfloat16.lock").mkdir()  # the copy's lock cannot be created: the directory cannot be written
    messages: list[str] = []
    loaded = load_model(str(gguf), device="cpu", dtype="bfloat16", progress=messages.append)
    assert loaded.source == str(target) and loaded.dtype == torch.bfloat16
    refused = [m for m in messages if m.startswith("Could not save a bfloat16 copy (")]
    assert len(refused) == 1 and refused[0].endswith("); converting at load instead.")
    assert f"could not write the model cache in {target}: " in refused[0]


def test_a_gguf_transformers_cannot_read_is_named_with_the_reason(cache, tmp_path, monkeypatch):
    def unreadable(gguf, out_dir, say):
        raise ValueError("GGUF model with architecture mamba9 is not supported yet.")

    monkeypatch.setattr(conversion, "convert_gguf", unreadable)
    gguf = _gguf(tmp_path / "odd.gguf")
    with pytest.raises(UserError) as info:
        load_model(str(gguf), device="cpu")
    assert str(info.value) == (f"could not load model '{gguf}': GGUF model with architecture mamba9 is not supported "
                               "yet; pass a local directory, a .gguf file, or a Hugging Face id (needs network on "
                               "first use)")
