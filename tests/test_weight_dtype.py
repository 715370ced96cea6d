"""The weights' dtype and quantization: what ``--dtype auto`` picks on a CPU (and why, in the report), selection math
in float32 under bfloat16 weights, the bfloat16 copy of a converted model saved once, ``--quantize int8``."""

from __future__ import annotations

import copy
import importlib.util
import json
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from typer.testing import CliRunner

import snapkv_cli.cli as cli
from snapkv_cli import defaults
from snapkv_cli.engine import CompressionSettings, SnapKVCache, attached
from snapkv_cli.engine import cache as cache_module
from snapkv_cli.engine.families import attention_scaling
from snapkv_cli.generation import prefill
from snapkv_cli.models import catalog, conversion, cpu_features
from snapkv_cli.models.cpu_features import cpuinfo_flags, native_bf16_feature  # the real one (conftest pins it)
from snapkv_cli.models.loader import choose_dtype, load_model
from tests.helpers import assert_user_error, panel_text
from tests.tiny_models import prompt_ids, tiny_model

runner = CliRunner()
CPU = torch.device("cpu")
QUESTION = "Who repaired the fog signal?"
NOTES = ("Winter log. On 3 March Duncan Hale repaired the fog signal at the north pier; the lamp was relit at "
         "dusk.\n") * 8


def bf16_cpu(monkeypatch, feature: str | None = "AVX512_BF16", *, auto_bfloat16: bool = True) -> None:
    """A CPU with (or without) native bfloat16, and ``auto`` allowed to take it (the declared default may say no:
    ``test_the_cpu_default_is_one_declared_value`` covers both values)."""
    monkeypatch.setattr(cpu_features, "native_bf16_feature", lambda *args, **kwargs: feature)
    monkeypatch.setattr(defaults, "CPU_AUTO_BFLOAT16", auto_bfloat16)


# --------------------------------------------------------------------------- detection and the auto choice

@pytest.mark.parametrize(("machine", "flags", "expected"), [
    ("x86_64", {"avx2", "avx512f", "avx512_bf16", "avx512_vnni"}, "AVX512_BF16"),
    ("x86_64", {"avx2", "amx_tile", "amx_bf16"}, "AMX"),
    ("x86_64", {"avx2", "avx512f", "avx512_vnni"}, None),  # VNNI is int8, not bfloat16
    ("aarch64", {"fp", "asimd", "sve", "bf16"}, "bf16"),
    ("aarch64", {"fp", "asimd", "sve"}, None),
    ("riscv64", {"bf16"}, None),  # an architecture it does not know: no guess
])
def test_the_bf16_feature_is_read_from_the_cpu_flags(machine, flags, expected):
    assert native_bf16_feature(machine, flags) == expected


def test_torch_checks_come_first_and_proc_cpuinfo_is_the_fallback(monkeypatch, tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512_bf16\n\nprocessor\t: 1\nflags\t\t: fpu\n")
    assert cpuinfo_flags(info) == {"fpu", "sse2", "avx2", "avx512_bf16"}
    assert cpuinfo_flags(tmp_path / "missing") == set()
    monkeypatch.setattr(cpu_features, "CPUINFO", info)
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: True)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False)
    info.write_text("flags\t\t: fpu sse2 avx2\n")
    assert native_bf16_feature("x86_64") == "AVX512_BF16"  # torch's answer, though the flags say no
    info.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512_bf16\n\nprocessor\t: 1\nflags\t\t: fpu\n")
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: True)
    assert native_bf16_feature("x86_64") == "AMX"  # torch's answer, before the flags
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False)
    assert native_bf16_feature("x86_64") == "AVX512_BF16"  # torch says no: the flags still may say yes
    monkeypatch.delattr(torch.cpu, "_is_avx512_bf16_supported")
    monkeypatch.delattr(torch.cpu, "_is_amx_tile_supported")
    assert native_bf16_feature("x86_64") == "AVX512_BF16"  # a torch without the checks: the flags
    info.write_text("flags\t\t: fpu sse2 avx2\n")
    assert native_bf16_feature("x86_64") is None


def test_arm_features_are_read_from_proc_cpuinfo_whatever_else_it_holds(monkeypatch, tmp_path):
    """On aarch64 the kernel lists the CPU's features on a ``Features`` line; a line in another encoding (a vendor
    name in Latin-1, say) does not stop the reading."""
    info = tmp_path / "cpuinfo"
    info.write_bytes(b"processor\t: 0\nCPU implementer\t: 0x41 \xe9\xff\nFeatures\t: fp asimd sve bf16 i8mm\n")
    monkeypatch.setattr(cpu_features, "CPUINFO", info)
    assert cpuinfo_flags() == {"fp", "asimd", "sve", "bf16", "i8mm"}
    assert native_bf16_feature("aarch64") == "bf16"
    info.write_bytes(b"processor\t: 0\nFeatures\t: fp asimd sve\n")
    assert native_bf16_feature("aarch64") is None


def test_auto_picks_bfloat16_on_a_cpu_that_computes_it_and_float32_otherwise(monkeypatch):
    bf16_cpu(monkeypatch, "AVX512_BF16")
    assert choose_dtype("auto", CPU) == (torch.bfloat16, "auto: this CPU computes bfloat16 natively (AVX512_BF16)")
    bf16_cpu(monkeypatch, None)
    assert choose_dtype("auto", CPU) == (torch.float32, "auto: this CPU has no native bfloat16: float32")
    assert choose_dtype("bf16", CPU) == (torch.bfloat16, "asked for")  # an explicit dtype is not second-guessed


def test_the_cpu_default_is_one_declared_value(monkeypatch):
    bf16_cpu(monkeypatch, "AMX")
    monkeypatch.setattr(defaults, "CPU_AUTO_BFLOAT16", False)
    dtype, reason = choose_dtype("auto", CPU)
    assert dtype == torch.float32 and reason.startswith("auto: float32") and "AMX" in reason
    monkeypatch.setattr(defaults, "CPU_AUTO_BFLOAT16", True)
    assert choose_dtype("auto", CPU)[0] == torch.bfloat16


def test_the_loaded_model_runs_in_the_auto_dtype_read_back_from_it(monkeypatch, tiny_model_path):
    bf16_cpu(monkeypatch, "AVX512_BF16")
    loaded = load_model(tiny_model_path, device="cpu")
    assert {parameter.dtype for parameter in loaded.model.parameters()} == {torch.bfloat16}
    assert loaded.dtype == torch.bfloat16 and loaded.dtype_reason.startswith("auto: this CPU computes bfloat16")
    bf16_cpu(monkeypatch, None)
    loaded = load_model(tiny_model_path, device="cpu")
    assert {parameter.dtype for parameter in loaded.model.parameters()} == {torch.float32}
    assert loaded.dtype_reason == "auto: this CPU has no native bfloat16: float32"


# --------------------------------------------------------------------------- the report

@pytest.mark.parametrize(("feature", "arguments", "dtype", "reason"), [
    ("AVX512_BF16", [], "bfloat16", "auto: this CPU computes bfloat16 natively (AVX512_BF16)"),
    (None, [], "float32", "auto: this CPU has no native bfloat16: float32"),
    ("AVX512_BF16", ["--dtype", "float32"], "float32", "asked for"),
])
def test_the_report_names_the_dtype_that_ran_and_why(monkeypatch, notes, tiny_model_path, feature, arguments, dtype,
                                                      reason):
    bf16_cpu(monkeypatch, feature)
    args = ["ask", notes, QUESTION, "--model", tiny_model_path, "--max-new-tokens", "2", *arguments]
    shown = runner.invoke(cli.app, args)
    assert shown.exit_code == 0, (shown.stderr, shown.exception)
    assert f"weights {dtype} ({reason})" in panel_text(shown.stderr)
    result = runner.invoke(cli.app, [*args, "--json", "--quiet"])
    assert result.exit_code == 0 and result.stderr == ""
    report = json.loads(result.stdout)
    assert (report["dtype"], report["dtype_reason"], report["quantization"]) == (dtype, reason, None)


# --------------------------------------------------------------------------- selection math stays float32

def test_selection_scores_are_float32_from_bf16_keys_and_queries(monkeypatch):
    """A bfloat16 model's scores are computed in float32 from its bfloat16 keys and queries: they match an
    independent float64 computation from the same keys and queries, which the same math done in bfloat16 misses."""
    model = copy.deepcopy(tiny_model("llama")).to(torch.bfloat16)
    settings = CompressionSettings(method="snapkv", window_size=8, max_capacity_prompt=24, kernel_size=1,
                                   gqa_aggregation="mean")
    seen, real = [], cache_module.compress_layer

    def spy(policy, layer, layer_idx, module, keys, values, pending, word_ids):
        raw = []
        scores = policy.scores
        policy.scores = lambda context: raw.append(scores(context)) or raw[-1]
        record, mask = real(policy, layer, layer_idx, module, keys, values, pending, word_ids)
        del policy.scores
        seen.append((keys.clone(), pending.window_queries.clone(), pending.window_positions.clone(),
                     attention_scaling(module), raw[0], record.scores))
        return record, mask

    monkeypatch.setattr(cache_module, "compress_layer", spy)
    cache = SnapKVCache(settings=settings)
    with attached(model), torch.inference_mode():
        prefill(model, prompt_ids(72)[0].tolist(), cache)
    assert len(seen) == model.config.num_hidden_layers
    for keys, queries, positions, scaling, raw, recorded in seen:
        assert keys.dtype == queries.dtype == torch.bfloat16
        assert raw.dtype == recorded.dtype == torch.float32
        expected = window_votes(queries.double(), keys.double(), positions, scaling)
        torch.testing.assert_close(recorded.double(), expected, rtol=1e-5, atol=1e-6)
        in_bf16 = window_votes(queries, keys, positions, scaling).double()
        assert (in_bf16 - expected).abs().max() > 1e-3  # the test can tell the two apart


def window_votes(queries: torch.Tensor, keys: torch.Tensor, positions: torch.Tensor, scaling: float) -> torch.Tensor:
    """SnapKV's votes without pooling, by hand in the inputs' dtype: (1, kv_heads, prompt_length)."""
    query_heads, kv_heads, length = queries.shape[1], keys.shape[1], keys.shape[2]
    group = query_heads // kv_heads
    rows = []
    for kv_head in range(kv_heads):
        members = []
        for member in range(group):
            logits = queries[0, kv_head * group + member] @ keys[0, kv_head].T * scaling
            future = torch.arange(length)[None, :] > positions[:, None]
            members.append(torch.softmax(logits.masked_fill(future, float("-inf")), dim=-1).sum(dim=0))
        rows.append(torch.stack(members).mean(dim=0))
    return torch.stack(rows)[None]


# --------------------------------------------------------------------------- the bfloat16 copy, saved once

@pytest.fixture
def converted(tmp_path, tiny_model_path) -> Path:
    """A converted model directory as conversion.build_once leaves it (float32 weights, tokenizer, marker)."""
    import shutil

    target = tmp_path / "models" / "converted"
    shutil.copytree(tiny_model_path, target)
    (target / conversion.MARKER_NAME).write_text(json.dumps({"gguf_sha256": "a" * 64, "dtype": "float32"}))
    return target


def weight_dtypes(directory: Path) -> set[str]:
    with safe_open(str(next(directory.glob("*.safetensors"))), framework="pt") as weights:
        return {str(weights.get_slice(name).get_dtype()) for name in weights.keys()}  # noqa: SIM118


def test_the_bf16_copy_is_built_once_and_reused(converted, monkeypatch):
    saves, real = [], conversion.save_in_dtype
    monkeypatch.setattr(conversion, "save_in_dtype", lambda *args: saves.append(args) or real(*args))
    copy_dir = conversion.dtype_copy(converted, "bfloat16")
    assert copy_dir == converted / "bfloat16" and len(saves) == 1
    assert weight_dtypes(copy_dir) == {"BF16"} and weight_dtypes(converted) == {"F32"}
    marker = copy_dir / conversion.MARKER_NAME
    assert conversion.read_marker(copy_dir)["dtype"] == "bfloat16"
    stamp = marker.stat().st_mtime_ns
    assert conversion.dtype_copy(converted, "bfloat16") == copy_dir
    assert len(saves) == 1 and marker.stat().st_mtime_ns == stamp  # reused, not rebuilt
    assert conversion.dtype_copy(converted, "float32") == converted  # its own dtype: no copy
    marker.unlink()  # a copy without its marker is incomplete: rebuilt
    conversion.dtype_copy(converted, "bfloat16")
    assert len(saves) == 2 and marker.exists()
    (converted / conversion.MARKER_NAME).write_text(json.dumps({"gguf_sha256": "b" * 64}))  # another conversion
    conversion.dtype_copy(converted, "bfloat16")
    assert len(saves) == 3


def test_a_bf16_run_of_a_converted_model_loads_the_saved_copy(converted, monkeypatch):
    monkeypatch.setattr(catalog.CatalogEntry, "ensure", lambda self, progress=None, notice=None: converted)
    first = load_model(device="cpu", dtype="bf16")
    assert Path(first.source) == converted / "bfloat16" and first.dtype == torch.bfloat16
    stamp = (converted / "bfloat16" / conversion.MARKER_NAME).stat().st_mtime_ns
    again = load_model(device="cpu", dtype="bf16")
    assert again.source == first.source
    assert (converted / "bfloat16" / conversion.MARKER_NAME).stat().st_mtime_ns == stamp
    assert Path(load_model(device="cpu", dtype="float32").source) == converted


# --------------------------------------------------------------------------- --quantize int8

def test_int8_weights_reach_the_model(tiny_model_path):
    loaded = load_model(tiny_model_path, device="cpu", dtype="float32", quantize="int8")
    assert loaded.quantization == "int8"
    layers = loaded.model.model.layers
    linears = [module for module in layers.modules() if isinstance(module, torch.nn.Linear)]
    assert linears and all(module.weight.qdata.dtype == torch.int8 for module in linears)
    assert not hasattr(loaded.model.lm_head.weight, "qdata")  # tied to the embeddings: left as it is
    plain = load_model(tiny_model_path, device="cpu", dtype="float32")
    assert plain.quantization is None
    ids = prompt_ids(16)
    with torch.no_grad():
        quantized, reference = loaded.model(ids).logits, plain.model(ids).logits
    assert not torch.equal(quantized, reference)  # int8 rounding shows
    torch.testing.assert_close(quantized, reference, rtol=0.1, atol=0.1)


def test_quantize_reaches_the_report(notes, tiny_model_path):
    args = ["ask", notes, QUESTION, "--model", tiny_model_path, "--max-new-tokens", "2", "--quantize", "int8"]
    result = runner.invoke(cli.app, [*args, "--json", "--quiet"])
    assert result.exit_code == 0, (result.stderr, result.exception)
    assert json.loads(result.stdout)["quantization"] == "int8"
    shown = runner.invoke(cli.app, args)
    assert "weights float32, int8 Linear layers (auto: this CPU has no native bfloat16: float32)" in panel_text(
        shown.stderr)


@pytest.mark.parametrize("command", [["ask", "NOTES", "q"], ["inspect", "NOTES", "q"], ["chat", "NOTES"],
                                     ["bench", "speed"]])
def test_a_missing_torchao_is_one_error_line(monkeypatch, notes, command):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torchao" else real(name, *a))
    args = [notes if part == "NOTES" else part for part in command]
    result = runner.invoke(cli.app, [*args, "--quantize", "int8"])
    assert_user_error(result, "int8 weights need torchao", "pip install 'snapkv-cli[int8]'")


def test_an_unknown_quantization_is_one_error_line(notes):
    result = runner.invoke(cli.app, ["ask", notes, QUESTION, "--quantize", "int4"])
    assert_user_error(result, "unknown quantization 'int4'", "none or int8")


def test_loading_a_model_where_torchao_is_installed_prints_none_of_its_warnings(tiny_model_path):
    # transformers imports torchao with every model where it is installed; its import warnings (GPU kernels a
    # CPU-only torch cannot load) must not reach a user's stderr. A fresh interpreter: torchao warns once, at import.
    import subprocess
    import sys

    pytest.importorskip("torchao")  # the int8 extra: in the test extra, so CI has it
    code = ("from snapkv_cli.models.loader import load_model; "
            f"load_model({tiny_model_path!r}, device='cpu'); import torchao")
    process = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert process.returncode == 0, process.stderr
    assert "torchao" not in process.stderr and "Failed to load" not in process.stderr, process.stderr
