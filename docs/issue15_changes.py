"""Issue 15's changes, applied one at a time: each must make the tests listed beside it fail (docs/testing.md).

    .venv/bin/python docs/issue15_changes.py            # every change (minutes of CPU: run it under the heavy lock)
    .venv/bin/python docs/issue15_changes.py 3a 7       # only the changes whose label starts so

Each change replaces one exact piece of the code (it must occur once: a refactoring that moves it is reported as an
error here, never as a pass), runs the listed tests with pytest, and always restores the file.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CLI, GEN, MQ, DC = "tests/test_cli.py::", "tests/test_generation.py::", "tests/test_multi_question.py::", \
    "tests/test_doc_cache.py::"
INS, MOD, REF = "tests/test_inspect.py::", "tests/test_models.py::", "tests/test_scores_reference.py"
OPTIONS = "snapkv_cli/cli/options.py"

# (label, file, the code, the change, tests that must fail)
CHANGES = [
    ("1 session stops passing prefix=", "snapkv_cli/pipeline.py",
     "options,\n                                     prefix=shared.cache, on_text=on_text, progress=self.progress)",
     "options,\n                                     on_text=on_text, progress=self.progress)",
     [MQ + "test_each_question_prefills_only_its_own_tokens",
      MQ + "test_prefill_chunk_reaches_the_model_for_every_question_of_ask_and_chat",
      DC + "test_a_prefix_loaded_from_disk_is_not_prefilled_again"]),
    ("2a prefill ignores chunk_size", "snapkv_cli/generation.py",
     "    chunk_size = chunk_size or len(input_ids)\n", "    chunk_size = len(input_ids)\n",
     [GEN + "test_prefill_chunks_reach_the_model", GEN + "test_prefix_and_question_are_both_prefilled_in_chunks",
      CLI + "test_prefill_chunk_and_device_map_keep_the_answer_and_the_selection"]),
    ("2b CLI drops --prefill-chunk", OPTIONS,
     'seed=values["seed"], prefill_chunk=values["prefill_chunk"],', 'seed=values["seed"], prefill_chunk=None,',
     [CLI + "test_prefill_chunk_and_device_map_keep_the_answer_and_the_selection",
      MQ + "test_prefill_chunk_reaches_the_model_for_every_question_of_ask_and_chat"]),
    ("2c CLI drops --device-map", OPTIONS,
     'device_map=values["device_map"], settings=settings', 'device_map=None, settings=settings',
     [CLI + "test_prefill_chunk_and_device_map_keep_the_answer_and_the_selection"]),
    ("3a pooling off", "snapkv_cli/engine/policies/snapkv.py",
     "prefix = pool_scores(votes[..., :-window], settings.kernel_size, settings.pooling, settings.pooling_window)",
     "prefix = votes[..., :-window]",
     [REF, INS + "test_kernel_pooling_and_gqa_options_reach_the_scores"]),
    ("3b GQA always mean", "snapkv_cli/engine/attention.py",
     'return scores.mean(dim=2) if how == "mean" else scores.amax(dim=2)', "return scores.mean(dim=2)",
     [REF, INS + "test_kernel_pooling_and_gqa_options_reach_the_scores"]),
    ("3c votes from the last window query", "snapkv_cli/engine/policies/snapkv.py",
     "votes = context.window_attention.sum(dim=3)", "votes = context.window_attention[..., -1, :]",
     [REF]),
    ("3d CLI ignores --kernel/--pooling/--gqa", OPTIONS,
     'kernel_size=values["kernel"], pooling=values["pooling"], gqa_aggregation=values["gqa"],', "",
     [INS + "test_kernel_pooling_and_gqa_options_reach_the_scores"]),
    ("3e CLI ignores --gqa only", OPTIONS, 'gqa_aggregation=values["gqa"],', "",
     [INS + "test_kernel_pooling_and_gqa_options_reach_the_scores"]),
    ("4 TOVA first window query", "snapkv_cli/engine/policies/tova.py",
     "context.window_attention[:, :, :, -1, :]", "context.window_attention[:, :, :, 0, :]",
     [REF + "::test_tova_scores_are_the_last_query_attention_averaged_over_all_heads"]),
    ("5a kept_share six times too large", "snapkv_cli/report.py",
     "kept_share=round(kept_counts[page] / (tokens * pairs), 4)",
     "kept_share=round(6 * kept_counts[page] / (tokens * pairs), 4)",
     [INS + "test_json_matches_the_engine", INS + "test_json_full_method_and_streamingllm"]),
    ("5b kept_share over one layer's pairs", "snapkv_cli/report.py",
     "        pairs += positions.shape[0]\n", "        pairs = positions.shape[0]\n",
     [INS + "test_json_matches_the_engine", INS + "test_json_full_method_and_streamingllm"]),
    ("6a sampling always greedy", "snapkv_cli/generation.py",
     "    if temperature <= 0:\n        return logits.argmax", "    if True:\n        return logits.argmax",
     [GEN + "test_sampler_draws_from_the_tempered_softmax",
      GEN + "test_sampling_differs_from_greedy_and_repeats_for_a_seed",
      CLI + "test_greedy_and_seeded_sampling_repeat"]),
    ("6b CLI drops --temperature", OPTIONS, 'temperature=values["temperature"]', "temperature=0.0",
     [CLI + "test_greedy_and_seeded_sampling_repeat"]),
    ("7a loader ignores attn_implementation", "snapkv_cli/models/loader.py",
     '        model_kwargs["attn_implementation"] = attn_implementation\n', "        pass\n",
     [MOD + "test_load_local_directory_bf16_and_attn"]),
    ("7b loader always float32", "snapkv_cli/models/loader.py",
     "model_kwargs: dict[str, Any] = {\"dtype\": torch_dtype}",
     "model_kwargs: dict[str, Any] = {\"dtype\": torch.float32}",
     [MOD + "test_load_local_directory_bf16_and_attn", CLI + "test_model_from_environment_and_dtype"]),
    ("7c report's dtype from the request", "snapkv_cli/models/loader.py",
     "dtype=_model_dtype(model, torch_dtype),", "dtype=torch_dtype,",
     [MOD + "test_loaded_dtype_is_read_back_from_the_model", CLI + "test_report_tells_the_dtype_the_model_has"]),
    ("8a RandomPolicy ignores the seed", "snapkv_cli/engine/policies/random.py",
     "manual_seed(self.settings.seed * 1_000_003 + context.layer_idx)", "manual_seed(context.layer_idx)",
     [REF + "::test_random_policy_follows_the_seed", INS + "test_random_method_follows_the_seed"]),
    ("8b CLI drops --seed for the policy", OPTIONS,
     'seed=values["seed"] if values["seed"] is not None else 0)', "seed=0)",
     [INS + "test_random_method_follows_the_seed"]),
    ("9 question's own prefill not chunked", "snapkv_cli/generation.py",
     "logits = prefill(model, input_ids[start:], cache, start=start, chunk_size=options.prefill_chunk,",
     "logits = prefill(model, input_ids[start:], cache, start=start,",
     [MQ + "test_prefill_chunk_reaches_the_model_for_every_question_of_ask_and_chat",
      MQ + "test_each_question_prefills_only_its_own_tokens",
      GEN + "test_prefix_and_question_are_both_prefilled_in_chunks"]),
]


def verdict(test: str) -> str:
    code = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", test], cwd=ROOT,
                          capture_output=True).returncode
    return {0: "passed", 1: "failed"}.get(code, f"error (pytest exit {code})")


def main(only: list[str]) -> int:
    escaped = []
    for label, path, code, change, tests in CHANGES:
        if only and not any(label.startswith(prefix) for prefix in only):
            continue
        file = ROOT / path
        original = file.read_text(encoding="utf-8")
        if original.count(code) != 1:
            print(f"## {label}: the code to change occurs {original.count(code)} times in {path}: update this script")
            escaped.append((label, path))
            continue
        file.write_text(original.replace(code, change), encoding="utf-8")
        try:
            print(f"## {label}", flush=True)
            for test in tests:
                outcome = verdict(test)
                print(f"   {outcome:8} {test}", flush=True)
                if outcome != "failed":
                    escaped.append((label, test))
        finally:
            file.write_text(original, encoding="utf-8")
    if escaped:
        print(f"{len(escaped)} test(s) did not fail under their change: {escaped}")
    return 1 if escaped else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
