"""The on-disk document cache: reused, invalidated by any change of document, model or template, never trusted when
damaged (rebuilt instead), capped with least-recently-used eviction, listed and cleared from the command line.

A prefix loaded from disk is stored in the model's dtype, so answers from it equal answers from a fresh prefill bit
for bit (scores included), and equal separate ``snapkv ask`` runs as tests/test_multi_question.py states.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

import snapkv_cli.cli as cli
from snapkv_cli.cli.errors import message
from snapkv_cli.doc_cache import keys
from snapkv_cli.doc_cache import store as disk
from snapkv_cli.engine import CompressionSettings
from snapkv_cli.errors import InvalidValue
from snapkv_cli.generation import GenerationOptions, build_prefix, generate_answer
from tests.helpers import DigitTokenizer, chunks, record_loaded_forwards, snapkv_json
from tests.tiny_models import prompt_ids, tiny_model

runner = CliRunner()
NOTES = ("Skerrow Point Light, winter log.\n\nDuncan Hale repaired the fog signal and oiled the clockwork. "
         "The relief boat Morven Lass arrived on Tuesday with coal, letters and bread. The station's coastguard code "
         "is K-4417. Agnes Tolland counted 117 steps up to the lamp room.\n")
QUESTION = "What is the coastguard code?"
SMALL = ["--max-new-tokens", "5", "--budget", "64", "--window", "16"]


pytestmark = pytest.mark.usefixtures("doc_cache_dir", "one_thread")


def ask(*args, env=None, input=None) -> dict:
    """``snapkv ask ... --cache-docs --json --quiet`` -> its JSON object."""
    return snapkv_json("ask", *args, "--cache-docs", env=env, input=input)


def entries(directory) -> list:
    return disk.DocCache(directory).entries()


# --------------------------------------------------------------------------- reuse and exactness


def test_second_run_loads_the_prefix_and_answers_the_same(notes, tiny_model_path, doc_cache_dir):
    plain = runner.invoke(cli.app, ["ask", notes, QUESTION, "--model", tiny_model_path, *SMALL, "--json", "--quiet"])
    fresh = json.loads(plain.stdout)
    first = ask(notes, QUESTION, "--model", tiny_model_path, *SMALL)
    second = ask(notes, QUESTION, "--model", tiny_model_path, *SMALL)
    assert first["doc_cache"]["status"] == "stored" and first["prefix"]["source"] == "prefill"
    assert first["reused_prefix_tokens"] == 0
    assert second["doc_cache"]["status"] == "hit" and second["prefix"]["source"] == "disk"
    assert second["reused_prefix_tokens"] == second["prefix"]["tokens"] > 0
    assert second["doc_cache"]["path"] == first["doc_cache"]["path"]
    assert second["doc_cache"]["bytes"] == os.path.getsize(first["doc_cache"]["path"])
    for key in ("answer", "prompt_tokens", "cache", "layers", "generated_tokens"):
        assert first[key] == second[key] == fresh[key], key
    assert len(entries(doc_cache_dir)) == 1
    # the report says it on stderr too
    result = runner.invoke(cli.app, ["ask", notes, QUESTION, "--model", tiny_model_path, *SMALL, "--cache-docs"])
    assert "loaded from the document cache" in result.stderr


def test_a_prefix_loaded_from_disk_is_not_prefilled_again(notes, tiny_model_path, monkeypatch):
    """What the model received: the whole prefix on the first run, only the question's tokens on the second."""
    args = [notes, QUESTION, "--model", tiny_model_path, "--max-new-tokens", "1", "--budget", "64", "--window", "16"]
    forwards, _ = record_loaded_forwards(monkeypatch)
    first = ask(*args)
    prefix, length = first["prefix"]["tokens"], first["prompt_tokens"]
    assert forwards == [(0, prefix), (prefix, length - prefix)]
    # a chunked prefill is its own entry (its last bits differ): prefilled in chunks once, then read from disk
    for source, expected in (("prefill", chunks(0, prefix, 5) + chunks(prefix, length, 5)),
                             ("disk", chunks(prefix, length, 5))):
        forwards, _ = record_loaded_forwards(monkeypatch)
        second = ask(*args, "--prefill-chunk", "5")
        assert second["prefix"]["source"] == source
        assert forwards == expected


def test_piped_document_with_the_question_alone(tiny_model_path):
    first = ask(QUESTION, "--model", tiny_model_path, *SMALL, input=NOTES)
    second = ask("-", QUESTION, "--model", tiny_model_path, *SMALL, input=NOTES)
    assert first["document"] == second["document"] == "<stdin>"
    assert (first["doc_cache"]["status"], second["doc_cache"]["status"]) == ("stored", "hit")


def test_environment_switches_it_on_and_the_flag_off(notes, tiny_model_path, doc_cache_dir):
    args = ["ask", notes, QUESTION, "--model", tiny_model_path, *SMALL, "--json", "--quiet"]
    on = runner.invoke(cli.app, args, env={"SNAPKV_CACHE_DOCS": "1"})
    assert json.loads(on.stdout)["doc_cache"]["status"] == "stored"
    off = runner.invoke(cli.app, [*args, "--no-cache-docs"], env={"SNAPKV_CACHE_DOCS": "1"})
    # the same keys either way (a caching flag never changes the JSON's keys); the cache is off
    assert json.loads(off.stdout)["doc_cache"]["status"] == "off"
    assert set(json.loads(off.stdout)) == set(json.loads(on.stdout))


def test_loaded_prefix_is_bit_identical_for_every_method(tmp_path):
    model = tiny_model("llama")
    prefix = prompt_ids(90, seed=21)[0].tolist()
    question = prompt_ids(7, seed=22)[0].tolist()
    built = build_prefix(model, prefix, window_size=16, accumulate_attention=True)
    key = {"test": "prefix", "window_size": 16, "attention_sums": True}
    cache = disk.DocCache(tmp_path)
    stored, reason, size = cache.store(key, prefix, built)
    assert stored and reason is None and size > 0
    lookup = cache.load(key, prefix, model)
    assert lookup.status == "hit", lookup.reason
    loaded = lookup.cache
    for method in ("snapkv", "h2o", "pyramidkv"):
        settings = CompressionSettings(method=method, window_size=12, max_capacity_prompt=40, kernel_size=5)
        options = GenerationOptions(max_new_tokens=6)
        runs = [generate_answer(model, DigitTokenizer(), prefix + question, settings, options, prefix=p)
                for p in (built, loaded)]
        assert runs[0].generated_ids == runs[1].generated_ids
        for layer, record in runs[0].cache.records.items():
            other = runs[1].cache.records[layer]
            assert torch.equal(record.kept_positions, other.kept_positions)
            assert torch.equal(record.scores, other.scores)


# --------------------------------------------------------------------------- invalidation


def test_document_template_and_model_changes_make_new_entries(notes, tiny_model_path, short_context_model_path,
                                                              doc_cache_dir, tmp_path):
    base = [QUESTION, *SMALL]
    assert ask(notes, *base, "--model", tiny_model_path)["doc_cache"]["status"] == "stored"
    changed = tmp_path / "changed.txt"
    changed.write_text(NOTES.replace("K-4417", "K-4418"), encoding="utf-8")
    assert ask(str(changed), *base, "--model", tiny_model_path)["doc_cache"]["status"] == "stored"
    assert ask(notes, *base, "--model", tiny_model_path, "--template", "summary")["doc_cache"]["status"] == \
        "stored"
    assert ask(notes, *base, "--model", short_context_model_path)["doc_cache"]["status"] == "stored"
    assert ask(notes, *base, "--model", tiny_model_path, "--dtype", "bfloat16")["doc_cache"]["status"] == "stored"
    assert len(entries(doc_cache_dir)) == 5
    # each of them is found again
    assert ask(str(changed), *base, "--model", tiny_model_path)["doc_cache"]["status"] == "hit"
    assert ask(notes, *base, "--model", tiny_model_path, "--dtype", "bfloat16")["doc_cache"]["status"] == "hit"
    # another question about the same document reuses the entry (the prefix does not depend on the question)
    assert ask(notes, "Who repaired the fog signal?", *SMALL, "--model", tiny_model_path)["doc_cache"][
        "status"] == "hit"


def test_key_covers_model_weights_template_and_ids(tiny_model_path):
    from snapkv_cli.answering.prompting import load_template
    from snapkv_cli.models.loader import load_model

    loaded = load_model(tiny_model_path, device="cpu")
    key = keys.prefix_key(loaded, load_template(), [5, 6, 7], 32, False)
    assert key == keys.prefix_key(loaded, load_template(), [5, 6, 7], 32, False)
    assert key["model"]["weights"] and key["model"]["dtype"] == "float32" and key["model"]["device_type"] == "cpu"
    different = [
        keys.prefix_key(loaded, load_template(), [5, 6, 8], 32, False),
        keys.prefix_key(loaded, load_template("summary"), [5, 6, 7], 32, False),
        keys.prefix_key(loaded, load_template(), [5, 6, 7], 16, False),
        keys.prefix_key(loaded, load_template(), [5, 6, 7], 32, True),
    ]
    weights = os.path.join(tiny_model_path, "model.safetensors")
    stat = os.stat(weights)
    os.utime(weights, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))  # the model was re-converted
    try:
        different.append(keys.prefix_key(loaded, load_template(), [5, 6, 7], 32, False))
    finally:
        os.utime(weights, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert len({keys.key_text(k) for k in [key, *different]}) == 6


def stand_in(source, *, family: str = "llama", attn: str = "sdpa", revision=None, name: str = "tiny"):
    """A loaded model as the key sees it: a name, a source (a path or a hub id), a config, a dtype and a device."""
    import copy
    from types import SimpleNamespace

    config = copy.deepcopy(tiny_model(family, attn).config)
    config._commit_hash = revision
    return SimpleNamespace(name=name, source=str(source), model=SimpleNamespace(config=config), dtype=torch.float32,
                           device=torch.device("cpu"))


def test_a_key_names_the_same_entry_whatever_the_order_of_its_fields(tmp_path):
    """A key is what it holds, not the order its fields were written in: the same settings written in another order
    find the same entry."""
    cache = disk.DocCache(tmp_path / "docs")
    key = {"model": {"name": "m", "dtype": "float32"}, "prefix_tokens": 40, "window_size": 8}
    reordered = {"window_size": 8, "prefix_tokens": 40, "model": {"dtype": "float32", "name": "m"}}
    assert list(key) != list(reordered)
    assert cache.path_for(key) == cache.path_for(reordered)


def test_the_key_records_what_built_the_prefix(tmp_path):
    """The model part of an entry's key (stored in the file's metadata) names, as documented, the model's name and
    source, a hash of its config, its revision, its weight files (name, size, modification time), dtype, device
    type, attention implementation and the library versions."""
    import transformers

    from snapkv_cli.answering.prompting import load_template

    weights = tmp_path / "model.safetensors"
    weights.write_bytes(bytes(100))
    (tmp_path / "config.json").write_text("{}")
    info = weights.stat()
    key = keys.prefix_key(stand_in(tmp_path, attn="eager", revision="0123abc"), load_template(), [5, 6, 7], 32, True)
    model = key.pop("model")
    config_hash = model.pop("config_sha256")
    assert len(config_hash) == 64 and int(config_hash, 16) >= 0
    assert model == {"name": "tiny", "source": str(tmp_path), "revision": "0123abc",
                     "weights": [["model.safetensors", 100, info.st_mtime_ns]], "dtype": "float32",
                     "device_type": "cpu", "attn_implementation": "eager", "torch": torch.__version__,
                     "transformers": transformers.__version__}
    template = key.pop("template")
    assert template.pop("name") == "qa" and len(template.pop("sha256")) == 64 and template == {}
    assert len(key.pop("prefix_ids_sha256")) == 64
    assert key == {"format_version": disk.FORMAT_VERSION, "prefix_tokens": 3, "window_size": 32,
                   "attention_sums": True, "prefill_chunk": None}


def test_templates_of_the_same_name_with_other_words_are_other_keys(tmp_path):
    from types import SimpleNamespace

    def key(system, user):
        template = SimpleNamespace(name="qa", system=system, user=user)
        return keys.key_text(keys.prefix_key(stand_in("org/model"), template, [5, 6], 8, False))

    assert len({key("Answer briefly.", "{document}\n{question}"), key("Answer at length.", "{document}\n{question}"),
                key("Answer briefly.", "{question}\n{document}")}) == 3


def test_another_revision_attention_or_config_is_another_key(tmp_path):
    from snapkv_cli.answering.prompting import load_template

    def key(**options):
        return keys.key_text(keys.prefix_key(stand_in("org/some-model", **options), load_template(), [5, 6], 8, False))

    assert key(revision="aaa") == key(revision="aaa")
    assert len({key(revision="aaa"), key(revision="bbb"), key(revision=None), key(attn="eager"),
                key(family="qwen2"), key(name="other")}) == 6


@pytest.mark.parametrize("suffix", [".safetensors", ".bin", ".gguf", ".pt", ".pth"])
def test_every_kind_of_weight_file_is_in_the_key(tmp_path, suffix):
    """Re-converting a model (a weight file of any of the known kinds rewritten: new size or modification time)
    changes the key, whether the source is the model's directory or the weight file itself; other files in the
    directory (config, tokenizer, notes) and a dangling link do not count."""
    from snapkv_cli.answering.prompting import load_template

    weights = tmp_path / f"weights{suffix}"
    weights.write_bytes(bytes(64))
    (tmp_path / "README.md").write_text("notes")
    (tmp_path / "lost.bin").symlink_to(tmp_path / "gone.bin")

    def key(source) -> str:
        return keys.key_text(keys.prefix_key(stand_in(source), load_template(), [5, 6], 8, False))

    for source in (tmp_path, weights):
        before = key(source)
        (tmp_path / "README.md").write_text("other notes, longer")
        assert key(source) == before
        weights.write_bytes(bytes(65))  # re-converted: another size
        resized = key(source)
        info = weights.stat()
        os.utime(weights, ns=(info.st_atime_ns, info.st_mtime_ns + 10**9))  # same size, written later
        assert len({before, resized, key(source)}) == 3


# --------------------------------------------------------------------------- damaged entries


def _damage_truncate(path):
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _damage_flip_a_byte(path):
    data = bytearray(path.read_bytes())
    data[-10] ^= 0xFF
    path.write_bytes(bytes(data))


def _damage_header(path):
    path.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json at all" + b"\x00" * 64)


def _damage_empty(path):
    path.write_bytes(b"")


@pytest.mark.parametrize(("damage", "reason"), [
    (_damage_truncate, "unreadable file"),
    (_damage_flip_a_byte, "checksum mismatch"),
    (_damage_header, "unreadable file"),
    (_damage_empty, "unreadable file"),
])
def test_damaged_entry_is_rebuilt(notes, tiny_model_path, damage, reason):
    args = [notes, QUESTION, "--model", tiny_model_path, *SMALL]
    first = ask(*args)
    path = Path(first["doc_cache"]["path"])
    damage(path)
    second = ask(*args)
    assert second["doc_cache"]["status"] == "rebuilt" and reason in second["doc_cache"]["reason"]
    assert second["prefix"]["source"] == "prefill"
    assert second["answer"] == first["answer"] and second["layers"] == first["layers"]
    third = ask(*args)
    assert third["doc_cache"]["status"] == "hit"


def _rewrite(path, change):
    """Rewrite a cache file with ``change(tensors, metadata)`` applied and a matching checksum (a consistent file
    that is still wrong)."""
    from safetensors.torch import save_file

    tensors, metadata = disk._read(path)
    change(tensors, metadata)
    metadata["checksum"] = disk.DocCache(path.parent).signature(tensors, metadata)
    save_file(tensors, str(path), metadata=metadata)


@pytest.mark.parametrize(("change", "reason"), [
    (lambda t, m: t.update({"layers.1.keys": t["layers.1.keys"][:, :, :-1].contiguous()}), "layer 1: keys/values"),
    (lambda t, m: t.update({"layers.0.keys": t["layers.0.keys"].half()}), "dtype"),
    (lambda t, m: t.pop("layers.2.window_queries"), "unexpected tensor names"),
    (lambda t, m: t.update({"prefix_ids": t["prefix_ids"].flip(0)}), "token ids"),
    (lambda t, m: m.update({"key": m["key"].replace('"window_size": 16', '"window_size": 8')}), "metadata does not"),
    (lambda t, m: m.update({"format_version": "0"}), "version"),
])
def test_consistent_but_wrong_entry_is_rebuilt(notes, tiny_model_path, change, reason):
    args = [notes, QUESTION, "--model", tiny_model_path, *SMALL]
    first = ask(*args)
    _rewrite(Path(first["doc_cache"]["path"]), change)
    second = ask(*args)
    assert second["doc_cache"]["status"] == "rebuilt", second["doc_cache"]
    assert reason in second["doc_cache"]["reason"]
    assert second["answer"] == first["answer"]


def test_entry_of_another_key_under_this_name_is_rebuilt(notes, tiny_model_path, tmp_path):
    other = tmp_path / "other.txt"
    other.write_text(NOTES.replace("Tuesday", "Friday"), encoding="utf-8")
    first = ask(notes, QUESTION, "--model", tiny_model_path, *SMALL)
    second = ask(str(other), QUESTION, "--model", tiny_model_path, *SMALL)
    os.replace(second["doc_cache"]["path"], first["doc_cache"]["path"])
    third = ask(notes, QUESTION, "--model", tiny_model_path, *SMALL)
    assert third["doc_cache"]["status"] == "rebuilt" and "metadata does not match" in third["doc_cache"]["reason"]
    assert third["answer"] == first["answer"]


# --------------------------------------------------------------------------- size cap and eviction


def _store(cache, index: int):
    model = tiny_model("llama")
    ids = prompt_ids(60, seed=100 + index)[0].tolist()
    key = {"entry": index, "window_size": 8, "attention_sums": False}
    stored, reason, _ = cache.store(key, ids, build_prefix(model, ids, window_size=8))
    assert stored, reason
    return key, ids, cache.path_for(key)


def test_lru_eviction_respects_the_cap(tmp_path):
    unbounded = disk.DocCache(tmp_path / "probe")
    size = _store(unbounded, 0)[2].stat().st_size
    cache = disk.DocCache(tmp_path / "docs", max_bytes=int(2.5 * size))
    (key0, ids0, path0), (_, _, path1) = _store(cache, 0), _store(cache, 1)
    os.utime(path0, (time.time() - 100, time.time() - 100))
    os.utime(path1, (time.time() - 50, time.time() - 50))
    # entry 0 is used again: it becomes the most recent, so entry 1 goes first
    assert cache.load(key0, ids0, tiny_model("llama")).status == "hit"
    _, _, path2 = _store(cache, 2)
    assert path0.exists() and not path1.exists() and path2.exists()
    assert cache.total_bytes() <= cache.max_bytes
    os.utime(path0, (time.time() - 20, time.time() - 20))  # used before entry 2 was stored (whatever the clock's grain)
    _store(cache, 3)
    assert not path0.exists() and len(cache.entries()) == 2  # now entry 0 is the least recently used
    assert cache.total_bytes() <= cache.max_bytes


def test_prefix_larger_than_the_cap_is_not_stored(tiny_model_path, doc_cache_dir):
    field_notes = Path(__file__).parent.parent / "examples" / "field_notes.txt"  # about 2.4 MB of prefix KV here
    args = [str(field_notes), QUESTION, "--model", tiny_model_path, *SMALL]
    first = ask(*args, env={"SNAPKV_DOC_CACHE_MB": "1"})
    assert first["doc_cache"]["status"] == "not_stored"
    assert "more than the cache cap of 1 MB" in first["doc_cache"]["reason"]
    assert entries(doc_cache_dir) == []
    second = ask(*args, "--cache-size", "8", env={"SNAPKV_DOC_CACHE_MB": "1"})  # the option wins
    assert second["doc_cache"]["status"] == "stored" and second["answer"] == first["answer"]


def test_sliding_window_models_are_not_stored(tmp_path):
    model = tiny_model("gemma2")
    ids = prompt_ids(60, seed=6)[0].tolist()
    stored, reason, _ = disk.DocCache(tmp_path).store({"k": 1}, ids, build_prefix(model, ids, window_size=8))
    assert not stored and "sliding-window layers" in reason
    assert disk.DocCache(tmp_path).entries() == []


# --------------------------------------------------------------------------- snapkv cache list / clear


def test_cache_list_and_clear(notes, tiny_model_path, doc_cache_dir, tmp_path):
    empty = runner.invoke(cli.app, ["cache", "list"])
    assert empty.exit_code == 0 and empty.stdout.startswith("0 cached document(s)")
    ask(notes, QUESTION, "--model", tiny_model_path, *SMALL)
    other = tmp_path / "other.txt"
    other.write_text(NOTES * 2, encoding="utf-8")
    ask(str(other), QUESTION, "--model", tiny_model_path, *SMALL)
    listing = runner.invoke(cli.app, ["cache", "list"])
    assert listing.exit_code == 0
    lines = listing.stdout.splitlines()
    assert lines[0].split()[:3] == ["LAST", "USED", "SIZE"]
    assert lines[1].endswith(str(other)) and lines[2].endswith(notes)  # most recently used first
    assert "2 cached document(s)" in lines[-1] and str(doc_cache_dir) in lines[-1]
    as_json = json.loads(runner.invoke(cli.app, ["cache", "list", "--json"]).stdout)
    assert len(as_json["entries"]) == 2 and as_json["total_bytes"] == sum(e["bytes"] for e in as_json["entries"])
    assert {e["document"] for e in as_json["entries"]} == {notes, str(other)}
    assert all(e["model"] == tiny_model_path and e["prefix_tokens"] > 0 for e in as_json["entries"])
    old = disk.DocCache(doc_cache_dir).entries()[0].path
    os.utime(old, (time.time() - 3 * 86400, time.time() - 3 * 86400))
    cleared = runner.invoke(cli.app, ["cache", "clear", "--older-than", "2d"])
    assert cleared.exit_code == 0 and cleared.stdout.startswith("removed 1 cached document(s)")
    assert not old.exists() and len(entries(doc_cache_dir)) == 1
    assert runner.invoke(cli.app, ["cache", "clear"]).stdout.startswith("removed 1 cached document(s)")
    assert entries(doc_cache_dir) == []
    bad = runner.invoke(cli.app, ["cache", "clear", "--older-than", "soon"])
    assert bad.exit_code == 1 and "--older-than must be a duration" in bad.stderr


class _ListedEntry:
    """A cache file as ``cache list`` sees it: only what ``describe`` says of it."""

    def __init__(self, **described):
        self.described = described

    def describe(self) -> dict:
        return dict(self.described)


class _ListedCache:
    """A cache directory holding hand-made entries, least recently used first (as ``DocCache.entries`` gives)."""

    def __init__(self, *entries: _ListedEntry, directory: str = "/caches/docs", max_bytes: int = 3 * 1024 ** 3):
        self.listed, self.directory, self.max_bytes = list(entries), Path(directory), max_bytes

    def entries(self) -> list[_ListedEntry]:
        return list(self.listed)


def listed(last_used: float, size: int, tokens=None, model=None, dtype=None, template=None, document=None):
    """An entry as describe gives it: None where its metadata says nothing."""
    return _ListedEntry(last_used=last_used, bytes=size, prefix_tokens=tokens, model=model, dtype=dtype,
                        template=template, document=document)


def test_cache_list_as_printed_aligns_columns_most_recent_first(capsys):
    from snapkv_cli.cli.cache import render_cache_list

    now = 1_000_000.0
    cache = _ListedCache(
        listed(now - 3 * 86400 - 5, 2048),  # junk metadata: nothing known but its size and age
        listed(now - 7200, 1536, 1234, "tiny/model-x", "bfloat16", "chat", "/d/b.txt"),
        listed(now - 30.9, 100, 0, "m", "float16", "plain", "/d/c [1].txt"))
    render_cache_list(cache, as_json=False, now=now)
    out = capsys.readouterr()
    assert out.err == ""
    assert out.out.splitlines() == [
        "LAST USED  SIZE    TOKENS  MODEL         DTYPE     TEMPLATE  DOCUMENT",
        "30s ago    100 B   0       m             float16   plain     /d/c [1].txt",
        "2h ago     1.5 KB  1234    tiny/model-x  bfloat16  chat      /d/b.txt",
        "3d ago     2.0 KB  ?       (unreadable)  ?         ?         ?",
        "3 cached document(s), 3.6 KB of 3.0 GB in /caches/docs"]  # 3684 bytes


@pytest.mark.parametrize("age, shown", [
    (0, "0s ago"), (-5, "0s ago"), (59.99, "59s ago"), (60, "1m ago"), (3599, "59m ago"), (3600, "1h ago"),
    (86399, "23h ago"), (86400, "1d ago"), (10 * 86400 + 3, "10d ago")])
def test_cache_list_says_how_long_ago_an_entry_was_used(capsys, age, shown):
    """Whole units, rounded down; a clock that went back shows as just now."""
    from snapkv_cli.cli.cache import render_cache_list

    render_cache_list(_ListedCache(listed(500_000.0 - age, 10)), as_json=False, now=500_000.0)
    assert capsys.readouterr().out.splitlines()[1].split("  ")[0].strip() == shown


def test_cache_list_json_names_directory_cap_total_and_entries(capsys):
    from snapkv_cli.cli.cache import render_cache_list

    cache = _ListedCache(listed(10.0, 300, 5, "m", "float32", "plain", "/a.txt"), listed(20.0, 700),
                         directory="/x/y", max_bytes=4096)
    render_cache_list(cache, as_json=True)
    shown = json.loads(capsys.readouterr().out)
    assert shown == {"directory": "/x/y", "cap_bytes": 4096, "total_bytes": 1000, "entries": [
        {"last_used": 20.0, "bytes": 700, "prefix_tokens": None, "model": None, "dtype": None, "template": None,
         "document": None},
        {"last_used": 10.0, "bytes": 300, "prefix_tokens": 5, "model": "m", "dtype": "float32",
         "template": "plain", "document": "/a.txt"}]}


def test_parse_age():
    assert disk.parse_age("90") == 90 and disk.parse_age("30m") == 1800 and disk.parse_age("2w") == 14 * 86400
    for text in ("", "-1d", "xd"):
        with pytest.raises(InvalidValue, match="older_than") as info:
            disk.parse_age(text)
        assert message(info.value).startswith("--older-than must be a duration")


def test_the_cache_directory_defaults_to_docs_under_the_snapkv_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("SNAPKV_CACHE_DIR", str(tmp_path / "root"))
    for value in (None, "", "   "):
        if value is None:
            monkeypatch.delenv("SNAPKV_DOC_CACHE_DIR", raising=False)
        else:
            monkeypatch.setenv("SNAPKV_DOC_CACHE_DIR", value)
        assert disk.DocCache().directory == tmp_path / "root" / "docs", value
    monkeypatch.setenv("SNAPKV_DOC_CACHE_DIR", f" {tmp_path / 'mine'} ")
    assert disk.DocCache().directory == tmp_path / "mine"


def test_ages_in_every_unit():
    assert [disk.parse_age(text) for text in ("45s", "30m", "12h", "7d", "2w", " 1.5H ", "0", "0.5")] == \
        [45, 1800, 12 * 3600, 7 * 86400, 14 * 86400, 5400, 0, 0.5]
    with pytest.raises(InvalidValue) as info:
        disk.parse_age("soon")
    assert info.value.value == "soon" and "'soon'" in str(info.value)


def test_the_size_cap_comes_from_the_environment_when_it_is_a_whole_number(monkeypatch):
    monkeypatch.delenv("SNAPKV_DOC_CACHE_MB", raising=False)
    assert disk.DocCache().max_bytes == disk.DEFAULT_CAP_MB * 2**20
    for value, megabytes in (("1", 1), (" 300 ", 300), ("0", disk.DEFAULT_CAP_MB), ("-5", disk.DEFAULT_CAP_MB),
                             ("1.5", disk.DEFAULT_CAP_MB), ("lots", disk.DEFAULT_CAP_MB)):
        monkeypatch.setenv("SNAPKV_DOC_CACHE_MB", value)
        assert disk.DocCache().max_bytes == megabytes * 2**20, value


def test_chat_says_when_it_rebuilt_a_damaged_entry_or_did_not_store_the_prefix(notes, tiny_model_path):
    def chat_lines(*args, env=None) -> list[str]:
        result = runner.invoke(cli.app, ["chat", *args, "--model", tiny_model_path, *SMALL, "--cache-docs"],
                               env=env, input=QUESTION + "\n")
        assert result.exit_code == 0, (result.stderr, result.exception)
        return result.stderr.splitlines()

    first = ask(notes, QUESTION, "--model", tiny_model_path, *SMALL)
    _damage_empty(Path(first["doc_cache"]["path"]))
    lines = chat_lines(notes)
    assert " prompt tokens prefilled in " in lines[0]
    assert lines[1].startswith("document cache: the entry was rebuilt (unreadable file")

    field_notes = Path(__file__).parent.parent / "examples" / "field_notes.txt"  # about 2.4 MB of prefix KV here
    lines = chat_lines(str(field_notes), env={"SNAPKV_DOC_CACHE_MB": "1"})
    assert lines[1].startswith("document cache: not stored: ") and "more than the cache cap of 1 MB" in lines[1]
