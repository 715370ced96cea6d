"""The engine keeps every tensor on the device of the data it works on, and moves a tensor to another device only
where it can come from one (a loaded prefix, a CPU generator, positions, a mask built for another layer).

No GPU is needed: torch's ``meta`` device stands in for "another device". Under ``with torch.device("meta")`` a tensor
created without an explicit device lands on meta, and any operation mixing it with the model's CPU tensors fails;
so a chunked prefill, compression and decoding that give exactly the logits and selections of a plain CPU run show
that the engine made no tensor on the default device. The other tests hand a function one input on meta and check
that it moved what it combines with that input there (meta tensors carry shapes, not values).
"""

from __future__ import annotations

import pytest
import torch

from snapkv_cli.engine import CompressionSettings, SnapKVCache, attached
from snapkv_cli.engine.attention import attention_probabilities
from snapkv_cli.engine.masking import CompressedLayerMask
from snapkv_cli.engine.policies import POLICY_NAMES, LayerContext
from snapkv_cli.engine.policies.random import RandomPolicy
from snapkv_cli.generation import build_prefix, prefill
from tests.tiny_models import prompt_ids, tiny_model

LENGTH, CHUNK, WINDOW = 90, 32, 6
PROMPT = prompt_ids(LENGTH, seed=11)[0].tolist()
SETTINGS = [{"method": method} for method in POLICY_NAMES] + [
    {"method": "snapkv", "head_budgets": "adaptive"},
    {"method": "snapkv", "layer_budgets": "pyramid", "head_budgets": "adaptive"},
    {"method": "snapkv", "head_budgets": "shared"},
]
# transformers' own sliding-window cache layer allocates on the default device, so Gemma's families cannot run
# under a meta default device (with or without this project); every other family does
MODELS = [("llama", "eager"), ("llama", "sdpa"), ("mistral", "sdpa"), ("qwen2", "eager"), ("qwen3", "sdpa"),
          ("phi3", "eager")]


def run(model, settings: CompressionSettings) -> tuple[list[torch.Tensor], dict[int, torch.Tensor]]:
    """Prefill in chunks (compressing at the last), decode one token, then three at once: every logit, and each
    layer's kept positions."""
    cache = SnapKVCache(settings=settings)
    with torch.no_grad():
        logits = [prefill(model, PROMPT, cache, chunk_size=CHUNK)]
        position = LENGTH
        for step in ([5], [6, 7, 8]):
            positions = torch.arange(position, position + len(step), device="cpu")
            output = model(torch.tensor([step], device="cpu"), past_key_values=cache, position_ids=positions[None],
                           cache_position=positions, use_cache=True)
            logits.append(output.logits)
            position += len(step)
    return logits, {index: record.kept_positions for index, record in cache.records.items()}


@pytest.mark.parametrize("overrides", SETTINGS, ids=lambda o: "-".join(o.values()))
@pytest.mark.parametrize(("family", "implementation"), MODELS)
def test_no_tensor_lands_on_the_default_device(family, implementation, overrides):
    model = tiny_model(family, implementation)
    settings = CompressionSettings(window_size=WINDOW, max_capacity_prompt=26, kernel_size=5, **overrides)
    with attached(model):
        logits, kept = run(model, settings)
        with torch.device("meta"):
            meta_logits, meta_kept = run(model, settings)
    assert all(tensor.device.type == "cpu" for tensor in meta_logits + list(meta_kept.values()))
    assert all(torch.equal(a, b) for a, b in zip(logits, meta_logits, strict=True))
    assert kept.keys() == meta_kept.keys() and all(torch.equal(kept[i], meta_kept[i]) for i in kept)


def test_random_scores_are_drawn_on_the_cpu_and_moved_to_the_keys_device():
    settings = CompressionSettings(method="random", window_size=2, max_capacity_prompt=4, seed=3)
    meta = torch.empty(1, 2, 10, 4, device="meta")
    context = LayerContext(layer_idx=1, num_layers=3, keys=meta, window_queries=meta[:, :, -2:],
                           window_positions=torch.arange(8, 10), scaling=0.5, softcap=None, settings=settings)
    scores = RandomPolicy(settings).scores(context)
    assert scores.device.type == "meta" and scores.shape == (1, 2, 10)


def test_a_prefix_state_is_loaded_onto_the_device_asked():
    model = tiny_model("llama")
    with attached(model):
        prefix = build_prefix(model, prompt_ids(20)[0].tolist(), 4, accumulate_attention=True)
    state = prefix.prefix_state().tensors()
    rebuilt = SnapKVCache.from_prefix_state(prefix.prefix_state(), model.config, 4, device="meta")
    loaded = rebuilt.prefix_state().tensors()
    assert loaded.keys() == state.keys()
    assert all(tensor.device.type == "meta" and tensor.shape == state[name].shape for name, tensor in loaded.items())


def test_query_positions_are_moved_to_the_keys_device():
    queries, keys = torch.empty(1, 4, 3, 8, device="meta"), torch.empty(1, 2, 10, 8, device="meta")
    probabilities = attention_probabilities(queries, keys, torch.arange(7, 10), scaling=0.3)
    assert probabilities.device.type == "meta" and probabilities.shape == (1, 2, 2, 3, 10)


def test_a_mask_is_built_on_the_device_asked_even_from_counts_on_another():
    padded = CompressedLayerMask(torch.tensor([[3, 5]]), slots=5, group=2)
    for query_length in (1, 4):
        for mask in (padded, CompressedLayerMask()):
            built = mask.mask(query_length, 12, torch.float32, torch.device("meta"))
            assert built.device.type == "meta" and built.shape[-2:] == (query_length, 12)
    on_cpu = padded.mask(1, 12, torch.float32, torch.device("cpu"))  # the decoding row, last built on meta...
    assert on_cpu.device.type == "cpu" and on_cpu.shape == (1, 4, 1, 12)  # ...is built again on the CPU
    moved = padded.mask(1, 13, torch.float32, torch.device("meta"))  # and then again on meta
    assert moved.device.type == "meta" and moved.shape == (1, 4, 1, 13)


@pytest.mark.parametrize("method", ["criticalkv", "defensivekv"])
def test_value_norms_kept_for_a_shared_prefix_stay_on_the_models_device(method):
    """The projected value norms a question computes on a shared prefix are kept for the next question: with a meta
    default device, two questions on one prefix keep exactly the positions and answers of a plain CPU run."""
    from snapkv_cli.generation import GenerationOptions, generate_answer
    from tests.helpers import DigitTokenizer

    model = tiny_model("llama")
    settings = CompressionSettings(method=method, window_size=WINDOW, max_capacity_prompt=26, kernel_size=5)
    options = GenerationOptions(max_new_tokens=3, stop_at_eos=False)
    questions = [prompt_ids(8, seed=21)[0].tolist(), prompt_ids(12, seed=22)[0].tolist()]

    def ask_both():
        shared = build_prefix(model, PROMPT, window_size=WINDOW, accumulate_attention=True)
        answers = [generate_answer(model, DigitTokenizer(), PROMPT + question, settings, options, prefix=shared)
                   for question in questions]
        return [(answer.generated_ids, {index: record.kept_positions for index, record in answer.cache.records.items()})
                for answer in answers]

    expected = ask_both()
    with torch.device("meta"):
        seen = ask_both()
    for (ids, kept), (meta_ids, meta_kept) in zip(expected, seen, strict=True):
        assert ids == meta_ids and kept.keys() == meta_kept.keys()
        assert all(torch.equal(kept[i], meta_kept[i]) for i in kept)


def test_prefix_value_norms_start_unknown_with_the_values_batch_heads_and_device():
    from snapkv_cli.engine.prefix_norms import PrefixValueNorms

    kept = PrefixValueNorms(length=7)
    norms = kept.norms(torch.zeros(2, 3, 5, 4))  # a question shorter than the prefix sees its first 5 positions
    assert norms.shape == (2, 3, 5) and norms.dtype == torch.float32 and norms.isnan().all()
    norms[1, 2, 4] = 1.5
    assert kept.norms(torch.zeros(2, 3, 9, 4)).shape == (2, 3, 7)  # a longer prompt: the prefix's 7
    assert kept.norms(torch.zeros(2, 3, 9, 4))[1, 2, 4] == 1.5
    assert PrefixValueNorms(length=7).norms(torch.empty(1, 2, 9, 4, device="meta")).device.type == "meta"


def test_a_reduced_precision_decode_builds_its_all_zero_mask_on_the_models_device():
    """A bfloat16 CPU decoding step under sdpa gets an all-zero mask of the cache's own (so that transformers runs
    attention per KV head): it is made on the model's device, whatever torch's default device."""
    import copy

    model = copy.deepcopy(tiny_model("llama", "sdpa")).to(torch.bfloat16)
    settings = CompressionSettings(window_size=WINDOW, max_capacity_prompt=26, kernel_size=5)
    with attached(model):
        logits, kept = run(model, settings)
        with torch.device("meta"):
            meta_logits, meta_kept = run(model, settings)
    assert all(torch.equal(a, b) for a, b in zip(logits, meta_logits, strict=True))
    assert all(torch.equal(kept[i], meta_kept[i]) for i in kept)
