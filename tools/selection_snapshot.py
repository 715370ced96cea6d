"""The kept positions of every method on tiny models, and the tokens greedily decoded after them, written to a file and
compared later: a change that should only make the selection faster, or only move code, must leave every kept
position where it was and every decoded token as it was.

    .venv/bin/python -m tools.selection_snapshot --write /tmp/before.pt   # on the code before the change
    .venv/bin/python -m tools.selection_snapshot --compare /tmp/before.pt  # on the code after it

Cases: every method, and CriticalKV and DefensiveKV with each setting suffix of the bench grid, on the tiny models of
four families (tests/tiny_models.py), in float32 and bfloat16, at two prompt lengths and two budgets, each prefilled
in one pass and, as ``snapkv ask -Q a -Q b`` runs it, as two questions on one shared prefix. The comparison is
exact (``torch.equal`` on every layer's kept positions and per-head counts, and the same decoded token ids).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VALUE_NORM_METHODS = ("criticalkv", "defensivekv")  # every suffix of these; the other methods alone
FAMILIES = ("llama", "qwen3", "gemma2", "phi3")


def cases():
    for family in FAMILIES:
        for dtype in ("float32", "bfloat16"):
            for length, budget in ((160, 48), (400, 96), (400, 200)):
                yield family, dtype, length, budget


DECODED_TOKENS = 4


def kept_of(cache) -> list:
    return [(layer, record.kept_positions, record.kept_counts) for layer, record in sorted(cache.records.items())
            if not record.sliding]


def decoded(model, cache, logits, end: int) -> list[int]:
    """The ids of :data:`DECODED_TOKENS` tokens decoded greedily from ``cache`` (the prompt ends at ``end``)."""
    import torch

    ids = []
    for step in range(DECODED_TOKENS):
        token = logits.argmax(dim=-1, keepdim=True)
        ids.append(int(token))
        position = torch.tensor([end + step])
        logits = model(token, cache=cache, position_ids=position[None], cache_position=position,
                       use_cache=True).logits[:, -1]
    return ids


def snapshot() -> dict:
    import torch

    sys.path.insert(0, str(ROOT))

    from snapkv_cli.bench.grid import MethodGrid, method_labels
    from snapkv_cli.engine import SnapKVCache, prepare
    from snapkv_cli.generation import prefill
    from snapkv_cli.generation.generate import build_prefix
    from tests.tiny_models import prompt_ids, tiny_model

    labels = [label for label in method_labels()
              if label != "full" and ("+" not in label or label.split("+")[0] in VALUE_NORM_METHODS)]
    result = {}
    for family, dtype, length, budget in cases():
        model = tiny_model(family).to(getattr(torch, dtype))
        prepare(model)
        grid = MethodGrid(window_size=8, kernel_size=5)
        ids = prompt_ids(length, seed=length).tolist()[0]
        questions = [prompt_ids(24, seed=length + 1).tolist()[0], prompt_ids(30, seed=length + 2).tolist()[0]]
        with torch.inference_mode():
            prefix = build_prefix(model, ids, grid.window_size, accumulate_attention=True)
            for label in labels:
                settings = grid.settings(label, budget)
                cache = SnapKVCache(settings=settings, config=model.config)
                cache.word_ids = torch.arange(length) // 3  # words of three tokens (whole_words)
                logits = prefill(model, ids, cache)
                result[(family, dtype, length, budget, label, "one-pass")] = kept_of(cache)
                result[(family, dtype, length, budget, label, "one-pass", "decoded")] = decoded(
                    model, cache, logits, length)
                for index, question in enumerate(questions):
                    fork = prefix.fork(settings)
                    fork.word_ids = torch.arange(length + len(question)) // 3
                    logits = prefill(model, question, fork, start=length)
                    result[(family, dtype, length, budget, label, f"question-{index}")] = kept_of(fork)
                    result[(family, dtype, length, budget, label, f"question-{index}", "decoded")] = decoded(
                        model, fork, logits, length + len(question))
        model.to(torch.float32)
        print(family, dtype, length, budget, file=sys.stderr, flush=True)
    return result


def compare(before: dict, after: dict) -> list[str]:
    import torch

    differences = [f"{key}: missing" for key in before if key not in after]
    for key, layers in before.items():
        if key not in after:
            continue
        if key[-1] == "decoded":
            if layers != after[key]:
                differences.append(f"{key}: {layers} became {after[key]}")
            continue
        for (layer, positions, counts), (_, new_positions, new_counts) in zip(layers, after[key], strict=True):
            same = torch.equal(positions, new_positions) and (
                (counts is None and new_counts is None) or (counts is not None and new_counts is not None
                                                            and torch.equal(counts, new_counts)))
            if not same:
                differences.append(f"{key} layer {layer}")
    return differences


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--write", type=Path)
    group.add_argument("--compare", type=Path)
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    result = snapshot()
    if args.write:
        torch.save(result, args.write)
        print(f"{len(result)} cases written to {args.write}")
        return 0
    differences = compare(torch.load(args.compare), result)
    print(f"{len(result)} cases, {len(differences)} differ")
    for line in differences[:50]:
        print(line)
    return 1 if differences else 0


if __name__ == "__main__":
    sys.exit(main())
