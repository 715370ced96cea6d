"""``--decode-weights bfloat16``: one-token decoding steps multiply by bfloat16 copies of a float32 model's Linear
weights, while the prefill, the attention and the KV cache stay float32, and oneDNN is switched only around the steps
where the host's rule says so; the report says what ran."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from typer.testing import CliRunner

import snapkv_cli.cli as cli
from snapkv_cli.engine import CompressionSettings, SnapKVCache, attached
from snapkv_cli.errors import InvalidValue
from snapkv_cli.generation import GenerationOptions, generate_answer, prefill
from snapkv_cli.generation import decode_path as dp
from tests.helpers import WordTokenizer, assert_user_error, panel_text
from tests.tiny_models import prompt_ids, tiny_model

SETTINGS = CompressionSettings(method="snapkv", window_size=4, max_capacity_prompt=16, kernel_size=3,
                               pooling="maxpool")
PROMPT = 40
FORCED = [7, 11, 13, 17, 19, 23, 29, 31]  # the tokens fed to every decoding step (teacher forcing)
# bfloat16 keeps 8 significant bits: a product over 96-128 terms rounds to about 2**-8 of its size; through three
# layers the tiny models' logits (spread about 1) move by a few hundredths at most
LOGIT_TOLERANCE = 0.08


def fresh(family: str = "llama") -> torch.nn.Module:
    return copy.deepcopy(tiny_model(family))  # the cached model is shared: never give it the path's forwards


def forced_logits(model, path: dp.DecodePath | None) -> list[torch.Tensor]:
    """Prefill the prompt (compressed), then feed FORCED one token per step, with or without the path's steps;
    the logits of the prefill and of every step, in float32."""
    ids = prompt_ids(PROMPT)[0].tolist()
    cache = SnapKVCache(settings=SETTINGS, config=model.config)
    with attached(model), torch.inference_mode():
        logits = [prefill(model, ids, cache)]
        for step, token in enumerate(FORCED):
            position = torch.tensor([[PROMPT + step]])
            with path.step() if path is not None else torch.no_grad():
                output = model(torch.tensor([[token]]), cache=cache, position_ids=position,
                               cache_position=position[0], use_cache=True)
            logits.append(output.logits[:, -1])
    assert all(layer.keys.dtype == torch.float32 for layer in cache.layers)  # the KV cache stays float32
    return logits


@pytest.mark.parametrize("family", ["llama", "qwen3", "gemma3_text", "phi3"])
def test_the_decoding_steps_logits_match_float32_within_the_tolerance_and_the_prefill_is_unchanged(family):
    model = fresh(family)
    reference = forced_logits(model, None)
    path = dp.attach(model, native_bf16=None)
    fast = forced_logits(model, path)
    assert torch.equal(fast[0], reference[0])  # the prefill ran the float32 weights, bit for bit
    differences = [float((a - b).abs().max()) for a, b in zip(fast[1:], reference[1:])]
    assert max(differences) <= LOGIT_TOLERANCE, differences
    assert min(differences) > 0  # the steps really ran other weights


def test_each_linear_layer_multiplies_the_rounded_input_by_its_bfloat16_copy_during_a_step_only():
    model = fresh()
    path = dp.attach(model, native_bf16=None)
    linear = model.model.layers[0].mlp.down_proj
    x = torch.randn(1, 1, linear.in_features)
    expected = F.linear(x.bfloat16(), linear.weight.bfloat16()).float()
    with torch.inference_mode():
        with path.step():
            stepped = linear(x)
        outside = linear(x)
    assert stepped.dtype == torch.float32 and torch.equal(stepped, expected)
    assert torch.equal(outside, F.linear(x, linear.weight))
    assert len(path.modules) == sum(isinstance(m, torch.nn.Linear) for m in model.modules())
    assert model.lm_head in path.modules  # the output projection too
    assert path.copied_bytes == sum(m.weight.numel() * 2 for m in path.modules)


class Recorder:
    """Every F.linear call and every sdpa call of a run: the dtypes, the rows, and whether oneDNN was on."""

    def __init__(self, monkeypatch):
        self.linear, self.attention = [], []
        linear, sdpa = F.linear, F.scaled_dot_product_attention

        def record_linear(x, weight, bias=None):
            self.linear.append((x.shape[-2], x.dtype, weight.dtype, torch.backends.mkldnn.is_available()
                                and torch._C._get_mkldnn_enabled()))
            return linear(x, weight, bias)

        def record_sdpa(query, key, value, *args, **kwargs):
            self.attention.append((query.shape[-2], query.dtype, key.dtype, value.dtype))
            return sdpa(query, key, value, *args, **kwargs)

        monkeypatch.setattr(F, "linear", record_linear)
        monkeypatch.setattr(F, "scaled_dot_product_attention", record_sdpa)


def answer(model, decode_weights: str, max_new_tokens: int = 6):
    return generate_answer(model, WordTokenizer(), prompt_ids(PROMPT)[0].tolist(), SETTINGS,
                           GenerationOptions(max_new_tokens=max_new_tokens, stop_at_eos=False,
                                             stop_on_repeat=False, decode_weights=decode_weights))


@pytest.mark.parametrize("onednn", [False, True])
def test_the_kernel_switch_happens_around_decoding_steps_only_and_attention_stays_float32(monkeypatch, onednn):
    model = fresh()
    dp.attach(model, onednn=onednn)
    recorder = Recorder(monkeypatch)
    before = torch._C._get_mkldnn_enabled()
    result = answer(model, "bfloat16")
    assert torch._C._get_mkldnn_enabled() == before  # restored after the run
    linears = sum(isinstance(m, torch.nn.Linear) for m in model.modules())
    # the prefill: every Linear layer over the prompt's rows, the window's queries recomputed (one q_proj per layer,
    # the window's rows), the output projection at the last position only
    first_step = next(index for index, call in enumerate(recorder.linear) if call[2] == torch.bfloat16)
    prefill_calls, step_calls = recorder.linear[:first_step], recorder.linear[first_step:]
    layers = model.config.num_hidden_layers
    assert sorted(call[0] for call in prefill_calls) == sorted(
        [PROMPT] * (linears - 1) + [SETTINGS.window_size] * layers + [1])
    assert all(call[1:] == (torch.float32, torch.float32, before) for call in prefill_calls)
    # each step: every Linear layer once, one row, in bfloat16, oneDNN as the path says
    assert len(step_calls) == result.decode_steps * linears == 5 * linears
    assert all(call == (1, torch.bfloat16, torch.bfloat16, before and onednn) for call in step_calls)
    # every attention call, prefill and steps, reads float32 queries, keys and values
    assert {call[0] for call in recorder.attention} >= {1, PROMPT}
    assert all(call[1:] == (torch.float32,) * 3 for call in recorder.attention)


def test_same_runs_the_weights_as_loaded_and_removes_a_path_attached_before(monkeypatch):
    model = fresh()
    answer(model, "bfloat16")
    assert dp.attached_path(model) is not None
    recorder = Recorder(monkeypatch)
    result = answer(model, "same")
    assert dp.attached_path(model) is None and "forward" not in vars(model.lm_head)
    assert result.decode_path is None
    assert all(call[2] == torch.float32 for call in recorder.linear)


def test_the_path_says_what_ran_and_why_and_where_it_does_not_apply():
    model = fresh()
    result = answer(model, "bfloat16")
    assert result.decode_path == ("decode steps: bfloat16 Linear weights, attention and KV cache float32 "
                                  "(oneDNN on: this CPU has no native bfloat16)")  # conftest: no native bfloat16
    assert dp.onednn_for_decode("AVX512_BF16") == (
        False, "oneDNN off for one-token steps: this CPU computes bfloat16 natively (AVX512_BF16)")
    bf16 = fresh().to(torch.bfloat16)
    result = answer(bf16, "bfloat16")
    assert result.decode_path == "decode steps: the weights as loaded (the weights are already bfloat16)"
    assert dp.attached_path(bf16) is None
    with pytest.raises(ValueError, match="already bfloat16"):
        dp.attach(bf16)


def test_the_option_s_values_come_from_its_declaration_and_are_checked_before_a_model_loads():
    assert GenerationOptions().decode_weights == GenerationOptions(decode_weights=" Same").decode_weights == "same"
    assert GenerationOptions(decode_weights="BF16").decode_weights == "bfloat16"  # an alias, in any case
    assert GenerationOptions(decode_weights="INT4").decode_weights == "int4"
    with pytest.raises(InvalidValue, match="decode_weights must be same, bfloat16 or int4, got 'float16'"):
        GenerationOptions(decode_weights="float16")
    result = CliRunner().invoke(cli.app, ["ask", "-", "Who?", "--decode-weights", "int8"], input="text")
    assert_user_error(result, "--decode-weights must be same, bfloat16 or int4, got 'int8'")
    bench = CliRunner().invoke(cli.app, ["bench", "speed", "--decode-weights", "int8"])
    assert_user_error(bench, "--decode-weights must be same, bfloat16 or int4, got 'int8'")


def test_the_report_s_weights_line_and_json_say_what_the_steps_ran(monkeypatch, tmp_path):
    from tests.tiny_models import save_tiny_model_dir

    directory = save_tiny_model_dir(tmp_path / "tiny")
    document = tmp_path / "notes.txt"
    document.write_text("Winter log. Duncan Hale repaired the fog signal at the north pier. " * 4)
    base = ["ask", str(document), "Who repaired it?", "--model", str(directory), "--max-new-tokens", "4"]
    fast = CliRunner().invoke(cli.app, [*base, "--decode-weights", "bfloat16", "--json"])
    assert fast.exit_code == 0, fast.output
    import json

    report = json.loads(fast.stdout)
    assert report["dtype"] == "float32"
    assert report["decode_path"].startswith("decode steps: bfloat16 Linear weights, attention and KV cache float32")
    plain = json.loads(CliRunner().invoke(cli.app, [*base, "--json"]).stdout)
    assert plain["decode_path"] is None
    panel = CliRunner().invoke(cli.app, [*base, "--decode-weights", "bfloat16"])
    assert ("weights float32 (auto: this CPU has no native bfloat16: float32); decode steps: bfloat16 Linear weights, "
            "attention and KV cache float32 (oneDNN on: this CPU has no native bfloat16)") in panel_text(panel.stderr)


def test_where_the_path_does_not_apply_it_says_why_and_attach_refuses():
    """No CPU, no parameters, reduced precision, quantized layers: each reason in words, and the same reason in
    attach's refusal."""
    assert dp.why_not(fresh()) is None
    assert dp.why_not(torch.nn.Module()) == "the model is not on a CPU"
    assert dp.why_not(fresh().to("meta")) == "the model is not on a CPU"
    assert dp.why_not(fresh().to(torch.float16)) == "the weights are already float16"
    quantized = fresh()
    quantized.hf_quantizer = object()
    assert dp.why_not(quantized) == "the Linear layers are quantized"
    with pytest.raises(ValueError) as refused:
        dp.attach(quantized)
    assert str(refused.value) == ("bfloat16 decode weights need a float32 model on a CPU: "
                                  "the Linear layers are quantized")


def test_attach_copies_every_linear_layer_once_and_takes_a_forced_kernel_setting():
    model = fresh()
    linears = [module for module in model.modules() if isinstance(module, torch.nn.Linear)]
    path = dp.attach(model, onednn=False)
    assert path.modules == linears
    assert path.copied_bytes == sum(module.weight.numel() * 2 for module in linears)  # two bytes a weight
    assert (path.onednn, path.kernel_reason) == (False, "oneDNN off for one-token steps: asked for")
    assert dp.attach(model) is path and dp.attached_path(model) is path  # once: the second call finds it
    on = dp.attach(fresh(), native_bf16="AVX512_BF16", onednn=True)
    assert (on.onednn, on.kernel_reason) == (True, "oneDNN on for one-token steps: asked for")
    native = dp.attach(fresh(), native_bf16="AMX_BF16")
    assert (native.onednn, native.kernel_reason) == dp.onednn_for_decode("AMX_BF16")
    dp.detach(model)
    assert dp.attached_path(model) is None and all("forward" not in vars(module) for module in linears)


def test_attach_asks_the_cpu_when_not_told(monkeypatch):
    import snapkv_cli.models.cpu_features as cpu_features

    assert dp.onednn_for_decode(None) == (True, "oneDNN on: this CPU has no native bfloat16")
    monkeypatch.setattr(cpu_features, "native_bf16_feature", lambda: "AVX512_BF16")
    path = dp.attach(fresh())
    assert (path.onednn, path.kernel_reason) == dp.onednn_for_decode("AVX512_BF16")


# --decode-weights int4


def q4_rounded(weight: torch.Tensor) -> torch.Tensor:
    """``weight`` rounded to 4-bit blocks of 32 (16 evenly spaced values from each block's least to its largest), as
    a Q4_1 GGUF's layers are."""
    rows, columns = weight.shape
    blocks = weight.detach().view(rows, columns // 32, 32)
    low, high = blocks.amin(-1, keepdim=True), blocks.amax(-1, keepdim=True)
    scale = (high - low) / 15
    return (((blocks - low) / scale).round() * scale + low).view(rows, columns)


def four_bit_model(family: str = "llama", head_too: bool = False) -> torch.nn.Module:
    """A tiny model whose Linear layers are 4-bit blocks, all but the output projection (as the default model's)
    unless ``head_too``; the biases a family has (Qwen 2's query, key and value) get values, not transformers' zeros,
    so that a step that dropped one would show."""
    model = fresh(family)
    head = model.get_output_embeddings()
    generator = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.Linear) and (module is not head or head_too):
                module.weight.copy_(q4_rounded(module.weight))
            if isinstance(module, torch.nn.Linear) and module.bias is not None:
                module.bias.copy_(torch.randn(module.bias.shape, generator=generator) * 0.5)
    return model


def linear_layers(model) -> list[torch.nn.Linear]:
    return [module for module in model.modules() if isinstance(module, torch.nn.Linear)]


@pytest.mark.parametrize("family", ["llama", "qwen2", "qwen3", "gemma3_text", "phi3"])
def test_int4_steps_match_float32_within_the_tolerance_and_the_prefill_is_unchanged(family):
    model = four_bit_model(family)
    reference = forced_logits(model, None)
    path = dp.attach(model, native_bf16=None, weights="int4")
    assert path.four_bit_layers == len(linear_layers(model)) - 1  # the output projection keeps a bfloat16 copy
    fast = forced_logits(model, path)
    assert torch.equal(fast[0], reference[0])
    differences = [float((a - b).abs().max()) for a, b in zip(fast[1:], reference[1:])]
    assert max(differences) <= LOGIT_TOLERANCE, differences
    assert min(differences) > 0


def test_int4_steps_multiply_each_pack_once_and_the_output_projection_in_bfloat16(monkeypatch):
    from snapkv_cli.generation.four_bit import FourBitCodes

    model = four_bit_model()
    widths = []
    product = FourBitCodes.product

    def record(codes, x):
        out = product(codes, x)
        widths.append(out.shape[-1])
        return out

    monkeypatch.setattr(FourBitCodes, "product", record)
    recorder = Recorder(monkeypatch)
    result = answer(model, "int4")
    config = model.config
    head_dim = config.hidden_size // config.num_attention_heads
    qkv = (config.num_attention_heads + 2 * config.num_key_value_heads) * head_dim
    # per layer and step: q, k and v as one product, o, gate and up as one product, down
    per_step = [qkv, config.hidden_size, 2 * config.intermediate_size, config.hidden_size] * config.num_hidden_layers
    assert widths == per_step * result.decode_steps
    steps = [call for call in recorder.linear if call[2] == torch.bfloat16]
    assert steps == [(1, torch.bfloat16, torch.bfloat16, torch._C._get_mkldnn_enabled())] * result.decode_steps
    bf16_bytes = model.lm_head.weight.numel() * 2
    four_bit_bytes = sum(m.weight.numel() // 2 + m.weight.numel() // 32 * 4 for m in linear_layers(model)
                         if m is not model.lm_head)
    path = dp.attached_path(model)
    assert path.copied_bytes == four_bit_bytes + bf16_bytes
    assert result.decode_path == (
        f"decode steps: int4 codes for {len(linear_layers(model)) - 1} of {len(linear_layers(model))} Linear layers "
        "(their weights are 4-bit blocks), bfloat16 for the rest, attention and KV cache float32 "
        "(oneDNN on: this CPU has no native bfloat16)")


def test_a_pack_s_layer_called_on_another_input_computes_its_own_part():
    from snapkv_cli.generation.four_bit import four_bit_codes

    model = four_bit_model()
    path = dp.attach(model, weights="int4")
    attention = model.model.layers[0].self_attn
    x, y = torch.randn(1, 1, 96), torch.randn(1, 1, 96)
    with torch.inference_mode(), path.step():
        q, k_same, k_other = attention.q_proj(x), attention.k_proj(x), attention.k_proj(y)
        v_other = attention.v_proj(y)
    for out, module, given_input in ((q, attention.q_proj, x), (k_same, attention.k_proj, x),
                                     (k_other, attention.k_proj, y), (v_other, attention.v_proj, y)):
        alone = four_bit_codes(module.weight).product(given_input)
        assert torch.allclose(out, alone, rtol=1e-2, atol=1e-3), module
    assert not torch.allclose(k_same, k_other)


def test_int4_and_bfloat16_paths_replace_each_other_and_same_removes_them():
    model = four_bit_model()
    answer(model, "bfloat16")
    bf16 = dp.attached_path(model)
    assert bf16.weights == "bfloat16" and bf16.four_bit_layers == 0
    answer(model, "int4")
    assert bf16.modules == []  # the bfloat16 path was detached, its copies let go
    assert dp.attached_path(model).weights == "int4" and dp.attached_path(model).four_bit_layers > 0
    assert answer(model, "same").decode_path is None
    assert dp.attached_path(model) is None and all("forward" not in vars(m) for m in linear_layers(model))


def test_int4_on_weights_that_are_not_four_bit_runs_bfloat16_copies_and_says_so():
    result = answer(fresh(), "int4")
    assert result.decode_path == ("decode steps: bfloat16 Linear weights (int4: no layer's weights are 4-bit blocks), "
                                  "attention and KV cache float32 (oneDNN on: this CPU has no native bfloat16)")


def test_a_biased_layer_adds_its_bias_on_either_path_and_a_pack_of_mixed_biases_is_not_packed(monkeypatch):
    from snapkv_cli.generation.four_bit import FourBitCodes

    parent = torch.nn.Module()
    for name, bias in (("q_proj", True), ("k_proj", False), ("v_proj", False), ("gate_proj", True), ("up_proj", True)):
        layer = torch.nn.Linear(64, 32, bias=bias)
        with torch.no_grad():
            layer.weight.copy_(q4_rounded(layer.weight))
            if bias:
                layer.bias.normal_(0, 1)
        setattr(parent, name, layer)
    x = torch.randn(1, 1, 64)
    expected = {name: F.linear(x, layer.weight, layer.bias) for name, layer in parent.named_children()}
    widths = []
    product = FourBitCodes.product
    monkeypatch.setattr(FourBitCodes, "product", lambda codes, x: widths.append(codes.packed.shape[0]) or
                        product(codes, x))
    for weights in ("bfloat16", "int4"):
        path = dp.attach(parent, weights=weights)
        assert path.four_bit_layers == (5 if weights == "int4" else 0)
        with torch.inference_mode(), path.step():
            for name, layer in parent.named_children():
                assert torch.allclose(layer(x), expected[name], rtol=0.02, atol=0.05), (weights, name)
    # q, k and v (one bias, two without) each multiply their own codes; gate and up share one product
    assert widths == [32, 32, 32, 64]


def test_a_model_whose_every_layer_is_four_bit_says_so():
    model = four_bit_model(head_too=True)
    result = answer(model, "int4")
    layers = len(linear_layers(model))
    assert result.decode_path == (f"decode steps: int4 codes for {layers} of {layers} Linear layers (their weights "
                                  "are 4-bit blocks), attention and KV cache float32 (oneDNN on: this CPU has no "
                                  "native bfloat16)")
