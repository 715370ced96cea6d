"""A GGUF converted by transformers into a float32 safetensors directory: the weights, tokenizer and chat template
survive, a copy that does not reload the same is refused with the cause, and ``build_once`` puts the result in the
cache once (marker, progress messages, leftovers of killed runs removed, a cache that cannot be written named).

The GGUF is written here with the ``gguf`` package: a two-layer Llama (grouped-query attention, float16 matrices and
float32 norms, as llama.cpp writes them) with the byte-level BPE tokenizer of ``tests/tiny_models.py``. The weights
it was made from, in transformers' layout, and that tokenizer are the oracles.
"""

from __future__ import annotations

import errno
import hashlib
import json
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import transformers
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file, save_file

from snapkv_cli.errors import CacheNotWritable
from snapkv_cli.models import conversion
from snapkv_cli.models.hf_utils import strip_gguf_quantizer
from tests.tiny_models import tiny_tokenizer

HIDDEN, HEADS, KV_HEADS, LAYERS, FFN = 32, 4, 2, 2, 64
HEAD_DIM = HIDDEN // HEADS
ROPE_THETA = 10000.0
# A template as strict as real ones: an unknown role or a message without text content is an error.
STRICT_CHAT_TEMPLATE = (
    "{% for m in messages %}"
    "{% if m['role'] not in ['system', 'user', 'assistant'] %}{{ raise_exception('unknown role') }}{% endif %}"
    "{% if m['content'] is not string %}{{ raise_exception('message content must be text') }}{% endif %}"
    "<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
TEXTS = ["Question: What is the capital of France?\nAnswer:", "The field notes say: rain, then wind.",
         "  leading spaces, tabs\tand\nnew lines", "héllo wörld 日本語 🙂", "<|im_start|>user\nhi<|im_end|>", ""]


@dataclass(frozen=True)
class TinyGGUF:
    path: Path
    sha256: str
    weights: dict[str, torch.Tensor]  # transformers' names and layout, float32
    tokenizer: transformers.PreTrainedTokenizerBase  # the tokenizer the GGUF's vocabulary and merges come from


def _llama_cpp_permute(weights: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's reordering of the q/k projection rows (rotary halves interleaved), which a reader must undo."""
    return weights.reshape(heads, 2, weights.shape[0] // heads // 2, *weights.shape[1:]).swapaxes(1, 2).reshape(
        weights.shape)


def _write_gguf(path: Path, chat_template: str | None) -> TinyGGUF:
    import gguf

    reference = tiny_tokenizer()
    reference.chat_template = chat_template
    model_state = json.loads(reference.backend_tokenizer.to_str())["model"]
    tokens = sorted(model_state["vocab"], key=model_state["vocab"].get)
    merges = [" ".join(pair) for pair in model_state["merges"]]
    special = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"}

    rng = np.random.default_rng(7)

    def matrix(rows: int, cols: int) -> np.ndarray:
        return (rng.standard_normal((rows, cols)) * 0.5).astype(np.float16)

    def norm() -> np.ndarray:
        return (1 + 0.1 * rng.standard_normal(HIDDEN)).astype(np.float32)

    hf = {"model.embed_tokens.weight": matrix(len(tokens), HIDDEN), "model.norm.weight": norm(),
          "lm_head.weight": matrix(len(tokens), HIDDEN)}
    in_gguf = {"token_embd.weight": hf["model.embed_tokens.weight"], "output_norm.weight": hf["model.norm.weight"],
               "output.weight": hf["lm_head.weight"]}
    for layer in range(LAYERS):
        ours, theirs = f"model.layers.{layer}.", f"blk.{layer}."
        parts = {"input_layernorm": ("attn_norm", norm()), "post_attention_layernorm": ("ffn_norm", norm()),
                 "self_attn.q_proj": ("attn_q", matrix(HEADS * HEAD_DIM, HIDDEN)),
                 "self_attn.k_proj": ("attn_k", matrix(KV_HEADS * HEAD_DIM, HIDDEN)),
                 "self_attn.v_proj": ("attn_v", matrix(KV_HEADS * HEAD_DIM, HIDDEN)),
                 "self_attn.o_proj": ("attn_output", matrix(HIDDEN, HEADS * HEAD_DIM)),
                 "mlp.gate_proj": ("ffn_gate", matrix(FFN, HIDDEN)), "mlp.up_proj": ("ffn_up", matrix(FFN, HIDDEN)),
                 "mlp.down_proj": ("ffn_down", matrix(HIDDEN, FFN))}
        for name, (gguf_name, values) in parts.items():
            hf[f"{ours}{name}.weight"] = values
            if gguf_name == "attn_q":
                values = _llama_cpp_permute(values, HEADS)
            elif gguf_name == "attn_k":
                values = _llama_cpp_permute(values, KV_HEADS)
            in_gguf[f"{theirs}{gguf_name}.weight"] = values

    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_context_length(256)
    writer.add_embedding_length(HIDDEN)
    writer.add_block_count(LAYERS)
    writer.add_feed_forward_length(FFN)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV_HEADS)
    writer.add_rope_dimension_count(HEAD_DIM)
    writer.add_rope_freq_base(ROPE_THETA)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(len(tokens))
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list(tokens)
    writer.add_token_types([3 if token in special else 1 for token in tokens])  # 3: control
    writer.add_token_merges(merges)
    writer.add_bos_token_id(reference.bos_token_id)
    writer.add_eos_token_id(reference.eos_token_id)
    if chat_template is not None:
        writer.add_chat_template(chat_template)
    for name, values in in_gguf.items():
        writer.add_tensor(name, values)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    weights = {name: torch.from_numpy(values).float() for name, values in hf.items()}
    return TinyGGUF(path, hashlib.sha256(path.read_bytes()).hexdigest(), weights, reference)


@pytest.fixture(scope="session")
def chat_gguf(tmp_path_factory) -> TinyGGUF:
    """A tiny Llama GGUF whose tokenizer has a chat template (alone in its directory)."""
    return _write_gguf(tmp_path_factory.mktemp("gguf-chat") / "tiny-chat.gguf", STRICT_CHAT_TEMPLATE)


@pytest.fixture(scope="session")
def plain_gguf(tmp_path_factory) -> TinyGGUF:
    """The same model without a chat template."""
    return _write_gguf(tmp_path_factory.mktemp("gguf-plain") / "tiny-plain.gguf", None)


@pytest.fixture(scope="session")
def converted(chat_gguf, tmp_path_factory) -> SimpleNamespace:
    """``chat_gguf`` converted once: the directory, the returned versions and the progress messages."""
    out = tmp_path_factory.mktemp("converted")
    messages: list[str] = []
    versions = conversion.convert_gguf(chat_gguf.path, out, messages.append)
    return SimpleNamespace(dir=out, versions=versions, messages=messages)


def _encodings(tokenizer, texts=TEXTS) -> list[list[int]]:
    return [list(tokenizer(text)["input_ids"]) for text in texts]


def _chat_ids(tokenizer, generation_prompt: bool = True) -> list[int]:
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Où est la gare ?"}]
    encoded = tokenizer.apply_chat_template(messages, add_generation_prompt=generation_prompt, tokenize=True,
                                            return_dict=True)
    return list(encoded["input_ids"])


def _safetensors_dtypes(directory: Path) -> set[str]:
    dtypes = set()
    for file in directory.glob("*.safetensors"):
        with safe_open(str(file), framework="pt") as weights:
            dtypes |= {str(weights.get_slice(name).get_dtype()) for name in weights.keys()}  # noqa: SIM118
    return dtypes


# --------------------------------------------------------------------------- convert_gguf: what it writes


def test_the_converted_directory_holds_the_ggufs_weights_in_float32(converted, chat_gguf):
    assert _safetensors_dtypes(converted.dir) == {"F32"}
    assert not list(converted.dir.glob("*.bin"))
    model = transformers.AutoModelForCausalLM.from_pretrained(str(converted.dir))
    assert model.dtype == torch.float32
    state = model.state_dict()
    assert set(state) == set(chat_gguf.weights)
    different = [name for name, expected in chat_gguf.weights.items() if not torch.equal(state[name], expected)]
    assert different == []
    config = json.loads((converted.dir / "config.json").read_text())
    assert "quantization_config" not in config  # a plain model, not one transformers would dequantize again
    assert (config["num_hidden_layers"], config["hidden_size"], config["num_key_value_heads"]) == (
        LAYERS, HIDDEN, KV_HEADS)


def test_the_weights_are_float32_whatever_torchs_default_dtype(plain_gguf, tmp_path):
    """transformers loads in torch's default dtype when none is asked for: a process that changed it (float64 here)
    still gets float32 safetensors equal to the GGUF's."""
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        conversion.convert_gguf(plain_gguf.path, tmp_path, lambda _msg: None)
    finally:
        torch.set_default_dtype(default)
    assert _safetensors_dtypes(tmp_path) == {"F32"}
    state = load_file(str(next(tmp_path.glob("*.safetensors"))))
    assert all(torch.equal(state[name], weight) for name, weight in plain_gguf.weights.items() if name in state)


def test_the_converted_tokenizer_encodes_and_formats_chats_as_the_ggufs(converted, chat_gguf):
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(converted.dir))
    assert _encodings(tokenizer) == _encodings(chat_gguf.tokenizer)
    assert tokenizer.chat_template == STRICT_CHAT_TEMPLATE
    assert _chat_ids(tokenizer) == _chat_ids(chat_gguf.tokenizer)
    assert (tokenizer.bos_token, tokenizer.eos_token) == ("<|im_start|>", "<|im_end|>")


def test_conversion_returns_the_versions_for_the_marker_and_says_it_checks(converted):
    assert converted.versions == {"transformers_version": transformers.__version__,
                                  "torch_version": torch.__version__, "dtype": "float32"}
    assert converted.messages == ["Checking the converted model..."]


def test_a_gguf_without_a_chat_template_converts_to_a_tokenizer_without_one(plain_gguf, tmp_path):
    versions = conversion.convert_gguf(plain_gguf.path, tmp_path, lambda _msg: None)
    assert versions["dtype"] == "float32"
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(tmp_path))
    assert not tokenizer.chat_template
    assert _encodings(tokenizer) == _encodings(plain_gguf.tokenizer)


# --------------------------------------------------------------------------- convert_gguf: what it refuses


def _after_saving(monkeypatch, cls, damage) -> None:
    """Make ``cls.save_pretrained`` (models or tokenizers) save as usual, then ``damage(directory)`` what it wrote:
    a copy on disk that no longer matches what was loaded from the GGUF."""
    original = cls.save_pretrained

    def save_then_damage(self, directory, *args, **kwargs):
        result = original(self, directory, *args, **kwargs)
        damage(Path(directory))
        return result

    monkeypatch.setattr(cls, "save_pretrained", save_then_damage)


def _gguf_tokenizer_class(gguf: TinyGGUF) -> type:
    return type(transformers.AutoTokenizer.from_pretrained(str(gguf.path.parent), gguf_file=gguf.path.name))


def test_a_saved_weight_that_differs_is_refused_with_its_name(chat_gguf, tmp_path, monkeypatch):
    def change_one_weight(directory: Path) -> None:
        file = next(directory.glob("*.safetensors"))
        tensors = load_file(str(file))
        tensors["model.layers.1.mlp.up_proj.weight"][0, 0] += 0.25
        save_file(tensors, str(file), metadata={"format": "pt"})

    _after_saving(monkeypatch, transformers.LlamaForCausalLM, change_one_weight)
    with pytest.raises(RuntimeError, match=r"^the converted weight model\.layers\.1\.mlp\.up_proj\.weight differs "
                                           r"from the GGUF's; conversion aborted$"):
        conversion.convert_gguf(chat_gguf.path, tmp_path, lambda _msg: None)


def _drop_merges(directory: Path) -> None:
    """Keep only the first 40 merges of the saved tokenizer: common words come out in more pieces."""
    file = directory / "tokenizer.json"
    state = json.loads(file.read_text(encoding="utf-8"))
    state["model"]["merges"] = state["model"]["merges"][:40]
    file.write_text(json.dumps(state), encoding="utf-8")


TOKENIZER_REFUSAL = r"^the converted tokenizer encodes differently from the GGUF's; conversion aborted$"


@pytest.mark.parametrize("which", ["chat", "plain"])
def test_a_saved_tokenizer_that_encodes_differently_is_refused(which, chat_gguf, plain_gguf, tmp_path, monkeypatch):
    gguf = chat_gguf if which == "chat" else plain_gguf
    _after_saving(monkeypatch, _gguf_tokenizer_class(gguf), _drop_merges)
    with pytest.raises(RuntimeError, match=TOKENIZER_REFUSAL):
        conversion.convert_gguf(gguf.path, tmp_path, lambda _msg: None)


def test_a_saved_chat_template_that_opens_the_answer_differently_is_refused(chat_gguf, tmp_path, monkeypatch):
    """The check formats a chat with the prompt that opens the assistant's turn: a template whose turn opener
    changed (the plain text and the rest of the chat encode as before) is caught."""
    def rename_the_assistant(directory: Path) -> None:
        changed = 0
        for file in directory.iterdir():
            text = file.read_text(encoding="utf-8") if file.suffix in (".json", ".jinja") else ""
            if "<|im_start|>assistant" in text:
                file.write_text(text.replace("<|im_start|>assistant", "<|im_start|>model"), encoding="utf-8")
                changed += 1
        assert changed, "no saved chat template found"

    _after_saving(monkeypatch, _gguf_tokenizer_class(chat_gguf), rename_the_assistant)
    with pytest.raises(RuntimeError, match=TOKENIZER_REFUSAL):
        conversion.convert_gguf(chat_gguf.path, tmp_path, lambda _msg: None)
    damaged = transformers.AutoTokenizer.from_pretrained(str(tmp_path))
    assert _encodings(damaged) == _encodings(chat_gguf.tokenizer)  # only the answer's opener differs
    assert _chat_ids(damaged, generation_prompt=False) == _chat_ids(chat_gguf.tokenizer, generation_prompt=False)


@pytest.mark.parametrize("rope_theta", [9900.0, 50.0])  # logits off by a little (under 1) and by a lot
def test_a_saved_config_that_changes_the_logits_is_refused_with_the_difference(rope_theta, chat_gguf, tmp_path,
                                                                               monkeypatch):
    """Same weights, another rotary base in config.json: the reloaded model computes other logits."""
    def change_rope_theta(directory: Path) -> None:
        file = directory / "config.json"
        config = json.loads(file.read_text())
        text = json.dumps(config).replace(f'"rope_theta": {ROPE_THETA}', f'"rope_theta": {rope_theta}')
        assert text != json.dumps(config), "no rope_theta in the saved config"
        file.write_text(text)

    _after_saving(monkeypatch, transformers.LlamaForCausalLM, change_rope_theta)
    with pytest.raises(RuntimeError) as refused:
        conversion.convert_gguf(chat_gguf.path, tmp_path, lambda _msg: None)
    found = re.fullmatch(r"the converted model's logits differ from the GGUF's \(max diff (\S+)\); conversion aborted",
                         str(refused.value))
    assert found, str(refused.value)
    reported = float(found.group(1))
    # what is reported is a difference of the two models' logits, as large as they show elsewhere (at most the
    # largest over every position of a longer chat), not, say, one model's logits
    ids = torch.tensor([_chat_ids(chat_gguf.tokenizer) * 3])
    with torch.no_grad():
        reference = transformers.AutoModelForCausalLM.from_pretrained(
            str(chat_gguf.path.parent), gguf_file=chat_gguf.path.name, dtype=torch.float32)(input_ids=ids).logits
        damaged = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path))(input_ids=ids).logits
    assert 1e-4 < reported <= (reference - damaged).abs().max().item()


# --------------------------------------------------------------------------- build_once: into the cache, once


def _obtain_copy(gguf: TinyGGUF, calls: list[Path]):
    """An ``obtain`` that copies the GGUF into the work directory it is given, as a download would."""
    def obtain(work: Path, say) -> Path:
        calls.append(work)
        say("Downloading tiny.gguf...")
        return Path(shutil.copy(gguf.path, work / "tiny.gguf"))

    return obtain


def _build(gguf: TinyGGUF, target: Path, messages: list[str], calls: list[Path]) -> Path:
    return conversion.build_once(target, gguf.sha256, _obtain_copy(gguf, calls), title="Tiny Llama",
                                 info={"source": "tests"}, progress=messages.append, needed="about 2 MB",
                                 memory="about 3 MB")


def test_build_once_converts_into_the_cache_and_marks_it_complete_last(chat_gguf, tmp_path):
    target = tmp_path / "models" / "tiny"
    (tmp_path / "models").mkdir()
    stale = [tmp_path / "models" / ".tiny.partial-old", tmp_path / "models" / ".tiny.download-old"]
    for leftover in stale:  # left by a killed conversion
        leftover.mkdir()
        (leftover / "half.safetensors").write_bytes(b"half")
    messages: list[str] = []
    calls: list[Path] = []
    started = int(time.time())
    assert _build(chat_gguf, target, messages, calls) == target
    marker = json.loads((target / conversion.MARKER_NAME).read_text())
    assert marker["gguf_sha256"] == chat_gguf.sha256 and marker["source"] == "tests"
    assert (marker["dtype"], marker["transformers_version"], marker["torch_version"]) == (
        "float32", transformers.__version__, torch.__version__)
    assert started <= marker["created_unix"] <= time.time() and 0 <= marker["conversion_s"] < 60
    assert conversion.is_complete(target, chat_gguf.sha256)
    model = transformers.AutoModelForCausalLM.from_pretrained(str(target))
    assert torch.equal(model.state_dict()["model.layers.0.self_attn.k_proj.weight"],
                       chat_gguf.weights["model.layers.0.self_attn.k_proj.weight"])
    size_mb = sum(file.stat().st_size for file in target.rglob("*") if file.is_file()) / 1e6
    setup = f"Setting up Tiny Llama in {target} (once; about 2 MB of disk and about 3 MB of memory at its peak)."
    assert messages[:4] == [setup,
                            "Downloading tiny.gguf...",
                            "Converting the GGUF to float32 safetensors (once)...",
                            "Checking the converted model..."]
    assert re.fullmatch(rf"Tiny Llama ready at {re.escape(str(target))} \({size_mb:.0f} MB, took \d+ s\)\.",
                        messages[4]) and len(messages) == 5
    assert sorted(path.name for path in (tmp_path / "models").iterdir()) == [".tiny.lock", "tiny"]  # work dirs gone
    assert len(calls) == 1 and not calls[0].exists()


def test_a_complete_directory_is_returned_and_an_incomplete_one_rebuilt(chat_gguf, tmp_path):
    target = tmp_path / "tiny"
    messages: list[str] = []
    calls: list[Path] = []
    _build(chat_gguf, target, messages, calls)
    marker = target / conversion.MARKER_NAME
    stamp = marker.stat().st_mtime_ns
    messages.clear()
    assert _build(chat_gguf, target, messages, calls) == target
    assert len(calls) == 1 and messages == [] and marker.stat().st_mtime_ns == stamp
    (target / "tokenizer.json").unlink()
    (target / "tokenizer_config.json").unlink()  # a directory without its tokenizer is incomplete
    assert _build(chat_gguf, target, messages, calls) == target
    assert len(calls) == 2 and messages[0] == f"The model cache at {target} is incomplete; rebuilding it."
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(target))
    assert _encodings(tokenizer) == _encodings(chat_gguf.tokenizer)
    assert conversion.is_complete(target, chat_gguf.sha256)


def test_a_cache_under_a_file_is_not_writable_and_names_the_place(chat_gguf, tmp_path):
    (tmp_path / "cache").write_text("not a directory")
    target = tmp_path / "cache" / "models" / "tiny"
    calls: list[Path] = []
    with pytest.raises(CacheNotWritable) as refused:
        _build(chat_gguf, target, [], calls)
    assert (refused.value.path, refused.value.reason, refused.value.needed) == (
        target.parent, "Not a directory", "about 2 MB")
    assert str(refused.value).startswith(f"could not write the model cache in {target.parent}: Not a directory; ")
    assert calls == []


def test_a_full_disk_while_obtaining_the_gguf_is_not_writable_and_leaves_nothing(chat_gguf, tmp_path):
    def obtain(work: Path, say) -> Path:
        (work / "tiny.gguf").write_bytes(b"GGUF")
        raise OSError(errno.ENOSPC, "No space left on device")

    target = tmp_path / "models" / "tiny"
    with pytest.raises(CacheNotWritable) as refused:
        conversion.build_once(target, chat_gguf.sha256, obtain, title="Tiny Llama", info={}, needed="about 2 MB")
    assert (refused.value.path, refused.value.reason, refused.value.needed) == (
        target.parent, "No space left on device", "about 2 MB")
    assert str(refused.value) == (
        f"could not write the model cache in {target.parent}: No space left on device; "
        "free some disk space (about 2 MB needed) or set SNAPKV_CACHE_DIR to another directory")
    assert [path.name for path in target.parent.iterdir()] == [".tiny.lock"]


def test_a_full_disk_while_saving_the_weights_is_not_writable_and_leaves_nothing(chat_gguf, tmp_path, monkeypatch):
    """safetensors reports a failed write as its own error, with no errno: its message is the reason."""
    def disk_full(*args, **kwargs):
        raise SafetensorError("Error while serializing: IoError(No space left on device (os error 28))")

    monkeypatch.setattr(transformers.modeling_utils, "safe_save_file", disk_full)
    target = tmp_path / "models" / "tiny"
    with pytest.raises(CacheNotWritable) as refused:
        _build(chat_gguf, target, [], [])
    assert (refused.value.path, refused.value.needed) == (target.parent, "about 2 MB")
    assert refused.value.reason == "Error while serializing: IoError(No space left on device (os error 28))"
    assert [path.name for path in target.parent.iterdir()] == [".tiny.lock"]


# --------------------------------------------------------------------------- the bfloat16 copy of a conversion


def test_the_bfloat16_copy_of_a_conversion_is_made_once_from_its_weights(chat_gguf, tmp_path):
    source = _build(chat_gguf, tmp_path / "tiny", [], [])
    messages: list[str] = []
    copy = conversion.dtype_copy(source, "bfloat16", messages.append)
    assert copy == source / "bfloat16" and messages == ["Saving a bfloat16 copy of tiny (once)..."]
    marker = conversion.read_marker(copy)
    assert (marker["dtype"], marker["gguf_sha256"], marker["converted_from"]) == (
        "bfloat16", chat_gguf.sha256, "float32")
    assert _safetensors_dtypes(copy) == {"BF16"}
    model = transformers.AutoModelForCausalLM.from_pretrained(str(copy))
    assert model.dtype == torch.bfloat16
    assert all(torch.equal(model.state_dict()[name], weight.to(torch.bfloat16))
               for name, weight in chat_gguf.weights.items())
    assert _encodings(transformers.AutoTokenizer.from_pretrained(str(copy))) == _encodings(chat_gguf.tokenizer)
    stamp = (copy / conversion.MARKER_NAME).stat().st_mtime_ns
    messages.clear()
    assert conversion.dtype_copy(source, "bfloat16", messages.append) == copy
    assert messages == [] and (copy / conversion.MARKER_NAME).stat().st_mtime_ns == stamp
    assert conversion.dtype_copy(source, "float32") == source


# --------------------------------------------------------------------------- build_once and dtype_copy: where the work
# happens, what a failure names, waiting for another process


def _make_complete(converted: SimpleNamespace, target: Path, sha256: str, **marker) -> Path:
    """``target`` as a finished conversion: the session's converted files and a marker written here."""
    shutil.copytree(converted.dir, target, dirs_exist_ok=True)
    (target / conversion.MARKER_NAME).write_text(json.dumps({"gguf_sha256": sha256, **marker}), encoding="utf-8")
    return target


def _converting_by_copy(converted: SimpleNamespace, seen: list[Path], clock: list[float] | None = None):
    """A stand-in for ``convert_gguf`` that records the directory it is given, fills it with the session's
    conversion and advances ``clock`` by 12.345 s (a conversion that took that long)."""
    def convert(gguf: Path, out_dir: Path, say) -> dict:
        seen.append(out_dir)
        assert Path(gguf).is_file() and out_dir.is_dir()
        shutil.copytree(converted.dir, out_dir, dirs_exist_ok=True)
        if clock is not None:
            clock[0] += 12.345
        return dict(converted.versions)

    return convert


def _fake_clock(monkeypatch) -> list[float]:
    """conversion's monotonic clock, standing still until a test advances it."""
    clock = [1000.0]
    monkeypatch.setattr(conversion, "time", SimpleNamespace(monotonic=lambda: clock[0], time=time.time))
    return clock


def _while_locked(lock_path: Path, call, messages: list[str], finish) -> dict:
    """Hold ``lock_path`` as another process would, run ``call`` in a thread until it says it waits, then
    ``finish()`` (the other process's work) and release; what ``call`` returned or raised."""
    import threading

    from filelock import FileLock

    holder = FileLock(str(lock_path))
    holder.acquire()
    outcome: dict = {}

    def run() -> None:
        try:
            outcome["result"] = call()
        except BaseException as exc:  # reported to the test
            outcome["error"] = exc

    worker = threading.Thread(target=run, daemon=True)
    try:
        worker.start()
        deadline = time.monotonic() + 10
        while not messages and worker.is_alive() and time.monotonic() < deadline:
            time.sleep(0.01)
        outcome["said_while_locked"] = list(messages)
        finish()
    finally:
        holder.release()
    worker.join(10)
    assert not worker.is_alive()
    return outcome


def test_the_work_and_staging_directories_lie_next_to_the_target_where_a_later_run_finds_them(
        chat_gguf, converted, tmp_path, monkeypatch):
    """A conversion killed midway leaves ``.<name>.download-*`` and ``.<name>.partial-*`` in the target's parent:
    the names the next run removes. The marker says how long it took, to a tenth of a second."""
    clock = _fake_clock(monkeypatch)
    seen: list[Path] = []
    monkeypatch.setattr(conversion, "convert_gguf", _converting_by_copy(converted, seen, clock))
    target = tmp_path / "models" / "tiny"
    messages: list[str] = []
    calls: list[Path] = []
    _build(chat_gguf, target, messages, calls)
    (work,), (staging,) = calls, seen
    assert work.parent == target.parent and work.name.startswith(".tiny.download-")
    assert staging.parent == target.parent and staging.name.startswith(".tiny.partial-")
    assert not work.exists() and not staging.exists()
    text = (target / conversion.MARKER_NAME).read_text(encoding="utf-8")
    assert json.loads(text)["conversion_s"] == 12.3
    assert text.startswith('{\n  "source": "tests",\n  "') and text.endswith("\n}\n")  # readable: one key a line
    assert re.fullmatch(rf"Tiny Llama ready at {re.escape(str(target))} \(\d+ MB, took 12 s\)\.", messages[-1])


def test_the_ready_message_counts_megabytes_of_a_million_bytes(chat_gguf, converted, tmp_path, monkeypatch):
    """A directory of exactly 1,500,000 bytes is 1.5 MB, said rounded: 2 MB."""
    _fake_clock(monkeypatch)
    padding = [0]

    def convert(gguf: Path, out_dir: Path, say) -> dict:
        shutil.copytree(converted.dir, out_dir, dirs_exist_ok=True)
        (out_dir / "padding.bin").write_bytes(b"\0" * padding[0])
        return dict(converted.versions)

    def size(directory: Path) -> int:
        return sum(file.stat().st_size for file in directory.rglob("*") if file.is_file())

    monkeypatch.setattr(conversion, "convert_gguf", convert)
    first = _build(chat_gguf, tmp_path / "first", [], [])  # the same files and marker length, without padding
    padding[0] = 1_500_000 - size(first)
    messages: list[str] = []
    second = _build(chat_gguf, tmp_path / "second", messages, [])
    assert size(second) == 1_500_000
    assert messages[-1] == f"Tiny Llama ready at {second} (2 MB, took 0 s)."


def test_a_name_too_long_for_the_work_directory_is_not_writable_with_the_default_space(chat_gguf, tmp_path):
    """The lock's name fits, the work directory's (``.<name>.download-`` and 8 random characters) does not."""
    target = tmp_path / "models" / ("t" * 240)
    calls: list[Path] = []
    with pytest.raises(CacheNotWritable) as refused:
        conversion.build_once(target, chat_gguf.sha256, _obtain_copy(chat_gguf, calls), title="Tiny Llama", info={})
    assert str(refused.value) == (
        f"could not write the model cache in {target.parent}: File name too long; "
        "free some disk space (about 1 GB needed) or set SNAPKV_CACHE_DIR to another directory")
    assert calls == [] and [path.name for path in target.parent.iterdir()] == [f".{target.name}.lock"]


def test_a_marker_that_cannot_be_written_is_not_writable_and_leaves_nothing(chat_gguf, converted, tmp_path,
                                                                           monkeypatch):
    def convert_then_block_the_marker(gguf: Path, out_dir: Path, say) -> dict:
        (out_dir / conversion.MARKER_NAME).mkdir()  # a directory where the marker must go
        return dict(converted.versions)

    monkeypatch.setattr(conversion, "convert_gguf", convert_then_block_the_marker)
    target = tmp_path / "models" / "tiny"
    with pytest.raises(CacheNotWritable) as refused:
        _build(chat_gguf, target, [], [])
    assert str(refused.value) == (
        f"could not write the model cache in {target.parent}: Is a directory; "
        "free some disk space (about 2 MB needed) or set SNAPKV_CACHE_DIR to another directory")
    assert [path.name for path in target.parent.iterdir()] == [".tiny.lock"]


def test_a_lock_that_cannot_be_created_names_the_space_needed(chat_gguf, tmp_path):
    target = tmp_path / "models" / "tiny"
    (target.parent / ".tiny.lock").mkdir(parents=True)  # a directory where the lock file must go
    with pytest.raises(CacheNotWritable) as refused:
        _build(chat_gguf, target, [], [])
    assert (refused.value.path, refused.value.reason, refused.value.needed) == (
        target.parent, "Is a directory", "about 2 MB")
    assert str(refused.value) == (f"could not write the model cache in {target.parent}: Is a directory; free some "
                                  "disk space (about 2 MB needed) or set SNAPKV_CACHE_DIR to another directory")


def test_a_file_at_the_targets_place_is_replaced_by_the_conversion(chat_gguf, converted, tmp_path, monkeypatch):
    monkeypatch.setattr(conversion, "convert_gguf", _converting_by_copy(converted, []))
    target = tmp_path / "tiny"
    target.write_text("left by something else")
    assert _build(chat_gguf, target, [], []) == target
    assert target.is_dir() and conversion.is_complete(target, chat_gguf.sha256)


def test_an_obtain_that_tidies_its_work_directory_away_is_fine(chat_gguf, converted, tmp_path, monkeypatch):
    """``obtain`` may return a GGUF lying anywhere; its work directory gone by the end is no error."""
    monkeypatch.setattr(conversion, "convert_gguf", _converting_by_copy(converted, []))

    def obtain(work: Path, say) -> Path:
        work.rmdir()
        return chat_gguf.path

    target = tmp_path / "tiny"
    assert conversion.build_once(target, chat_gguf.sha256, obtain, title="Tiny Llama", info={}) == target
    assert conversion.is_complete(target, chat_gguf.sha256)


def test_a_second_caller_says_it_waits_and_takes_what_the_first_one_built(chat_gguf, converted, tmp_path):
    target = tmp_path / "models" / "tiny"
    target.parent.mkdir()
    messages: list[str] = []
    calls: list[Path] = []
    outcome = _while_locked(target.parent / ".tiny.lock", lambda: _build(chat_gguf, target, messages, calls),
                            messages, lambda: _make_complete(converted, target, chat_gguf.sha256))
    assert outcome["said_while_locked"] == ["Another snapkv process is setting up Tiny Llama; waiting for it..."]
    assert outcome.get("result") == target and calls == [] and len(messages) == 1


def test_a_complete_target_is_returned_without_waiting_for_the_lock(chat_gguf, converted, tmp_path):
    target = _make_complete(converted, tmp_path / "tiny", chat_gguf.sha256)
    messages: list[str] = []
    outcome = _while_locked(tmp_path / ".tiny.lock", lambda: _build(chat_gguf, target, messages, []), messages,
                            lambda: None)
    assert outcome["said_while_locked"] == [] and outcome.get("result") == target


@pytest.mark.parametrize("marker", [{}, {"dtype": "float32"}, {"dtype": "bfloat16"}, None])
def test_a_source_in_the_dtype_asked_or_without_a_marker_is_its_own_copy(marker, tmp_path):
    """A marker without a dtype is float32 (older conversions); a source without a marker is returned as is."""
    source = tmp_path / "tiny"
    source.mkdir()
    if marker is not None:
        (source / conversion.MARKER_NAME).write_text(json.dumps({"gguf_sha256": "abc", **marker}))
    dtype = (marker or {}).get("dtype", "float32") if marker is not None else "bfloat16"
    assert conversion.dtype_copy(source, dtype) == source
    assert [path.name for path in source.iterdir()] == ([conversion.MARKER_NAME] if marker is not None else [])


def test_the_bfloat16_copy_is_staged_in_the_source_replaces_an_older_one_and_marks_its_origin(
        chat_gguf, converted, tmp_path, monkeypatch):
    source = _make_complete(converted, tmp_path / "tiny", chat_gguf.sha256, dtype="float32", source="tests")
    old = _make_complete(converted, source / "bfloat16", "another-gguf", dtype="bfloat16")
    (old / "old.txt").write_text("from another conversion")
    for stale in (".bfloat16.partial-old", ".bfloat16.download-old"):  # left by killed copies
        (source / stale).mkdir()
    clock = _fake_clock(monkeypatch)
    seen: list[Path] = []
    real_save = conversion.save_in_dtype

    def save(src: Path, out_dir: Path, dtype: str) -> dict:
        seen.append(out_dir)
        versions = real_save(src, out_dir, dtype)
        clock[0] += 3.456
        return versions

    monkeypatch.setattr(conversion, "save_in_dtype", save)
    messages: list[str] = []
    started = int(time.time())
    assert conversion.dtype_copy(source, "bfloat16", messages.append) == old
    assert messages == ["Saving a bfloat16 copy of tiny (once)..."]
    (staging,) = seen
    assert staging.parent == source and staging.name.startswith(".bfloat16.partial-")
    assert sorted(path.name for path in source.iterdir() if path.name.startswith(".")) == [".bfloat16.lock"]
    assert not (old / "old.txt").exists() and _safetensors_dtypes(old) == {"BF16"}
    text = (old / conversion.MARKER_NAME).read_text(encoding="utf-8")
    marker = json.loads(text)
    assert {key: marker[key] for key in ("gguf_sha256", "dtype", "source", "converted_from", "conversion_s",
                                         "transformers_version", "torch_version")} == {
        "gguf_sha256": chat_gguf.sha256, "dtype": "bfloat16", "source": "tests", "converted_from": "float32",
        "conversion_s": 3.5, "transformers_version": transformers.__version__, "torch_version": torch.__version__}
    assert started <= marker["created_unix"] <= time.time()
    assert text.startswith('{\n  "gguf_sha256": ') and text.endswith("\n}\n")  # readable: one key a line


def _bfloat16_source(converted, tmp_path: Path, sha256: str) -> Path:
    return _make_complete(converted, tmp_path / "tiny", sha256, dtype="float32")


def _bfloat16_refusal(source: Path, reason: str) -> str:
    return (f"could not write the model cache in {source}: {reason}; "
            "free some disk space (about 300 MB needed) or set SNAPKV_CACHE_DIR to another directory")


def test_a_full_disk_while_saving_the_bfloat16_copy_is_not_writable_and_leaves_nothing(chat_gguf, converted,
                                                                                       tmp_path, monkeypatch):
    source = _bfloat16_source(converted, tmp_path, chat_gguf.sha256)

    def save(src: Path, out_dir: Path, dtype: str) -> dict:
        (out_dir / "model.safetensors").write_bytes(b"half")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(conversion, "save_in_dtype", save)
    with pytest.raises(CacheNotWritable) as refused:
        conversion.dtype_copy(source, "bfloat16")
    assert (refused.value.path, str(refused.value)) == (source, _bfloat16_refusal(source, "No space left on device"))
    assert sorted(path.name for path in source.iterdir() if not path.is_file()) == []


def test_a_bfloat16_marker_that_cannot_be_written_is_not_writable_and_leaves_nothing(chat_gguf, converted,
                                                                                     tmp_path, monkeypatch):
    source = _bfloat16_source(converted, tmp_path, chat_gguf.sha256)

    def save(src: Path, out_dir: Path, dtype: str) -> dict:
        (out_dir / conversion.MARKER_NAME).mkdir()  # a directory where the marker must go
        return {"dtype": dtype}

    monkeypatch.setattr(conversion, "save_in_dtype", save)
    with pytest.raises(CacheNotWritable) as refused:
        conversion.dtype_copy(source, "bfloat16")
    assert (refused.value.path, str(refused.value)) == (source, _bfloat16_refusal(source, "Is a directory"))
    assert sorted(path.name for path in source.iterdir() if not path.is_file()) == []


def test_the_bfloat16_writers_full_disk_error_is_the_reason(chat_gguf, converted, tmp_path, monkeypatch):
    """safetensors reports a failed write as its own error, with no errno: its message is the reason."""
    def disk_full(*args, **kwargs):
        raise SafetensorError("Error while serializing: IoError(No space left on device (os error 28))")

    source = _bfloat16_source(converted, tmp_path, chat_gguf.sha256)
    monkeypatch.setattr(transformers.modeling_utils, "safe_save_file", disk_full)
    with pytest.raises(CacheNotWritable) as refused:
        conversion.dtype_copy(source, "bfloat16")
    assert refused.value.reason == "Error while serializing: IoError(No space left on device (os error 28))"


def test_a_bfloat16_lock_that_cannot_be_created_names_the_space_needed(chat_gguf, converted, tmp_path):
    source = _bfloat16_source(converted, tmp_path, chat_gguf.sha256)
    (source / ".bfloat16.lock").mkdir()
    with pytest.raises(CacheNotWritable) as refused:
        conversion.dtype_copy(source, "bfloat16")
    assert (refused.value.path, refused.value.reason, refused.value.needed) == (
        source, "Is a directory", "about 300 MB")
    assert str(refused.value).startswith(f"could not write the model cache in {source}: Is a directory;")


def test_a_second_bfloat16_caller_says_it_waits_and_takes_the_first_ones_copy(chat_gguf, converted, tmp_path):
    source = _bfloat16_source(converted, tmp_path, chat_gguf.sha256)
    messages: list[str] = []
    outcome = _while_locked(
        source / ".bfloat16.lock", lambda: conversion.dtype_copy(source, "bfloat16", messages.append), messages,
        lambda: _make_complete(converted, source / "bfloat16", chat_gguf.sha256, dtype="bfloat16"))
    assert outcome["said_while_locked"] == [
        "Another snapkv process is making the bfloat16 copy of tiny; waiting for it..."]
    assert outcome.get("result") == source / "bfloat16" and len(messages) == 1


# --------------------------------------------------------------------------- strip_gguf_quantizer


def test_a_gguf_loaded_model_once_stripped_saves_and_moves(chat_gguf, tmp_path):
    model = transformers.AutoModelForCausalLM.from_pretrained(
        str(chat_gguf.path.parent), gguf_file=chat_gguf.path.name, dtype=torch.float32)
    with pytest.raises(Exception, match="not serializable"):  # what stripping is for
        model.save_pretrained(str(tmp_path / "refused"))
    strip_gguf_quantizer(model)
    assert model.hf_quantizer is None and "quantization_config" not in model.config.to_dict()
    model.save_pretrained(str(tmp_path / "saved"))
    assert "quantization_config" not in json.loads((tmp_path / "saved" / "config.json").read_text())
    model.to(torch.bfloat16)
    assert {parameter.dtype for parameter in model.parameters()} == {torch.bfloat16}


def test_stripping_also_clears_a_quantization_config_the_config_class_declares():
    class Config:
        quantization_config = "gguf"

    model = SimpleNamespace(config=Config(), hf_quantizer=object())
    strip_gguf_quantizer(model)
    assert model.config.quantization_config is None and model.hf_quantizer is None
    plain = SimpleNamespace(config=SimpleNamespace(), hf_quantizer=None)
    strip_gguf_quantizer(plain)  # nothing to strip
    assert vars(plain.config) == {} and plain.hf_quantizer is None
