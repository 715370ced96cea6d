"""The document cache on a damaged or hostile disk: it never costs a run and never trusts or deletes the wrong file.

Forged entries of the wrong shape or dtype (signed correctly, so only the shape check can catch them) are misses;
names and signatures are keyed (HMAC under the directory's secret); junk files never break ``cache list``,
``cache clear``, ``evict()`` or ``store()``; a full disk, a read-only directory or a non-UTF-8 document name fall back
with the reason; "stored" is never said of an entry that is gone; an entry is read through one open file and only
the file that failed is deleted; the prefill chunk size is in the key; and two writers and a reader racing on the
same and different keys never raise and never load a prefix that differs from a fresh prefill.
"""

from __future__ import annotations

import hashlib
import io
import json
import multiprocessing
import os
import stat
import time
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

import snapkv_cli.cli as cli
from snapkv_cli.doc_cache import keys, tensor_file
from snapkv_cli.doc_cache import secret as cache_secret
from snapkv_cli.doc_cache import store as disk
from snapkv_cli.generation import build_prefix
from tests.helpers import snapkv_json
from tests.tiny_models import prompt_ids, tiny_model

runner = CliRunner()
NOTES = ("Skerrow Point Light, winter log.\n\nDuncan Hale repaired the fog signal. The station's coastguard code is "
         "K-4417. Agnes Tolland counted 117 steps up to the lamp room.\n")
QUESTION = "What is the coastguard code?"
SMALL = ["--max-new-tokens", "4", "--budget", "64", "--window", "16"]
WINDOW = 8


@pytest.fixture(autouse=True)
def isolated(monkeypatch, tmp_path):
    for name in ("SNAPKV_MODEL", "SNAPKV_DEBUG", "SNAPKV_DEVICE", "SNAPKV_CACHE_DOCS", "SNAPKV_DOC_CACHE_MB"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SNAPKV_DOC_CACHE_DIR", str(tmp_path / "doc-cache"))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield tmp_path / "doc-cache"
    torch.set_num_threads(threads)


def ask(*args, env=None) -> dict:
    """``snapkv ask ... --cache-docs --json --quiet`` -> its JSON object (stderr may hold a notice)."""
    return snapkv_json("ask", *args, "--cache-docs", env=env, stderr=None)


def entry(index: int, length: int = 40, attention_sums: bool = False):
    """(key, prefix ids, built prefix) of a tiny-Llama prefix."""
    ids = prompt_ids(length, seed=500 + index)[0].tolist()
    key = {"entry": index, "window_size": WINDOW, "attention_sums": attention_sums}
    return key, ids, build_prefix(tiny_model("llama"), ids, WINDOW, accumulate_attention=attention_sums)


def stored(cache: disk.DocCache, index: int, **options):
    key, ids, prefix = entry(index, **options)
    ok, reason, _ = cache.store(key, ids, prefix)
    assert ok, reason
    return key, ids, cache.path_for(key)


def state(cache) -> dict[str, torch.Tensor]:
    """The tensors of ``cache``'s prefix state, by name."""
    return cache.prefix_state().tensors()


def snapshot(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in Path(directory).iterdir() if p.name.endswith(disk.SUFFIX)}


def no_temporaries(directory: Path) -> bool:
    return not [p for p in Path(directory).iterdir() if p.name.startswith(".tmp-") or p.name.endswith(".tmp")]


def forge(cache: disk.DocCache, path: Path, change) -> None:
    """Rewrite ``path`` with ``change(tensors)`` applied and a valid signature: only the shape checks can object."""
    from safetensors.torch import save_file

    tensors, metadata = disk._read(path)
    change(tensors)
    metadata["checksum"] = cache.signature(tensors, metadata)
    save_file({name: t.contiguous() for name, t in tensors.items()}, str(path), metadata=metadata)


# --------------------------------------------------------------------------- shapes, dtypes, keyed hashes


@pytest.mark.parametrize(("change", "reason"), [
    (lambda t: t.update({"layers.0.keys": t["layers.0.keys"][..., :3]}), "keys/values of shape (1, 2, 40, 3)"),
    (lambda t: t.update({"layers.1.values": t["layers.1.values"][..., :3]}), "expected (1, 2, 40, 16)"),
    (lambda t: t.update({"layers.2.window_queries": t["layers.2.window_queries"][:, :4]}),
     "window queries of shape (1, 4, 8, 16), expected (1, 6, 8, 16)"),
    (lambda t: t.update({"layers.0.values": t["layers.0.values"][None]}), "keys/values of shape (1, 1, 2, 40, 16)"),
    (lambda t: t.update({"layers.1.window_positions": t["layers.1.window_positions"].int()}), "dtype torch.int32"),
    (lambda t: t.update({"layers.0.window_queries": t["layers.0.window_queries"].double()}), "dtype torch.float64"),
    (lambda t: t.update({"layers.2.accumulated_attention": t["layers.2.accumulated_attention"][:, :, :1]}),
     "accumulated attention of shape (1, 2, 1, 40)"),
    (lambda t: t.update({"layers.9.keys": t["layers.0.keys"].clone()}), "unexpected tensor names"),
    (lambda t: t.update({"prefix_ids": t["prefix_ids"].int()}),
     "prefix ids of dtype torch.int32, expected torch.int64"),
    (lambda t: t.update({"prefix_ids": t["prefix_ids"][1:]}), "prefix ids of shape (39,), expected (40,)"),
])
def test_entries_of_the_wrong_shape_or_dtype_are_misses(tmp_path, change, reason):
    cache = disk.DocCache(tmp_path / "docs")
    key, ids, path = stored(cache, 0, attention_sums=True)
    other_key, other_ids, _ = stored(cache, 1)
    forge(cache, path, change)
    before = snapshot(cache.directory)
    lookup = cache.load(key, ids, tiny_model("llama"))
    assert lookup.status == "rebuilt" and lookup.cache is None
    assert reason in lookup.reason, lookup.reason
    assert not path.exists()  # validated as bad: removed
    after = snapshot(cache.directory)
    assert after == {name: data for name, data in before.items() if name != path.name}  # the others intact
    assert cache.load(other_key, other_ids, tiny_model("llama")).status == "hit"


def test_names_and_signatures_are_keyed(tmp_path):
    first, second = disk.DocCache(tmp_path / "a"), disk.DocCache(tmp_path / "b")
    key, ids, path = stored(first, 0)
    plain = hashlib.sha256(keys.key_text(key).encode()).hexdigest()
    assert plain[:40] not in path.name and plain[-40:] not in path.name  # not guessable from the key alone
    assert second.path_for(key).name != path.name  # another directory, another secret, another name
    secret = first.directory / cache_secret.SECRET_NAME
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600 and len(secret.read_bytes()) == 32
    # an entry signed without the secret (the old plain SHA-256 checksum) is refused
    tensors, metadata = disk._read(path)
    metadata["checksum"] = hashlib.sha256(b"".join(t.numpy().tobytes() for t in tensors.values())).hexdigest()
    from safetensors.torch import save_file

    save_file(tensors, str(path), metadata=metadata)
    lookup = first.load(key, ids, tiny_model("llama"))
    assert lookup.status == "rebuilt" and "checksum mismatch" in lookup.reason
    # an entry copied from a directory with another secret is refused too
    stored(second, 0)
    os.replace(second.path_for(key), path)
    assert first.load(key, ids, tiny_model("llama")).status == "rebuilt"
    assert first.load(key, ids, tiny_model("llama")).status == "miss"  # it was removed; nothing else touched


def test_values_changed_with_shapes_kept_are_misses(tmp_path):
    """A signed entry whose tensors keep every name, shape and dtype but whose window positions say another
    window (they must be the prefix's last positions) is refused and removed."""
    cache = disk.DocCache(tmp_path / "docs")
    key, ids, path = stored(cache, 0)
    forge(cache, path, lambda t: t.update({"layers.1.window_positions": t["layers.1.window_positions"] - 1}))
    lookup = cache.load(key, ids, tiny_model("llama"))
    assert lookup.status == "rebuilt" and "layer 1: wrong window positions" in lookup.reason, lookup.reason
    assert not path.exists()


def test_metadata_edited_without_signing_again_is_refused(tmp_path):
    """The signature covers the key in the metadata: an entry moved under another key's name with only its metadata
    rewritten (not signed again) is a checksum mismatch, not a hit."""
    from safetensors.torch import save_file

    cache = disk.DocCache(tmp_path / "docs")
    key, ids, path = stored(cache, 0)
    other = {**key, "model": "another revision"}  # same tensors, same shapes: only the key tells them apart
    tensors, metadata = disk._read(path)
    metadata["key"] = keys.key_text(other)
    save_file(tensors, str(cache.path_for(other)), metadata=metadata)
    lookup = cache.load(other, ids, tiny_model("llama"))
    assert lookup.status == "rebuilt" and "checksum mismatch" in lookup.reason, lookup.reason
    assert cache.load(key, ids, tiny_model("llama")).status == "hit"  # the entry as written is sound


def test_a_prefix_shorter_than_the_window_is_a_hit(tmp_path):
    """A document whose prefix has fewer tokens than the observation window is stored and loaded like any other,
    bit for bit."""
    cache = disk.DocCache(tmp_path / "docs")
    ids = prompt_ids(WINDOW - 3, seed=77)[0].tolist()
    key = {"entry": "short", "window_size": WINDOW, "attention_sums": False}
    prefix = build_prefix(tiny_model("llama"), ids, WINDOW)
    ok, reason, _ = cache.store(key, ids, prefix)
    assert ok, reason
    lookup = cache.load(key, ids, tiny_model("llama"))
    assert lookup.status == "hit", lookup.reason
    fresh, loaded = state(prefix), state(lookup.cache)
    assert fresh.keys() == loaded.keys() and all(torch.equal(fresh[name], loaded[name]) for name in fresh)


@pytest.mark.parametrize("damaged", [b"short", bytes(cache_secret.SECRET_BYTES + 1), b""],
                         ids=["short", "one-byte-too-long", "empty"])
def test_a_damaged_secret_is_a_miss_with_the_reason(tmp_path, damaged):
    cache = disk.DocCache(tmp_path / "docs")
    key, ids, _ = stored(cache, 0)
    (cache.directory / cache_secret.SECRET_NAME).write_bytes(damaged)
    lookup = cache.load(key, ids, tiny_model("llama"))
    assert lookup.status == "miss" and "is damaged" in lookup.reason
    stored_, reason, _ = cache.store(*entry(1))
    assert not stored_ and "is damaged" in reason


def rewrite_header(path: Path, change) -> None:
    """Rewrite the safetensors header of ``path`` with ``change(header)`` applied; the data bytes stay as they are."""
    data = path.read_bytes()
    length = int.from_bytes(data[:8], "little")
    header = json.loads(data[8:8 + length])
    change(header)
    raw = json.dumps(header).encode()
    path.write_bytes(len(raw).to_bytes(8, "little") + raw + data[8 + length:])


def test_a_data_range_longer_than_its_shape_is_an_unreadable_file(tmp_path):
    """Each tensor's data range must be exactly as long as its shape and dtype need: a longer one (inside the file)
    makes the file unreadable, so the entry is refused and removed."""
    path = tmp_path / "one.safetensors"
    raw = json.dumps({"t": {"dtype": "F32", "shape": [2], "data_offsets": [0, 12]}}).encode()
    path.write_bytes(len(raw).to_bytes(8, "little") + raw + bytes(12))
    with open(path, "rb") as file, pytest.raises(tensor_file.BadTensorFile, match="12 bytes for shape"):
        tensor_file.read_tensors(file)

    cache = disk.DocCache(tmp_path / "docs")
    key, ids, path = stored(cache, 0)
    rewrite_header(path, lambda header: header["prefix_ids"].update(shape=[len(ids) - 1]))
    lookup = cache.load(key, ids, tiny_model("llama"))
    assert lookup.status == "rebuilt" and "unreadable file" in lookup.reason, lookup.reason
    assert f"{8 * len(ids)} bytes for shape [{len(ids) - 1}]" in lookup.reason
    assert not path.exists()


# --------------------------------------------------------------------------- junk in the directory


def junk_files(directory: Path) -> list[str]:
    directory.mkdir(parents=True, exist_ok=True)
    header = json.dumps([1, 2, 3]).encode()
    files = {
        "list-header.safetensors": len(header).to_bytes(8, "little") + header,
        "empty.safetensors": b"",
        "garbage.safetensors": bytes(range(256)) * 3,
    }
    metadata = {"__metadata__": {"created": "yesterday", "key": json.dumps({"model": "not a dict",
                                                                           "prefix_tokens": "many"}),
                                 "document": "caf\udce9.txt".encode("utf-8", "surrogatepass").decode("utf-8",
                                                                                                     "replace")}}
    header = json.dumps(metadata).encode()
    files["bad-metadata.safetensors"] = len(header).to_bytes(8, "little") + header
    deep = ("[" * 100_000).encode()
    files["deep.safetensors"] = len(deep).to_bytes(8, "little") + deep
    for name, data in files.items():
        (directory / name).write_bytes(data)
    (directory / "a-directory.safetensors").mkdir()
    raw = os.fsencode(str(directory)) + b"/caf\xe9-\xff.safetensors"  # a name that is not UTF-8
    with open(raw, "wb") as file:
        file.write(b"\x00" * 16)
    return [*files, os.fsdecode(raw)]


def test_junk_files_never_break_list_clear_evict_or_store(tmp_path, isolated):
    cache = disk.DocCache(isolated)
    good = stored(cache, 0)
    junk_files(isolated)
    listing = runner.invoke(cli.app, ["cache", "list"])
    assert listing.exit_code == 0, (listing.stderr, listing.exception)
    assert "7 cached document(s)" in listing.stdout and "(unreadable)" in listing.stdout
    as_json = runner.invoke(cli.app, ["cache", "list", "--json"])
    assert as_json.exit_code == 0, (as_json.stderr, as_json.exception)
    entries = json.loads(as_json.stdout)["entries"]
    assert len(entries) == 7 and sum(e["created"] is not None for e in entries) == 1  # the good one
    assert any(e["file"] == "caf\\xe9-\\xff.safetensors" for e in entries)
    junk = next(e for e in entries if e["file"] == "bad-metadata.safetensors")
    assert (junk["model"], junk["prefix_tokens"], junk["created"]) == (None, None, None)
    assert cache.evict() == []  # under the cap: nothing to do, and no error
    ok, reason, _ = cache.store(*entry(1))
    assert ok, reason
    assert cache.load(*good[:2], tiny_model("llama")).status == "hit"
    small = disk.DocCache(isolated, max_bytes=good[2].stat().st_size + 64)
    small.evict(keep=good[2])
    assert good[2].exists()  # kept; the rest (junk included) went to make room
    cleared = runner.invoke(cli.app, ["cache", "clear"])
    assert cleared.exit_code == 0 and cleared.stdout.startswith("removed"), (cleared.stderr, cleared.exception)
    assert [p.name for p in isolated.iterdir() if p.name.endswith(disk.SUFFIX)] == ["a-directory.safetensors"]


# --------------------------------------------------------------------------- a disk that fails


def failing_save(error: Exception):
    """A ``save_file`` that writes part of the file, then fails as a full disk does."""

    def save_file(tensors, filename, metadata=None):
        with open(filename, "wb") as file:
            file.write(b"\x00" * 1000)
        raise error

    return save_file


@pytest.mark.parametrize("error", [
    pytest.param("safetensor", id="SafetensorError"),
    pytest.param(OSError(28, "No space left on device"), id="ENOSPC"),
])
def test_a_full_disk_is_not_stored_with_the_reason(tmp_path, monkeypatch, error):
    from safetensors import SafetensorError

    error = SafetensorError("Error while serializing: IoError(No space left on device)") \
        if error == "safetensor" else error
    cache = disk.DocCache(tmp_path / "docs")
    stored(cache, 0)
    before = snapshot(cache.directory)
    monkeypatch.setattr("safetensors.torch.save_file", failing_save(error))
    ok, reason, size = cache.store(*entry(1))
    assert not ok and size > 0 and "No space left on device" in reason and type(error).__name__ in reason
    assert snapshot(cache.directory) == before and no_temporaries(cache.directory)


def test_a_full_disk_does_not_cost_the_run(notes, tiny_model_path, isolated, monkeypatch):
    from safetensors import SafetensorError

    first = ask(notes, QUESTION, "--model", tiny_model_path, *SMALL)
    before = snapshot(isolated)
    monkeypatch.setattr("safetensors.torch.save_file", failing_save(SafetensorError("No space left on device")))
    other = Path(notes).with_name("other.txt")
    other.write_text(NOTES.replace("K-4417", "K-9"), encoding="utf-8")
    report = ask(str(other), QUESTION, "--model", tiny_model_path, *SMALL)
    assert report["doc_cache"]["status"] == "not_stored" and "No space left" in report["doc_cache"]["reason"]
    assert report["prefix"]["source"] == "prefill" and report["generated_tokens"] > 0
    assert snapshot(isolated) == before and no_temporaries(isolated)
    assert ask(notes, QUESTION, "--model", tiny_model_path, *SMALL)["answer"] == first["answer"]


def read_only(monkeypatch, directory: Path) -> None:
    """Make ``directory`` behave as read-only (tests may run as root, where chmod does not stop writes)."""
    import tempfile

    def refuse(*_args, **_kwargs):
        raise OSError(30, "Read-only file system")

    real_unlink, real_mkstemp = os.unlink, tempfile.mkstemp

    def unlink(path, *args, **kwargs):
        if Path(path).parent == directory:
            refuse()
        return real_unlink(path, *args, **kwargs)

    def mkstemp(*args, dir=None, **kwargs):
        if dir is not None and Path(dir) == directory:
            refuse()
        return real_mkstemp(*args, dir=dir, **kwargs)

    monkeypatch.setattr(os, "unlink", unlink)
    monkeypatch.setattr(Path, "unlink", lambda self, missing_ok=False: unlink(self))
    monkeypatch.setattr(tempfile, "mkstemp", mkstemp)


def test_a_read_only_directory_with_a_corrupt_entry(notes, tiny_model_path, isolated, monkeypatch):
    first = ask(notes, QUESTION, "--model", tiny_model_path, *SMALL)
    path = Path(first["doc_cache"]["path"])
    path.write_bytes(path.read_bytes()[:1000])  # truncated
    read_only(monkeypatch, isolated)
    report = ask(notes, QUESTION, "--model", tiny_model_path, *SMALL)
    assert report["answer"] == first["answer"] and report["prefix"]["source"] == "prefill"
    assert report["doc_cache"]["status"] == "not_stored" and "Read-only file system" in report["doc_cache"]["reason"]
    assert path.exists()
    cache = disk.DocCache(isolated)
    lookup = cache.load(json.loads(disk._read_metadata(path).get("key", "{}")) or {"x": 1}, [1], tiny_model("llama"))
    assert lookup.status in ("rebuilt", "miss")  # no exception
    assert runner.invoke(cli.app, ["cache", "clear"]).exit_code == 0  # nothing removable: still no error


def test_a_document_name_that_is_not_utf8(tmp_path, tiny_model_path, isolated):
    raw = os.fsencode(str(tmp_path)) + b"/caf\xe9.txt"
    with open(raw, "wb") as file:
        file.write(NOTES.encode())
    name = os.fsdecode(raw)
    report = ask(name, QUESTION, "--model", tiny_model_path, *SMALL)
    assert report["doc_cache"]["status"] == "stored" and report["document"].endswith("caf\\xe9.txt")
    listing = runner.invoke(cli.app, ["cache", "list"])
    assert listing.exit_code == 0 and "caf\\xe9.txt" in listing.stdout
    html = tmp_path / "view.html"
    result = runner.invoke(cli.app, ["inspect", name, QUESTION, "--model", tiny_model_path, "--budget", "64",
                                     "--window", "16", "--html", str(html), "--quiet"])
    assert result.exit_code == 0, (result.stderr, result.exception)
    assert "caf\\xe9.txt" in html.read_text(encoding="utf-8")


# --------------------------------------------------------------------------- the cap


def test_stored_is_never_said_of_an_entry_that_is_gone(tmp_path):
    probe = disk.DocCache(tmp_path / "probe")
    key, ids, path = stored(probe, 0)
    file_size = path.stat().st_size
    tensor_bytes = file_size - 8 - int.from_bytes(path.read_bytes()[:8], "little")
    # a cap between the tensors' bytes and the file's: the entry cannot stay, so it is not stored
    cache = disk.DocCache(tmp_path / "docs", max_bytes=tensor_bytes + 10)
    ok, reason, size = cache.store(*entry(0))
    assert not ok and "more than the cache cap" in reason and size == file_size
    assert snapshot(cache.directory) == {} and no_temporaries(cache.directory)
    # a cap of exactly one file: each new entry evicts the previous one and is there when "stored" is said
    cache = disk.DocCache(tmp_path / "one", max_bytes=file_size)
    for index in range(3):
        key, ids, prefix = entry(index)
        ok, reason, _ = cache.store(key, ids, prefix)
        assert ok, reason
        assert cache.path_for(key).exists() and len(cache.entries()) == 1


# --------------------------------------------------------------------------- one file, and only the bad one deleted


def test_header_and_data_come_from_the_one_file_that_was_opened(tmp_path, monkeypatch):
    cache = disk.DocCache(tmp_path / "docs")
    key, ids, path = stored(cache, 0)
    _, _, other_path = stored(cache, 1)
    real_read_header = tensor_file.read_header

    def read_header_then_swap(file):
        result = real_read_header(file)
        os.replace(other_path, path)  # a writer renames another file into place mid-read
        return result

    monkeypatch.setattr(tensor_file, "read_header", read_header_then_swap)
    lookup = cache.load(key, ids, tiny_model("llama"))
    assert lookup.status == "hit", lookup.reason  # everything came from the file we opened: consistent
    fresh, loaded = state(entry(0)[2]), state(lookup.cache)
    assert all(torch.equal(fresh[name], loaded[name]) for name in fresh)


def test_a_file_replaced_after_it_failed_validation_is_not_deleted(tmp_path, monkeypatch):
    cache = disk.DocCache(tmp_path / "docs")
    key, ids, path = stored(cache, 0)
    good = path.read_bytes()
    path.write_bytes(good[:-10] + bytes(10))  # damaged: its signature will not match
    real_validate = disk._validate

    def validate_while_a_writer_repairs(*args):
        replacement = path.with_name(".tmp-good")
        replacement.write_bytes(good)
        os.replace(replacement, path)  # another process stores a good entry before we delete the bad one
        return real_validate(*args)

    monkeypatch.setattr(disk, "_validate", validate_while_a_writer_repairs)
    lookup = cache.load(key, ids, tiny_model("llama"))
    assert lookup.status == "rebuilt" and "checksum mismatch" in lookup.reason
    assert path.read_bytes() == good  # not ours to delete
    monkeypatch.setattr(disk, "_validate", real_validate)
    assert cache.load(key, ids, tiny_model("llama")).status == "hit"


# --------------------------------------------------------------------------- the prefill chunk


def test_the_prefill_chunk_is_part_of_the_key(notes, tiny_model_path, isolated):
    from snapkv_cli.answering.prompting import load_template
    from snapkv_cli.models.loader import load_model

    loaded = load_model(tiny_model_path, device="cpu")
    ids = list(range(5, 45))
    key = lambda chunk: keys.prefix_key(loaded, load_template(), ids, 16, False, prefill_chunk=chunk)
    assert key(None) == key(40) == key(1000)  # a chunk as long as the prefix is one pass
    assert len({keys.key_text(key(c)) for c in (None, 7, 16)}) == 3
    one_pass = ask(notes, QUESTION, "--model", tiny_model_path, *SMALL)
    chunked = ask(notes, QUESTION, "--model", tiny_model_path, *SMALL, "--prefill-chunk", "7")
    assert (one_pass["doc_cache"]["status"], chunked["doc_cache"]["status"]) == ("stored", "stored")
    again = ask(notes, QUESTION, "--model", tiny_model_path, *SMALL, "--prefill-chunk", "7")
    assert again["doc_cache"]["status"] == "hit" and again["doc_cache"]["path"] == chunked["doc_cache"]["path"]
    assert again["answer"] == chunked["answer"] and again["layers"] == chunked["layers"]
    assert len(disk.DocCache(isolated).entries()) == 2


# --------------------------------------------------------------------------- two writers and a reader

RACE_SECONDS = 3.0
RACE_KEYS = 3


def _race_worker(role: str, directory: str, cap: int, seed: int, start, results) -> None:
    """Store (writer) or load (reader) the race's keys for RACE_SECONDS once all workers are ready; report counts
    or the exception."""
    import random
    import traceback

    import torch

    torch.set_num_threads(1)
    try:
        cache = disk.DocCache(directory, max_bytes=cap)
        model = tiny_model("llama")
        prefixes = [entry(index) for index in range(RACE_KEYS)]
        fresh = [state(prefix) for _, _, prefix in prefixes]
        chooser = random.Random(seed)
        counts = {"stored": 0, "not_stored": 0, "hit": 0, "miss": 0, "rebuilt": 0, "mismatch": 0}
        start.wait(timeout=300)  # everyone imported and built: race from now on
        deadline, hard_deadline = time.time() + RACE_SECONDS, time.time() + 10 * RACE_SECONDS
        goal = "stored" if role == "writer" else "hit"  # on a slow machine, race a little longer to see one
        while time.time() < deadline or (not counts[goal] and time.time() < hard_deadline):
            index = chooser.randrange(RACE_KEYS)
            key, ids, prefix = prefixes[index]
            if role == "writer":
                ok, _reason, _ = cache.store(key, ids, prefix)
                counts["stored" if ok else "not_stored"] += 1
                continue
            lookup = cache.load(key, ids, model)
            counts[lookup.status] += 1
            if lookup.cache is not None:
                loaded = state(lookup.cache)
                counts["mismatch"] += not all(torch.equal(loaded[n], fresh[index][n]) for n in fresh[index])
        results.put((role, counts, None))
    except BaseException:
        results.put((role, None, traceback.format_exc()))


def test_two_writers_and_a_reader_race_without_errors_or_wrong_prefixes(tmp_path):
    directory = tmp_path / "race"
    probe = disk.DocCache(tmp_path / "probe")
    size = stored(probe, 0)[2].stat().st_size
    cap = int(2.5 * size)  # room for two of the three keys: eviction runs all the time
    context = multiprocessing.get_context("spawn")
    results, start = context.Queue(), context.Barrier(3)
    workers = [context.Process(target=_race_worker, args=(role, str(directory), cap, seed, start, results))
               for seed, role in enumerate(("writer", "writer", "reader"))]
    for worker in workers:
        worker.start()
    reports = [results.get(timeout=400) for _ in workers]
    for worker in workers:
        worker.join(timeout=30)
    errors = [error for _, _, error in reports if error]
    assert not errors, "\n".join(errors)
    reader = next(counts for role, counts, _ in reports if role == "reader")
    writers = [counts for role, counts, _ in reports if role == "writer"]
    assert reader["mismatch"] == 0 and reader["hit"] > 0, reader
    assert all(counts["stored"] > 0 for counts in writers), writers
    assert no_temporaries(directory)  # every writer renamed or removed its own temporary file
    assert disk.DocCache(directory, max_bytes=cap).total_bytes() <= cap


# --------------------------------------------------------------------------- the safetensors reader, hand-built files


def hand_built(path: Path, header, data: bytes = b"", *, length: int | None = None) -> Path:
    """A file of an 8-byte little-endian header length (``length``, else the header's own), the header (a JSON value,
    or raw bytes) and ``data``."""
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    path.write_bytes((len(raw) if length is None else length).to_bytes(8, "little") + raw + data)
    return path


def read_error(path: Path) -> str:
    """The message of the :class:`BadTensorFile` that reading ``path`` raises (any other error fails the test)."""
    with open(path, "rb") as file, pytest.raises(tensor_file.BadTensorFile) as info:
        tensor_file.read_tensors(file)
    return str(info.value)


def test_the_smallest_safetensors_file_is_an_empty_header(tmp_path):
    """``{}`` as the whole file (a 2-byte header ending exactly at the end of the file) holds no tensors and no
    metadata; one byte less of header or of file is refused."""
    empty = hand_built(tmp_path / "empty.safetensors", b"{}")
    with open(empty, "rb") as file:
        assert tensor_file.read_tensors(file) == ({}, {})
    assert read_error(hand_built(tmp_path / "one.safetensors", b"{")) == \
        "header length 1 does not fit a file of 9 bytes"
    assert read_error(hand_built(tmp_path / "long.safetensors", b"{}", length=3)) == \
        "header length 3 does not fit a file of 10 bytes"
    assert read_error(hand_built(tmp_path / "past.safetensors", b"{}", length=12)) == \
        "header length 12 does not fit a file of 10 bytes"
    (tmp_path / "seven.safetensors").write_bytes(bytes(7))
    assert read_error(tmp_path / "seven.safetensors") == "7 bytes: too short for a safetensors header"


def test_a_header_that_is_not_a_json_object_says_what_it_is(tmp_path):
    assert read_error(hand_built(tmp_path / "a.safetensors", b"{nope")) == "the header is not JSON (JSONDecodeError)"
    assert read_error(hand_built(tmp_path / "b.safetensors", b"\xff\xfe")) == \
        "the header is not JSON (UnicodeDecodeError)"
    assert read_error(hand_built(tmp_path / "c.safetensors", [1, 2])) == "the header is a JSON list, not an object"
    for metadata in (["a", "b"], {"a": 1}, {"a": ["b"]}, "text"):
        path = hand_built(tmp_path / "d.safetensors", {"__metadata__": metadata})
        assert read_error(path) == "__metadata__ is not a map of strings", metadata


@pytest.mark.parametrize(("entry", "message"), [
    ([1, 2], "tensor 't': its header entry is not an object"),
    ({"dtype": "F8", "shape": [1], "data_offsets": [0, 1]}, "tensor 't': unknown dtype 'F8'"),
    ({"dtype": "U8", "shape": 4, "data_offsets": [0, 4]}, "tensor 't': bad shape 4"),
    ({"dtype": "U8", "shape": None, "data_offsets": [0, 4]}, "tensor 't': bad shape None"),
    ({"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}, "tensor 't': bad shape [-1]"),
    ({"dtype": "U8", "shape": ["4"], "data_offsets": [0, 4]}, "tensor 't': bad shape ['4']"),
    ({"dtype": "U8", "shape": [4], "data_offsets": None}, "tensor 't': data offsets None outside the file"),
    ({"dtype": "U8", "shape": [4], "data_offsets": [0, 4, 8]}, "tensor 't': data offsets [0, 4, 8] outside the file"),
    ({"dtype": "U8", "shape": [4], "data_offsets": [0, "4"]}, "tensor 't': data offsets [0, '4'] outside the file"),
    ({"dtype": "U8", "shape": [4], "data_offsets": [8, 4]}, "tensor 't': data offsets [8, 4] outside the file"),
    ({"dtype": "U8", "shape": [4], "data_offsets": [-4, 0]}, "tensor 't': data offsets [-4, 0] outside the file"),
    ({"dtype": "U8", "shape": [12], "data_offsets": [4, 16]}, "tensor 't': data offsets [4, 16] outside the file"),
])
def test_a_bad_tensor_entry_is_named_with_what_is_wrong(tmp_path, entry, message):
    """The file has 12 data bytes; each entry is wrong in one way, and the message names the tensor and the fault.
    Nothing is read past the header: :func:`read_metadata` refuses the file too."""
    path = hand_built(tmp_path / "t.safetensors", {"t": entry}, bytes(12))
    assert read_error(path) == message
    with open(path, "rb") as file, pytest.raises(tensor_file.BadTensorFile, match=r"^tensor 't': "):
        tensor_file.read_metadata(file)


def test_zero_sized_tensors_are_read_with_their_shape_and_dtype(tmp_path):
    """A tensor with a zero dimension has an empty data range; it is read as an empty tensor of its own shape and
    dtype, and the tensors after it in the file are read too."""
    header = {"none": {"dtype": "F16", "shape": [2, 0], "data_offsets": [0, 0]},
              "also_none": {"dtype": "I64", "shape": [0], "data_offsets": [4, 4]},
              "four": {"dtype": "U8", "shape": [2, 2], "data_offsets": [0, 4]},
              "__metadata__": {"note": "hand made"}}
    path = hand_built(tmp_path / "z.safetensors", header, bytes([1, 2, 3, 4]))
    with open(path, "rb") as file:
        tensors, metadata = tensor_file.read_tensors(file)
    assert metadata == {"note": "hand made"}
    assert sorted(tensors) == ["also_none", "four", "none"]
    assert (tuple(tensors["none"].shape), tensors["none"].dtype) == ((2, 0), torch.float16)
    assert (tuple(tensors["also_none"].shape), tensors["also_none"].dtype) == ((0,), torch.int64)
    assert tensors["four"].tolist() == [[1, 2], [3, 4]] and tensors["four"].dtype == torch.uint8


class _ShrinkingFile(io.FileIO):
    """A file that another process cuts to ``keep`` bytes just before this reader's ``n``-th read."""

    def __init__(self, path: Path, keep: int, n: int):
        super().__init__(path, "rb")
        self.keep, self.n, self.reads = keep, n, 0

    def _maybe_shrink(self):
        self.reads += 1
        if self.reads == self.n:
            os.truncate(self.name, self.keep)

    def read(self, size=-1):
        self._maybe_shrink()
        return super().read(size)

    def readinto(self, buffer):
        self._maybe_shrink()
        return super().readinto(buffer)


def test_a_file_cut_short_while_it_is_read_is_unreadable(tmp_path):
    """The sizes are checked against the file's size when it was opened; a file truncated by someone else during
    the read is refused with where it ended, not read as garbage or crashed on."""
    header = {"a": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]},
              "b": {"dtype": "U8", "shape": [4], "data_offsets": [4, 8]}}
    path = hand_built(tmp_path / "s.safetensors", header, bytes(range(8)))
    length = int.from_bytes(path.read_bytes()[:8], "little")
    with _ShrinkingFile(path, keep=8 + length // 2, n=2) as file, \
            pytest.raises(tensor_file.BadTensorFile, match=r"^the header is cut short$"):  # cut inside the header
        tensor_file.read_tensors(file)
    hand_built(path, header, bytes(range(8)))
    with _ShrinkingFile(path, keep=8 + length + 6, n=4) as file, \
            pytest.raises(tensor_file.BadTensorFile, match=r"^tensor 'b': the file ends inside its data$"):
        tensor_file.read_tensors(file)  # cut inside the second tensor's data


# --------------------------------------------------------------------------- exact reasons, what is removed


def without_signing(path: Path, change) -> None:
    """Rewrite the metadata of ``path`` with ``change(metadata, tensors)`` applied, the signature left as it was."""
    from safetensors.torch import save_file

    tensors, metadata = disk._read(path)
    change(metadata, tensors)
    save_file(tensors, str(path), metadata=metadata)


MISMATCH = "checksum mismatch (the file changed after it was written, or another key signed it)"


@pytest.mark.parametrize(("change", "reason"), [
    (lambda m, t: m.update(format_version="1"), "not a snapkv document cache file of this version"),
    (lambda m, t: m.update(format="safetensors"), "not a snapkv document cache file of this version"),
    (lambda m, t: m.update(key="{not json"), "unreadable key in the metadata"),
    (lambda m, t: m.pop("key"), "unreadable key in the metadata"),
    (lambda m, t: m.update(key=keys.key_text({"entry": 1, "window_size": WINDOW, "attention_sums": False})),
     "metadata does not match this model, template or document"),
    (lambda m, t: t.update(prefix_ids=t["prefix_ids"].flip(0).contiguous()),
     "stored token ids differ from the prompt's"),
    (lambda m, t: m.pop("checksum"), MISMATCH),
    (lambda m, t: m.update(checksum=m["checksum"][::-1]), MISMATCH),
])
def test_a_refused_entry_says_exactly_why_and_is_removed(tmp_path, change, reason):
    cache = disk.DocCache(tmp_path / "docs")
    key, ids, path = stored(cache, 0)
    without_signing(path, change)
    lookup = cache.load(key, ids, tiny_model("llama"))
    assert (lookup.status, lookup.reason, lookup.path, lookup.cache) == ("rebuilt", reason, path, None)
    assert not path.exists()


def test_a_signature_that_is_not_text_is_a_checksum_mismatch(tmp_path):
    """A forged checksum holding a lone surrogate (valid JSON, not encodable) is a mismatch like any other."""
    cache = disk.DocCache(tmp_path / "docs")
    key, ids, path = stored(cache, 0)
    rewrite_header(path, lambda header: header["__metadata__"].update(checksum="\ud800" * 64))
    lookup = cache.load(key, ids, tiny_model("llama"))
    assert (lookup.status, lookup.reason) == ("rebuilt", MISMATCH)
    assert not path.exists()


def test_a_bad_entry_that_cannot_be_removed_says_so(tmp_path, monkeypatch):
    cache = disk.DocCache(tmp_path / "docs")
    key, ids, path = stored(cache, 0)
    damaged = path.read_bytes()[:-10] + bytes(10)
    path.write_bytes(damaged)
    read_only(monkeypatch, cache.directory)
    lookup = cache.load(key, ids, tiny_model("llama"))
    assert (lookup.status, lookup.reason, lookup.path) == ("rebuilt", MISMATCH + " (it could not be removed)", path)
    assert path.read_bytes() == damaged


def test_a_bad_entry_removed_by_someone_else_meanwhile_is_just_rebuilt(tmp_path, monkeypatch):
    cache = disk.DocCache(tmp_path / "docs")
    key, ids, path = stored(cache, 0)
    path.write_bytes(path.read_bytes()[:-10] + bytes(10))
    real_validate = disk._validate

    def validate_while_another_process_clears(*args):
        path.unlink()
        return real_validate(*args)

    monkeypatch.setattr(disk, "_validate", validate_while_another_process_clears)
    lookup = cache.load(key, ids, tiny_model("llama"))
    assert (lookup.status, lookup.reason) == ("rebuilt", MISMATCH)
    assert not path.exists()


def test_a_signature_made_before_the_directory_has_a_secret_is_the_one_it_requires(tmp_path):
    """Signing for an empty directory creates its secret; an entry stored there later carries that signature."""
    cache = disk.DocCache(tmp_path / "fresh")
    key, ids, prefix = entry(0)
    tensors = disk._entry_tensors(prefix.prefix_state(), ids)
    signature = cache.signature(tensors, {"key": keys.key_text(key)})
    ok, reason, _ = cache.store(key, ids, prefix)
    assert ok, reason
    assert disk._read_metadata(cache.path_for(key))["checksum"] == signature


def test_a_prefix_is_loaded_onto_the_models_device(tmp_path):
    """The loaded prefix's tensors are on the device of the model that asks for it (here the meta device: a second
    device every machine has)."""
    from types import SimpleNamespace

    cache = disk.DocCache(tmp_path / "docs")
    key, ids, _ = stored(cache, 0)
    model = tiny_model("llama")
    elsewhere = SimpleNamespace(config=model.config, dtype=model.dtype, device=torch.device("meta"))
    lookup = cache.load(key, ids, elsewhere)
    assert lookup.status == "hit", lookup.reason
    tensors = state(lookup.cache)
    assert tensors and {tensor.device.type for tensor in tensors.values()} == {"meta"}


def test_a_failure_without_a_message_is_reported_by_its_type(tmp_path):
    class Broken:
        def __init__(self, error):
            self.error = error

        def prefix_state(self):
            raise self.error

    cache = disk.DocCache(tmp_path / "docs")
    assert cache.store({"k": 1}, [1, 2], Broken(RuntimeError())) == \
        (False, "could not export the prefix (RuntimeError)", 0)
    assert cache.store({"k": 1}, [1, 2], Broken(OSError("first line\nsecond line"))) == \
        (False, "could not export the prefix (OSError: first line)", 0)
    assert cache.entries() == []


def test_too_big_says_how_big_in_megabytes(tmp_path):
    cache = disk.DocCache(tmp_path / "docs", max_bytes=100_000)
    ids = prompt_ids(300, seed=9)[0].tolist()
    ok, reason, size = cache.store({"k": 1}, ids, build_prefix(tiny_model("llama"), ids, WINDOW))
    assert not ok and size > 200_000  # 300 tokens of keys and values (3 layers, 2 KV heads of 16 floats) and more
    assert reason.startswith("the prefix needs ")
    megabytes = float(reason.split("needs ")[1].split(" MB")[0])
    assert abs(megabytes * 2**20 - size) <= 0.05 * 2**20
    assert reason.endswith(" more than the cache cap of 0 MB (raise the cache size)")


def test_evict_never_removes_the_kept_entry_even_the_oldest(tmp_path):
    cache = disk.DocCache(tmp_path / "docs")
    paths = [stored(cache, index)[2] for index in range(3)]
    for age, path in zip((300, 200, 100), paths):
        os.utime(path, (time.time() - age, time.time() - age))
    small = disk.DocCache(cache.directory, max_bytes=paths[0].stat().st_size)
    removed = small.evict(keep=paths[0])
    assert sorted(e.path for e in removed) == sorted(paths[1:])
    assert [e.path for e in cache.entries()] == [paths[0]]


def test_an_entry_being_written_is_not_listed(tmp_path, monkeypatch):
    """``cache list`` run while another process writes an entry does not show the half-written file."""
    cache = disk.DocCache(tmp_path / "docs")
    key, ids, prefix = entry(0)
    seen_while_writing = []
    replace = os.replace

    def replace_after_listing(source, target):
        seen_while_writing.append([e.path.name for e in cache.entries()])
        replace(source, target)

    monkeypatch.setattr(os, "replace", replace_after_listing)
    ok, reason, _ = cache.store(key, ids, prefix)
    assert ok, reason
    assert seen_while_writing == [[]]
    assert [e.path.name for e in cache.entries()] == [cache.path_for(key).name]


def test_clear_removes_leftover_temporaries_only_when_clearing_everything(tmp_path):
    """A temporary file may be another process's write in progress: ``clear --older-than`` leaves a fresh one;
    a plain ``clear`` removes every one."""
    cache = disk.DocCache(tmp_path / "docs")
    stored(cache, 0)
    temporary = cache.directory / ".tmp-abc.safetensors"
    temporary.write_bytes(b"half a file")
    assert cache.clear(older_than_s=3600) == [] and temporary.exists()
    assert len(cache.clear()) == 1 and not temporary.exists()


def test_cache_list_describes_good_entries_and_shows_junk_as_unreadable(tmp_path):
    """What ``cache list`` shows of each file: a stored entry's model, dtype, template, token and window counts and
    creation time; files whose key is not JSON, too deep, not an object or missing, or whose creation time is not a
    finite number, show as unreadable (no model, no counts) and never fail the listing."""
    cache = disk.DocCache(tmp_path / "docs")
    key = {"model": {"name": "tiny-llama", "dtype": "float16"}, "template": {"name": "qa"}, "prefix_tokens": 40,
           "window_size": WINDOW, "attention_sums": False}
    ids, prefix = entry(0)[1:]
    ok, reason, _ = cache.store(key, ids, prefix, document="notes.txt")
    assert ok, reason
    (good,) = [e.describe() for e in cache.entries()]
    assert time.time() - 60 < good.pop("created") <= time.time()
    assert good.pop("last_used") == cache.path_for(key).stat().st_mtime
    assert good == {"file": cache.path_for(key).name, "bytes": cache.path_for(key).stat().st_size,
                    "document": "notes.txt", "model": "tiny-llama", "dtype": "float16", "template": "qa",
                    "prefix_tokens": 40, "window_size": WINDOW, "valid_header": True}
    junk = {"not-json": {"key": "{model: tiny"}, "deep": {"key": "[" * 100_000}, "a-list": {"key": "[1, 2]"},
            "no-key": {"created": "1700000000.5"}, "infinite": {"key": "{}", "created": "inf"},
            "not-a-number": {"key": "{}", "created": "nan"}}
    for name, metadata in junk.items():
        hand_built(cache.directory / f"{name}.safetensors", {"__metadata__": metadata})
    shown = {e.path.stem: e.describe() for e in cache.entries() if e.path.stem in junk}
    assert sorted(shown) == sorted(junk)
    for name, description in shown.items():
        assert (description["valid_header"], description["model"], description["dtype"], description["template"],
                description["prefix_tokens"], description["window_size"]) == (False, None, None, None, None, None)
        assert description["created"] == (1700000000.5 if name == "no-key" else None), name


def test_a_document_name_that_is_not_valid_text_is_listed_escaped(tmp_path):
    """A file name with bytes that are not UTF-8 (Python holds them as lone surrogates) is listed with the byte
    escaped, never a crash of ``cache list``."""
    cache = disk.DocCache(tmp_path / "docs")
    key, ids, prefix = entry(0)
    ok, reason, _ = cache.store(key, ids, prefix, document="notes-\udcff.txt")
    assert ok, reason
    (listed,) = [e.describe() for e in cache.entries()]
    assert listed["document"] == "notes-\\udcff.txt"


def test_a_new_cache_directory_is_made_with_its_parents_private_to_its_owner(tmp_path):
    cache = disk.DocCache(tmp_path / "a" / "b" / "docs")
    stored(cache, 0)
    assert stat.S_IMODE(cache.directory.stat().st_mode) == 0o700


def test_a_secret_that_cannot_be_read_or_created_is_a_miss_with_the_reason(tmp_path):
    unreadable = disk.DocCache(tmp_path / "docs")
    (unreadable.directory / cache_secret.SECRET_NAME).mkdir(parents=True)  # a directory where the secret should be
    key, ids, _ = entry(0)
    lookup = unreadable.load(key, ids, tiny_model("llama"))
    secret = unreadable.directory / cache_secret.SECRET_NAME
    assert (lookup.status, lookup.reason) == ("miss", f"the cache cannot be used: cannot read {secret}: Is a directory")
    assert lookup.path == unreadable.directory  # no entry's name can be made without the secret: the report names this
    (tmp_path / "link").symlink_to(tmp_path / "nowhere")  # a dangling link where the directory should be
    uncreatable = disk.DocCache(tmp_path / "link")
    lookup = uncreatable.load(key, ids, tiny_model("llama"))
    secret = uncreatable.directory / cache_secret.SECRET_NAME
    assert (lookup.status, lookup.reason) == ("miss", f"the cache cannot be used: cannot create {secret}: File exists")


def test_the_secret_is_made_inside_the_cache_directory_even_without_a_system_temporary_folder(tmp_path, monkeypatch):
    """The secret is written to a temporary file next to it (so that linking it into place cannot cross file systems):
    a system temporary folder that does not exist changes nothing."""
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "no-such-folder"))
    cache = disk.DocCache(tmp_path / "docs")
    key, ids, _ = stored(cache, 0)
    assert len((cache.directory / cache_secret.SECRET_NAME).read_bytes()) == cache_secret.SECRET_BYTES
    assert cache.load(key, ids, tiny_model("llama")).status == "hit"


def test_a_secret_temporary_that_could_not_be_removed_is_cleared_with_the_cache(tmp_path, monkeypatch):
    """Making the secret leaves no file behind; if its temporary cannot be removed, it is a hidden temporary that
    ``cache clear`` removes with the rest."""
    cache = disk.DocCache(tmp_path / "docs")
    cache.directory.mkdir(parents=True)
    def unlink_refused(path):
        raise PermissionError(1, "Operation not permitted")

    with monkeypatch.context() as patched:
        patched.setattr(os, "unlink", unlink_refused)
        cache_secret.load_secret(cache.directory, create=True)
    (leftover,) = [name for name in os.listdir(cache.directory) if name != cache_secret.SECRET_NAME]
    assert leftover.startswith(".")  # hidden: never listed as an entry
    cache.clear()
    assert leftover not in os.listdir(cache.directory) and (cache.directory / cache_secret.SECRET_NAME).exists()


def test_a_secret_on_a_file_system_without_hard_links_is_created_exclusively(tmp_path, monkeypatch):
    """Where hard links are refused, the secret is written with an exclusive create; if another process made it in
    between, its secret is the one used."""
    def no_links(source, target):
        raise OSError(1, "Operation not permitted")

    monkeypatch.setattr(os, "link", no_links)
    directory = tmp_path / "docs"
    directory.mkdir()
    made = cache_secret.load_secret(directory, create=True)
    assert len(made) == cache_secret.SECRET_BYTES and (directory / cache_secret.SECRET_NAME).read_bytes() == made
    assert [name for name in os.listdir(directory)] == [cache_secret.SECRET_NAME]

    other = tmp_path / "other"
    other.mkdir()
    theirs = bytes(range(cache_secret.SECRET_BYTES))

    def another_process_first(source, target):
        Path(target).write_bytes(theirs)
        raise OSError(1, "Operation not permitted")

    monkeypatch.setattr(os, "link", another_process_first)
    assert cache_secret.load_secret(other, create=True) == theirs


def test_an_entry_that_cannot_be_checked_or_loaded_is_left_in_place(tmp_path):
    """A failure that says nothing about the file (a key without a window size, a model on a device that does not
    exist) is reported as such, and the entry stays for a caller that can use it."""
    from types import SimpleNamespace

    cache = disk.DocCache(tmp_path / "docs")
    ids, prefix = entry(0)[1:]
    no_window = {"entry": 0, "attention_sums": False}
    ok, reason, _ = cache.store(no_window, ids, prefix)
    assert ok, reason
    lookup = cache.load(no_window, ids, tiny_model("llama"))
    assert (lookup.status, lookup.reason, lookup.path) == \
        ("rebuilt", "could not check it (KeyError: 'window_size')", cache.path_for(no_window))
    assert cache.path_for(no_window).exists()
    key, ids, path = stored(cache, 1)
    model = tiny_model("llama")
    nowhere = SimpleNamespace(config=model.config, dtype=model.dtype, device="no-such-device")
    lookup = cache.load(key, ids, nowhere)
    assert (lookup.status, lookup.path, lookup.cache) == ("rebuilt", path, None)
    assert lookup.reason.startswith("could not load it (RuntimeError: ") and path.exists()
    assert cache.load(key, ids, model).status == "hit"


def test_an_entry_that_cannot_be_opened_or_read_is_left_in_place_with_the_reason(tmp_path, monkeypatch):
    """A failure of the system rather than of the file (it cannot be opened, its size cannot be read, a read fails)
    says nothing about the entry: the lookup is "rebuilt" with the system's words, and the file stays."""
    cache = disk.DocCache(tmp_path / "docs")
    key, ids, _ = entry(0)
    cache.path_for(key).mkdir(parents=True)  # something that cannot be opened as a file where the entry goes
    lookup = cache.load(key, ids, tiny_model("llama"))
    assert (lookup.status, lookup.path, lookup.cache) == ("rebuilt", cache.path_for(key), None)
    assert lookup.reason == f"could not open it (IsADirectoryError: [Errno 21] Is a directory: '{cache.path_for(key)}')"
    assert cache.path_for(key).is_dir()
    cache.path_for(key).rmdir()

    key, ids, path = stored(cache, 1)
    real_fstat = os.fstat

    def fstat_fails(descriptor):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fstat", fstat_fails)
    lookup = cache.load(key, ids, tiny_model("llama"))
    monkeypatch.setattr(os, "fstat", real_fstat)
    assert (lookup.status, lookup.path, lookup.reason) == \
        ("rebuilt", path, "could not read it (OSError: [Errno 5] Input/output error)")

    def read_fails(file):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(disk, "read_tensors", read_fails)
    lookup = cache.load(key, ids, tiny_model("llama"))
    assert (lookup.status, lookup.path, lookup.reason) == \
        ("rebuilt", path, "could not read it (OSError: [Errno 5] Input/output error)")
    monkeypatch.undo()
    assert path.exists() and cache.load(key, ids, tiny_model("llama")).status == "hit"


@pytest.mark.parametrize("error", [OSError(30, "Read-only file system"), NotImplementedError()])
def test_a_hit_whose_last_use_cannot_be_recorded_is_still_a_hit(tmp_path, monkeypatch, error):
    cache = disk.DocCache(tmp_path / "docs")
    key, ids, path = stored(cache, 0, attention_sums=True)

    def utime(*_args, **_kwargs):
        raise error

    monkeypatch.setattr(os, "utime", utime)
    lookup = cache.load(key, ids, tiny_model("llama"))
    assert lookup.status == "hit" and lookup.bytes == path.stat().st_size and 0 < lookup.seconds < 120


def test_attention_sums_come_back_from_disk_bit_for_bit(tmp_path):
    cache = disk.DocCache(tmp_path / "docs")
    key, ids, prefix = entry(0, attention_sums=True)
    ok, reason, _ = cache.store(key, ids, prefix)
    assert ok, reason
    lookup = cache.load(key, ids, tiny_model("llama"))
    assert lookup.status == "hit", lookup.reason
    fresh, loaded = state(prefix), state(lookup.cache)
    assert "layers.0.accumulated_attention" in fresh
    assert fresh.keys() == loaded.keys() and all(torch.equal(fresh[name], loaded[name]) for name in fresh)
