"""The llama.cpp baseline is what its label says: llama.cpp alone, given the prompt snapkv-cli builds."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tools.bench.peers import llamacpp_bench as bench
from tools.bench.peers import llamacpp_runner as runner  # functions only: llama.cpp is imported in main()

ROOT = Path(__file__).resolve().parent.parent
RUNNER = ROOT / "tools" / "bench" / "peers" / "llamacpp_runner.py"


def test_the_runner_refuses_to_run_where_snapkv_cli_is_importable():
    # this interpreter is the project's: snapkv_cli is importable, so the runner must not start
    process = subprocess.run([sys.executable, str(RUNNER)], input="{}", capture_output=True, text=True,
                             timeout=60, cwd=str(ROOT))
    assert process.returncode != 0
    assert "refusing to run: snapkv_cli is importable" in process.stderr


class _OldLlama:
    def __init__(self, model_path, flash_attn=False, n_threads=None):
        pass


class _NewLlama:
    def __init__(self, model_path, flash_attn_type=-1, n_threads=None):
        pass


@pytest.mark.parametrize(("llama_class", "expected"), [(_OldLlama, {"flash_attn": True}),
                                                       (_NewLlama, {"flash_attn_type": 1})])
def test_flash_attention_is_asked_for_in_the_spelling_of_the_installed_release(llama_class, expected):
    assert runner.flash_attention_argument(llama_class) == expected


def test_the_documents_give_llama_cpp_the_prompt_snapkv_ask_builds(tokenizer, template, tmp_path):
    from snapkv_cli.answering.documents import load_document
    from snapkv_cli.answering.prompting import build_prompt

    documents = bench.make_documents(tokenizer, template, [600, 1500], tmp_path, completion=False)
    text, _ = bench.reference_text()
    for length, (path, ids) in documents.items():
        assert abs(len(ids) - length) <= 8
        # the prompt the command builds from that file, read back independently of make_documents
        prompt = build_prompt(tokenizer, load_document(str(path)), bench.QUESTION, template)
        assert list(prompt.input_ids) == ids
        # the document is the start of the shipped Language Reference, not made up
        assert text.startswith(path.read_text(encoding="utf-8")[:200])


def test_paired_ratios_compare_the_same_round():
    def run(tool, round_index, prefill, decode):
        return {"tool": tool, "round": round_index, "length": 2048, "threads": 1, "ttft_s": 1.0, "wall_s": 2.0,
                "peak_rss_mb": 100.0, "prefill_tokens_per_s": prefill, "decode_tokens_per_s": decode, "answer": "a"}

    runs = [run("snapkv-cli", 0, 300.0, 20.0), run("llama.cpp", 0, 100.0, 10.0),
            run("llama.cpp", 1, 50.0, 40.0), run("snapkv-cli", 1, 200.0, 20.0)]
    (row,) = bench.summarize(runs)
    assert row["snapkv_over_llamacpp"]["prefill_tokens_per_s"]["min"] == 3.0
    assert row["snapkv_over_llamacpp"]["prefill_tokens_per_s"]["max"] == 4.0
    assert row["snapkv_over_llamacpp"]["decode_tokens_per_s"]["min"] == 0.5
    assert row["snapkv_over_llamacpp"]["decode_tokens_per_s"]["max"] == 2.0


def test_a_decode_weights_variant_is_paired_with_llama_cpp_and_with_the_weights_as_loaded_in_its_round():
    def run(tool, round_index, prefill, decode):
        return {"tool": tool, "round": round_index, "length": 4096, "threads": 1, "ttft_s": 1.0, "wall_s": 2.0,
                "peak_rss_mb": 100.0, "prefill_tokens_per_s": prefill, "decode_tokens_per_s": decode, "answer": "a"}

    fast = bench.snapkv_tool("bfloat16")
    runs = [run("snapkv-cli", 0, 300.0, 20.0), run(fast, 0, 300.0, 30.0), run("llama.cpp", 0, 100.0, 10.0),
            run("llama.cpp", 1, 50.0, 40.0), run(fast, 1, 200.0, 60.0), run("snapkv-cli", 1, 200.0, 20.0)]
    (row,) = bench.summarize(runs)
    assert fast == "snapkv-cli --decode-weights bfloat16"
    assert row[f"{fast}_over_llamacpp"]["decode_tokens_per_s"] == {"median": 2.25, "min": 1.5, "max": 3.0, "n": 2}
    assert row[f"{fast}_over_snapkv-cli"]["decode_tokens_per_s"] == {"median": 2.25, "min": 1.5, "max": 3.0, "n": 2}
    assert row["snapkv_over_llamacpp"]["decode_tokens_per_s"]["min"] == 0.5
    lines = bench.markdown([row], "smollm2").splitlines()
    assert [line.split(" | ")[0] for line in lines[2:]] == ["| 4,096", "| 4,096, --decode-weights bfloat16"]
    assert "| 45.0 (30.0-60.0) | 25.0 (10.0-40.0) | 2.25 (1.50-3.00)x |" in lines[3]


@pytest.mark.parametrize(("system_info", "expected"), [
    ("CPU : SSE3 = 1 | SSSE3 = 1 | AVX = 1 | AVX2 = 1 | F16C = 1 | FMA = 1 | BMI2 = 1 | LLAMAFILE = 1 | OPENMP = 1 |",
     ["AVX2"]),
    ("CPU : SSE3 = 1 | AVX = 1 | AVX_VNNI = 1 | AVX2 = 1 | FMA = 1 | AVX512 = 1 | AVX512_VBMI = 1 | "
     "AVX512_VNNI = 1 | AVX512_BF16 = 1 | REPACK = 1 |", ["AVX2", "AVX512", "AVX512_VNNI", "AVX512_BF16"]),
    ("CPU : SSE3 = 1 | AVX2 = 0 | AVX512 = 0 |", []),
])
def test_the_table_names_the_vector_extensions_the_llama_cpp_build_used(system_info, expected):
    # two system-info lines as llama-cpp-python 0.3.36 printed them on an AVX2-only host and an AVX-512 one
    assert bench.vector_extensions(system_info) == expected


def test_a_run_is_checked_against_its_label_by_the_decode_steps_its_report_names():
    from tools.bench.peers.llamacpp_bench import ran_as_labelled

    bf16 = "decode steps: bfloat16 Linear weights, attention and KV cache float32 (oneDNN on: ...)"
    assert ran_as_labelled("same", None)
    assert not ran_as_labelled("same", bf16)  # labelled "snapkv-cli", ran bfloat16 steps
    assert ran_as_labelled("bfloat16", bf16)
    assert not ran_as_labelled("bfloat16", None)
    assert not ran_as_labelled("bfloat16", "decode steps: the weights as loaded (the model is not on a CPU)")
    int4 = ("decode steps: int4 codes for 210 of 211 Linear layers (their weights are 4-bit blocks), bfloat16 for the "
            "rest, attention and KV cache float32 (oneDNN on: ...)")
    assert ran_as_labelled("int4", int4)
    assert not ran_as_labelled("bfloat16", int4) and not ran_as_labelled("int4", bf16)
    # int4 asked for, but no layer had 4-bit weights: every step ran bfloat16 copies, not what "int4" says
    assert not ran_as_labelled("int4", "decode steps: bfloat16 Linear weights (int4: no layer's weights are 4-bit "
                                       "blocks), attention and KV cache float32 (oneDNN on: ...)")
