"""Run llama.cpp (through llama-cpp-python) on one prompt given as token ids, in llama.cpp's own virtual environment.

Started by ``tools/bench/peers/llamacpp_bench.py`` as
``.venv-llamacpp/bin/python tools/bench/peers/llamacpp_runner.py`` (by path, not as a module of this checkout), once
per measurement, so that its peak memory is its own. It reads one JSON request on stdin and writes one JSON answer
on stdout. Nothing of snapkv-cli may be importable here: the runner refuses to start if it is, and the answer
records that it was not loaded, with llama-cpp-python's version and llama.cpp's system info (the CPU features the
build uses).

A request: ``{"gguf": PATH, "input_ids": [...], "threads": T, "max_new_tokens": N, "stop_ids": [...]}``. The
prompt is evaluated from the given ids (no tokenizer of llama.cpp's in the loop, so both tools read the same
tokens), flash attention on, batches of 512, and decoded greedily (temperature 0) until a stop id or N tokens.
Times: ``ttft_s`` from the start of the prompt's evaluation to the first sampled token; ``decode_s`` from there to
the last token (each step evaluates the previous token and samples the next), so decode speed is
``decode_steps / decode_s``; ``load_s`` the model's load. ``peak_rss_mb`` is this process's peak resident memory.
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import resource
import sys
import time

PACKAGE = "snapkv_cli"


def refuse_if_snapkv_importable() -> None:
    if importlib.util.find_spec(PACKAGE) is not None or PACKAGE in sys.modules:
        sys.exit(f"llamacpp_runner: refusing to run: {PACKAGE} is importable here, so the baseline would not be "
                 "llama.cpp alone; run it with the llama.cpp virtual environment (tools/bench/peers/llamacpp_venv.sh)")


def flash_attention_argument(llama_class) -> dict:
    """llama-cpp-python spells "flash attention on" differently across releases; ask its signature."""
    parameters = inspect.signature(llama_class.__init__).parameters
    if "flash_attn_type" in parameters:
        return {"flash_attn_type": 1}  # LLAMA_FLASH_ATTN_TYPE_ENABLED
    return {"flash_attn": True}


def main() -> int:
    refuse_if_snapkv_importable()
    from importlib.metadata import version

    import llama_cpp

    request = json.loads(sys.stdin.read())
    ids = [int(token) for token in request["input_ids"]]
    threads = int(request["threads"])
    max_new = int(request["max_new_tokens"])
    stop_ids = {int(token) for token in request["stop_ids"]}
    started = time.perf_counter()
    llm = llama_cpp.Llama(model_path=request["gguf"], n_ctx=len(ids) + max_new + 16, n_batch=512, n_ubatch=512,
                          n_threads=threads, n_threads_batch=threads, verbose=False, seed=0,
                          **flash_attention_argument(llama_cpp.Llama))
    load_s = time.perf_counter() - started

    generated: list[int] = []
    first = last = None
    steps = 0  # tokens sampled after the first, each after one evaluation
    begin = time.perf_counter()
    for token in llm.generate(ids, temp=0.0, top_k=1, top_p=1.0, min_p=0.0, repeat_penalty=1.0, reset=True):
        now = time.perf_counter()
        if first is None:
            first = now
        else:
            steps += 1
        last = now
        if token in stop_ids:
            break
        generated.append(int(token))
        if len(generated) >= max_new:
            break
    text = llm.detokenize(generated).decode("utf-8", errors="replace")
    answer = {
        "tool": "llama.cpp",
        "llama_cpp_python": version("llama-cpp-python"),
        "system_info": llama_cpp.llama_print_system_info().decode().strip(),
        "snapkv_cli_loaded": PACKAGE in sys.modules,
        "threads": threads,
        "prompt_tokens": len(ids),
        "load_s": round(load_s, 4),
        "ttft_s": round(first - begin, 4),
        "decode_s": round(last - first, 4),
        "decode_steps": steps,
        "generated_tokens": len(generated),
        "generated_ids": generated,
        "answer": text,
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }
    print(json.dumps(answer))
    return 0


if __name__ == "__main__":
    sys.exit(main())
