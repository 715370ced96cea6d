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


@pytest.fixture
def conversions(monkeypatch, tiny_model_path):
    """Stand-in for the transformers conversion: copies the tiny model directory; records each GGUF's bytes."""
    seen: list[bytes] = []

    def fake_convert(gguf: Path, out_dir: Path, say) -> dict:
        seen.append(Path(gguf).read_bytes())
        for item in Path(tiny_model_path).iterdir():
            shutil.copy(item, out_dir / item.name)
        return {"dtype": "float32"}

    monkeypatch.setattr(conversion, "convert_gguf", fake_convert)
    return seen


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
