"""Run NVIDIA kvpress's presses on given prompts (token ids), in kvpress's own virtual environment.

Started by ``tools/bench/peers/peers_bench.py`` as
``.venv-kvpress/bin/python tools/bench/peers/kvpress_runner.py MODEL_DIR`` (by path: not as a module of this checkout).
It reads one JSON request per line on stdin and answers one JSON line per request on stdout; the driver scores
the answers. Nothing of snapkv-cli may be importable here: the runner refuses to start if it is, and every answer
records whether it was loaded, with kvpress's and transformers' versions and the press's class and parameters.

A request: ``{"input_ids": [...], "prefix_length": P, "budgets": [256, 1024], "max_new_tokens": 48,
"stop_ids": [...], "labels": [...]}``; ``labels`` (any of :data:`LABELS`, all when absent) are the rows to run. For
each budget (tokens kept per layer and KV head, window included, as snapkv-cli counts):

- ``kvpress-default``: ``SnapKVPress()`` with its defaults (window 64, kernel 5, average pooling) used as kvpress's
  pipeline uses a press: the context (the first P tokens, everything before the question's line) is prefilled
  under the press and compressed without the question; the question is then prefilled on the compressed cache at
  its original positions. The context keeps ``budget - question tokens``, so the cache holds ``budget`` prompt
  tokens after the question, as snapkv-cli's does.
- ``kvpress-ours``: ``SnapKVPress(window_size=32, kernel_size=15)``, snapkv-cli's window and kernel (kvpress only
  pools by average; snapkv-cli's default is max), over the whole prompt in one forward, so the question is in the
  observation window as in snapkv-cli.
- ``kvpress-nearest``: ``CriticalKVPress(SnapKVPress(window_size=32, kernel_size=15))`` over the whole prompt, as
  ``kvpress-ours``: kvpress's press nearest to snapkv-cli's default method (:data:`NEAREST_TO`), which kvpress does
  not have; :data:`NEAREST_NOTE` says how they differ.
- ``transformers``: no press (plain transformers from this environment), once per prompt.

A budget becomes kvpress's ``compression_ratio`` per prompt: kvpress keeps ``int(n * (1 - ratio))`` of ``n``
tokens, so ``ratio = 1 - (kept + 0.5) / n`` keeps exactly ``kept``. Greedy decoding, positions continuing from
the prompt's length, stopping at the given stop ids, as kvpress's pipeline decodes.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import time

PACKAGE = "snapkv_cli"
OUR_WINDOW, OUR_KERNEL = 32, 15
LABELS = ("transformers", "kvpress-default", "kvpress-ours", "kvpress-nearest")
NEAREST_TO = "defensivekv"  # the snapkv-cli method kvpress-nearest stands in for (peers_bench checks the default)
NEAREST_NOTE = ("kvpress's nearest press to the default, not the same method: CriticalKV's two stages on SnapKV's "
                "window votes with every KV head's budget equal, as the default; but SnapKV's votes are averaged "
                "over the window's queries and average-pooled on each position, where DefensiveKV keeps each "
                "position's largest vote raised to the mean, max-pooled over the position and those before it")


def build_press(label: str, kvpress):
    """(press, whole prompt) of a press row ``label``; ``kvpress``: the module whose press classes to use."""
    if label == "kvpress-default":  # kvpress's defaults, used as its pipeline does
        return kvpress.SnapKVPress(), False
    if label == "kvpress-ours":
        return kvpress.SnapKVPress(window_size=OUR_WINDOW, kernel_size=OUR_KERNEL), True
    if label == "kvpress-nearest":
        return kvpress.CriticalKVPress(kvpress.SnapKVPress(window_size=OUR_WINDOW, kernel_size=OUR_KERNEL)), True
    raise ValueError(f"no press row {label!r}: choose {', '.join(LABELS[1:])}")


def describe(press, label: str | None = None) -> dict:
    """A press's class and parameters (a wrapped press's inside, key ``press``), as the JSON records them."""
    description = {"class": type(press).__name__, "module": type(press).__module__,
                   "compression_ratio": press.compression_ratio}
    for name in ("window_size", "kernel_size", "epsilon", "first_stage_ratio"):
        if hasattr(press, name):
            description[name] = getattr(press, name)
    if getattr(press, "press", None) is not None:
        description["press"] = describe(press.press)
    if label == "kvpress-nearest":
        description |= {"nearest_to": NEAREST_TO, "nearest_to_note": NEAREST_NOTE}
    return description


def compression_ratio(tokens: int, kept: int) -> float:
    """kvpress's ratio that keeps exactly ``kept`` of ``tokens`` (0 when nothing needs to go)."""
    if kept >= tokens:
        return 0.0
    return 1.0 - (kept + 0.5) / tokens


def kept_by_kvpress(tokens: int, ratio: float) -> int:
    """What kvpress 0.5.5 keeps (``kvpress.utils.compute_n_kept``, restated here to check the conversion)."""
    return tokens if ratio == 0 else max(1, int(tokens * (1 - ratio)))


def refuse_if_snapkv_importable() -> None:
    if importlib.util.find_spec(PACKAGE) is not None or PACKAGE in sys.modules:
        sys.exit(f"kvpress_runner: refusing to run: {PACKAGE} is importable here, so the baseline would not be "
                 "kvpress alone; run it with the kvpress virtual environment (tools/bench/peers/kvpress_venv.sh)")


def main(argv: list[str]) -> int:
    refuse_if_snapkv_importable()
    from importlib.metadata import version

    import kvpress
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, DynamicCache

    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(argv[0], dtype=torch.float32).eval()
    versions = {"kvpress": version("kvpress"), "transformers": version("transformers"), "torch": torch.__version__}

    def greedy(logits, cache, position, max_new_tokens, stop_ids):
        generated = []
        for step in range(max_new_tokens):
            token = int(logits[0, -1].argmax())
            if token in stop_ids:
                break
            generated.append(token)
            if step + 1 == max_new_tokens:
                break
            logits = model(torch.tensor([[token]]), past_key_values=cache,
                           position_ids=torch.tensor([[position + step]])).logits
        return generated

    def run(ids, prefix_length, press, whole_prompt, max_new_tokens, stop_ids):
        cache = DynamicCache()
        started = time.perf_counter()
        with torch.inference_mode():
            if whole_prompt or press is None:
                with press(model) if press is not None else _nothing():
                    logits = model(torch.tensor([ids]), past_key_values=cache, logits_to_keep=1).logits
            else:  # kvpress's pipeline: compress the context alone, then the question at its original positions
                with press(model):
                    model.model(input_ids=torch.tensor([ids[:prefix_length]]), past_key_values=cache)
                logits = model(torch.tensor([ids[prefix_length:]]), past_key_values=cache, logits_to_keep=1,
                               position_ids=torch.arange(prefix_length, len(ids))[None]).logits
            kept = [layer.keys.shape[2] for layer in cache.layers]
            generated = greedy(logits, cache, len(ids), max_new_tokens, stop_ids)
        seconds = time.perf_counter() - started
        return {"generated_ids": generated, "seconds": round(seconds, 3), "kept_min": min(kept),
                "kept_max": max(kept)}

    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        ids, prefix_length = request["input_ids"], request["prefix_length"]
        question_tokens = len(ids) - prefix_length
        max_new_tokens, stop_ids = request["max_new_tokens"], set(request["stop_ids"])
        labels = request.get("labels") or LABELS
        if set(labels) - set(LABELS):
            sys.exit(f"kvpress_runner: no row {sorted(set(labels) - set(LABELS))}: choose from {', '.join(LABELS)}")
        rows = []
        if "transformers" in labels:
            rows.append({"label": "transformers", "budget": None, "press": None,
                         **run(ids, prefix_length, None, True, max_new_tokens, stop_ids)})
        for budget in request["budgets"]:
            for label in (label for label in LABELS[1:] if label in labels):
                press, whole_prompt = build_press(label, kvpress)
                # the pipeline's usage compresses the context alone, keeping room for the question's tokens
                compressed_tokens, kept = (len(ids), budget) if whole_prompt else (prefix_length,
                                                                                  budget - question_tokens)
                press.compression_ratio = compression_ratio(compressed_tokens, kept)
                assert kept_by_kvpress(compressed_tokens, press.compression_ratio) == min(kept, compressed_tokens)
                description = describe(press, label) | {"compressed_tokens": compressed_tokens}
                rows.append({"label": label, "budget": budget, "press": description,
                             **run(ids, prefix_length, press, whole_prompt, max_new_tokens, stop_ids)})
        answer = {"id": request.get("id"), "versions": versions, "rows": rows,
                  "snapkv_cli_loaded": any(name.split(".")[0] == PACKAGE for name in sys.modules)}
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()
    return 0


class _nothing:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
