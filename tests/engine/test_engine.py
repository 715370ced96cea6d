"""The engine on tiny random models of every supported family: exact window attention, faithful selection."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from transformers import DynamicCache

from snapkv_cli import POLICY_NAMES, CompressionSettings, SnapKVCache, prepare
from snapkv_cli.engine.attention import attention_probabilities
from snapkv_cli.engine.families import attention_scaling, logit_softcap
from tests.tiny_models import FAMILIES, prompt_ids, tiny_model


def greedy_loop(model, input_ids, cache, new_tokens):
    """A hand-written greedy decode: positions continue from the original prompt length."""
    prompt_length = input_ids.shape[1]
    with torch.no_grad():
        logits = model(input_ids, past_key_values=cache, use_cache=True).logits
        tokens = []
        for step in range(new_tokens):
            next_token = logits[:, -1].argmax(-1, keepdim=True)
            tokens.append(int(next_token))
            if tokens[-1] == model.generation_config.eos_token_id:
                break
            position = torch.tensor([[prompt_length + step]])
            logits = model(next_token, past_key_values=cache, position_ids=position,
                           cache_position=position[0], use_cache=True).logits
    return tokens


def generate(model, input_ids, cache, new_tokens):
    with torch.no_grad():
        output = model.generate(input_ids, past_key_values=cache, max_new_tokens=new_tokens, do_sample=False,
                                pad_token_id=0)
    return output[0, input_ids.shape[1]:].tolist()


def full_attention_layers(model):
    return [i for i, t in enumerate(getattr(model.config, "layer_types", None) or []) if t == "full_attention"] or list(
        range(model.config.num_hidden_layers))


@pytest.mark.parametrize("family", FAMILIES)
def test_window_attention_equals_eager_attention_rows(family):
    model = prepare(tiny_model(family, "eager"))
    input_ids = prompt_ids(48)
    window = 8
    cache = SnapKVCache(window_size=window, max_capacity_prompt=16)
    with torch.no_grad(), cache.deferred():
        output = model(input_ids, past_key_values=cache, use_cache=True, output_attentions=True)
    attention_modules = [layer.self_attn for layer in model.model.layers]
    for layer_idx in full_attention_layers(model):
        pending = cache.pending[layer_idx]
        module = attention_modules[layer_idx]
        keys = cache.layers[layer_idx].keys
        recomputed = attention_probabilities(pending.window_queries, keys, pending.window_positions,
                                             attention_scaling(module), logit_softcap(module))
        batch, kv_heads, group = recomputed.shape[:3]
        eager = output.attentions[layer_idx][:, :, -window:, :].reshape(batch, kv_heads, group, window, -1)
        torch.testing.assert_close(recomputed, eager.float(), atol=1e-5, rtol=0)


@pytest.mark.parametrize("family", FAMILIES)
def test_budget_at_least_prompt_is_token_identical_to_uncompressed(family):
    model = prepare(tiny_model(family))
    input_ids = prompt_ids(40, seed=1)
    plain = generate(model, input_ids, DynamicCache(), 12)
    cache = SnapKVCache(window_size=8, max_capacity_prompt=40, kernel_size=5)
    assert generate(model, input_ids, cache, 12) == plain
    assert all(not record.compressed for record in cache.records.values())


@pytest.mark.parametrize("family", FAMILIES)
def test_generate_matches_hand_written_loop_on_compressed_cache(family):
    model = prepare(tiny_model(family))
    input_ids = prompt_ids(90, seed=2)
    make = lambda: SnapKVCache(window_size=8, max_capacity_prompt=32, kernel_size=5, pooling="maxpool")
    cache = make()
    tokens = generate(model, input_ids, cache, 10)
    assert tokens == greedy_loop(model, input_ids, make(), 10)
    compressed = [record for record in cache.records.values() if not record.sliding]
    assert compressed and all(record.kept_positions.shape[-1] == 32 for record in compressed)
    assert any(record.compressed for record in compressed)


def test_decoding_on_compressed_cache_equals_masked_full_attention():
    """StreamingLLM keeps the same positions in every layer and head, so a 4-D mask reproduces its compressed cache:
    the first decoded token's logits must match a full forward that hides the evicted positions from it. This pins
    down that kept keys keep their rotary positions and decoding continues at the original prompt length."""
    model = prepare(tiny_model("llama", "eager"))
    input_ids = prompt_ids(60, seed=3)
    cache = SnapKVCache(window_size=4, max_capacity_prompt=20, method="streamingllm")
    with torch.no_grad():
        logits = model(input_ids, past_key_values=cache, use_cache=True).logits
        next_token = logits[:, -1].argmax(-1, keepdim=True)
        position = torch.tensor([[60]])
        decoded = model(next_token, past_key_values=cache, position_ids=position, cache_position=position[0],
                        use_cache=True).logits[0, -1]
        kept = cache.records[0].kept_positions[0, 0]
        assert all(torch.equal(r.kept_positions[0, h], kept) for r in cache.records.values() for h in range(2))
        allowed = torch.tril(torch.ones(61, 61, dtype=torch.bool))
        allowed[60] = False
        allowed[60, kept] = True
        allowed[60, 60] = True
        mask = torch.zeros(1, 1, 61, 61).masked_fill(~allowed, torch.finfo(torch.float32).min)
        reference = model(torch.cat([input_ids, next_token], 1), attention_mask=mask).logits[0, -1]
    torch.testing.assert_close(decoded, reference, atol=1e-4, rtol=1e-4)


def test_tova_keeps_one_selection_per_layer():
    model = prepare(tiny_model("llama"))
    cache = SnapKVCache(window_size=4, max_capacity_prompt=20, method="tova")
    with torch.no_grad():
        model(prompt_ids(60, seed=3), past_key_values=cache, use_cache=True)
    for record in cache.records.values():
        assert torch.equal(record.kept_positions[0, 0], record.kept_positions[0, 1])


@pytest.mark.parametrize("family", ["llama", "gemma2"])  # Gemma 2: the sums of soft-capped attention
def test_h2o_scores_are_attention_summed_over_all_queries(family):
    model = prepare(tiny_model(family, "eager"))
    input_ids = prompt_ids(70, seed=4)
    cache = SnapKVCache(settings=CompressionSettings(method="h2o", window_size=4, max_capacity_prompt=30,
                                                     gqa_aggregation="mean", query_block_size=16))
    with torch.no_grad():
        output = model(input_ids, past_key_values=cache, use_cache=True, output_attentions=True)
    scored = {layer_idx: record for layer_idx, record in cache.records.items() if not record.sliding}
    assert len(scored) >= 2
    for layer_idx, record in scored.items():
        attentions = output.attentions[layer_idx][0]  # (heads, queries, keys)
        expected = attentions.sum(dim=1).reshape(2, 3, -1).mean(dim=1)
        torch.testing.assert_close(record.scores[0], expected.float(), atol=1e-5, rtol=1e-5)


def test_layers_are_compressed_one_after_another_during_prefill():
    model = prepare(tiny_model("llama"))
    cache = SnapKVCache(window_size=4, max_capacity_prompt=20)
    seen = []

    def check(module, args, kwargs):
        seen.append([cache.layers[i].keys.shape[2] for i in range(module.layer_idx)])

    handles = [layer.self_attn.register_forward_pre_hook(check, with_kwargs=True) for layer in model.model.layers]
    try:
        with torch.no_grad():
            model(prompt_ids(64), past_key_values=cache, use_cache=True)
    finally:
        for handle in handles:
            handle.remove()
    assert seen == [[], [20], [20, 20]]


def test_cache_reports_sizes():
    model = prepare(tiny_model("llama"))
    cache = SnapKVCache(window_size=4, max_capacity_prompt=25)
    with torch.no_grad():
        model(prompt_ids(100), past_key_values=cache, use_cache=True)
    summary = cache.summary()
    per_token = 3 * 2 * 2 * 16 * 4  # layers x (k, v) x kv heads x head_dim x float32
    assert summary["tokens_before"] == 100 and summary["tokens_after"] == 25
    assert summary["bytes_before"] == 100 * per_token and summary["bytes_after"] == 25 * per_token
    assert summary["compression_ratio"] == 4.0
    record = cache.records[1]
    assert record.kept_scores().shape == (1, 2, 25)


def test_sliding_layer_is_recorded_as_it_is_stored():
    """Gemma 3's sliding layer keeps its last tokens uncompressed: its record names exactly the positions whose keys it
    holds, counts what it stores both before and after (a sliding layer never holds more than its window, compressed
    or not: the totals are what a cache really holds), and the summary adds the layers up."""
    model = prepare(tiny_model("gemma3_text"))
    input_ids = prompt_ids(100)
    cache, full = SnapKVCache(window_size=8, max_capacity_prompt=40), DynamicCache()
    with torch.no_grad():
        model(input_ids, past_key_values=cache, use_cache=True)
        model(input_ids, past_key_values=full, use_cache=True)  # no config: every layer keeps every token
    per_token = 2 * 2 * 16 * 4  # (k, v) x kv heads x head_dim x float32, one layer
    sliding = cache.records[1]
    stored = cache.layers[1].keys.shape[2]
    assert sliding.sliding and not sliding.compressed and stored < 100
    assert sliding.capacity == 100  # nothing was budgeted: its capacity is the prompt it was given
    assert sliding.kept_positions[0].tolist() == [list(range(100 - stored, 100))] * 2
    assert torch.equal(cache.layers[1].keys, full.layers[1].keys[:, :, 100 - stored:])
    assert (sliding.bytes_before, sliding.bytes_after) == (stored * per_token, stored * per_token)
    assert sliding.scores is None and sliding.kept_scores() is None
    summary = cache.summary()
    assert summary["tokens_before"] == 100 and summary["tokens_after"] == round((40 + stored + 40) / 3, 2)
    assert summary["bytes_before"] == (200 + stored) * per_token
    assert summary["bytes_after"] == (80 + stored) * per_token
    assert summary["compression_ratio"] == round((200 + stored) / (80 + stored), 4)


def test_budget_fraction_resolves_against_prompt_length():
    model = prepare(tiny_model("llama"))
    cache = SnapKVCache(window_size=4, max_capacity_prompt=0.25)
    with torch.no_grad():
        model(prompt_ids(100), past_key_values=cache, use_cache=True)
    assert {r.kept_positions.shape[-1] for r in cache.records.values()} == {25}


def test_pyramidkv_budgets_shrink_with_depth_and_keep_the_mean():
    from snapkv_cli.engine.policies import POLICIES

    policy = POLICIES["pyramidkv"](CompressionSettings(method="pyramidkv", window_size=32, max_capacity_prompt=1024))
    budgets = [policy.capacity(layer, 30, 8000) for layer in range(30)]
    assert budgets == sorted(budgets, reverse=True) and budgets[0] > budgets[-1] > 32
    assert abs(sum(budgets) / 30 - 1024) <= 1


def test_pyramidkv_budgets_by_hand():
    """Budget 1024, window 32, 30 layers, beta 20: 992 extra tokens on average, the deepest layer 992 // 20 = 49 of
    them, the shallowest 2 x 992 - 49 = 1935, evenly spaced; a prompt too short for that clips the shallowest layer
    to the prompt and raises the deepest to keep the mean; a model of one layer keeps the budget."""
    from snapkv_cli.engine.policies import POLICIES

    policy = POLICIES["pyramidkv"](CompressionSettings(method="pyramidkv", window_size=32, max_capacity_prompt=1024))
    budgets = [policy.capacity(layer, 30, 8000) for layer in range(30)]
    assert budgets[0] == 1935 + 32 and budgets[-1] == 49 + 32
    assert budgets[10] == round(1935 - 10 * (1935 - 49) / 29) + 32
    clipped = [policy.capacity(layer, 30, 1100) for layer in range(30)]
    assert clipped[0] == 1100 and clipped[-1] == 2 * 992 - 1068 + 32
    assert policy.capacity(0, 1, 8000) == 1024


@pytest.mark.parametrize(
    "kwargs, fragment",
    [
        (dict(window_size=32, max_capacity_prompt=32), "must exceed window_size"),
        (dict(kernel_size=0), "kernel_size"),
        (dict(kernel_size=4), "odd"),
        (dict(pooling="median"), "avgpool or maxpool"),
        (dict(method="magic"), "unknown method 'magic': choose"),
        (dict(max_capacity_prompt=1.5), "fraction"),
        (dict(gqa_aggregation="sum"), "mean or max"),
        (dict(layer_budgets="cone"), "uniform or pyramid"),
        (dict(head_budgets="greedy"), "uniform, adaptive or shared"),
        (dict(head_floor=1.5), "head_floor must be a fraction"),
        (dict(critical_first_stage=-0.1), "critical_first_stage must be a fraction"),
        (dict(chunk_size=0), "chunk_size must be a positive integer"),
    ],
)
def test_bad_settings_raise_value_error_naming_the_fix(kwargs, fragment):
    with pytest.raises(ValueError, match=fragment):
        if set(kwargs) & {"layer_budgets", "head_budgets", "head_floor", "critical_first_stage", "chunk_size"}:
            CompressionSettings(**kwargs)
        else:
            SnapKVCache(**kwargs)


def test_padded_batches_are_refused():
    model = prepare(tiny_model("llama"))
    input_ids = torch.cat([prompt_ids(20), prompt_ids(20, seed=9)])
    attention_mask = torch.ones_like(input_ids)
    attention_mask[1, :3] = 0
    with pytest.raises(ValueError, match="padded batches"), torch.no_grad():
        model(input_ids, attention_mask=attention_mask, past_key_values=SnapKVCache(4, 10), use_cache=True)


def test_unprepared_model_is_a_clear_error():
    from snapkv_cli import unprepare

    model = tiny_model("qwen2")
    unprepare(model)
    with pytest.raises(RuntimeError) as caught, torch.no_grad():
        model(prompt_ids(20), past_key_values=SnapKVCache(4, 10), use_cache=True)
    assert str(caught.value) == ("SnapKVCache got keys without the layer's hidden states: call "
                                 "snapkv_cli.prepare(model) once before running the model with this cache")


def test_unsupported_family_names_the_supported_ones():
    import transformers

    config = transformers.GPT2Config(n_layer=1, n_head=2, n_embd=32, vocab_size=50)
    model = transformers.AutoModelForCausalLM.from_config(config)
    with pytest.raises(ValueError, match="supported families: Llama, Mistral"):
        prepare(model)


def test_batch_of_equal_length_prompts_selects_per_row():
    model = prepare(tiny_model("llama"))
    input_ids = torch.cat([prompt_ids(50, seed=5), prompt_ids(50, seed=6)])
    cache = SnapKVCache(window_size=4, max_capacity_prompt=20)
    with torch.no_grad():
        model(input_ids, past_key_values=cache, use_cache=True)
    single = SnapKVCache(window_size=4, max_capacity_prompt=20)
    with torch.no_grad():
        model(input_ids[1:], past_key_values=single, use_cache=True)
    assert torch.equal(cache.records[2].kept_positions[1], single.records[2].kept_positions[0])


@pytest.mark.parametrize("method", POLICY_NAMES)
@hypothesis_settings(max_examples=10, deadline=None)
@given(
    prompt_length=st.integers(min_value=6, max_value=160),
    window_size=st.integers(min_value=1, max_value=16),
    extra=st.integers(min_value=1, max_value=120),
    kernel_size=st.sampled_from([1, 3, 5, 7, 15]),
    pooling=st.sampled_from(["avgpool", "maxpool"]),
    aggregation=st.sampled_from(["mean", "max"]),
    layer_budgets=st.sampled_from([None, "uniform", "pyramid"]),
    head_budgets=st.sampled_from([None, "uniform", "adaptive", "shared"]),
    chunk_size=st.integers(min_value=1, max_value=12),
    word_length=st.sampled_from([None, 1, 3, 7]),
)
def test_selection_invariants(method, prompt_length, window_size, extra, kernel_size, pooling, aggregation,
                              layer_budgets, head_budgets, chunk_size, word_length):
    """Every method, alone or with any layer and head allotment, token by token or in whole words: each layer
    keeps its capacity per KV head on average (exactly, per head, unless heads are allotted adaptively; the same
    positions in every head when they are shared), every head keeps the window, its kept positions are sorted and
    unique, padding slots only pad, the cache holds exactly the kept keys, and the bytes reported are the bytes
    allocated."""
    model = prepare(tiny_model("llama"))
    input_ids = prompt_ids(prompt_length, seed=prompt_length)
    capacity = window_size + extra
    settings = CompressionSettings(method=method, window_size=window_size, max_capacity_prompt=capacity,
                                   kernel_size=kernel_size, pooling=pooling, gqa_aggregation=aggregation,
                                   layer_budgets=layer_budgets, head_budgets=head_budgets, chunk_size=chunk_size,
                                   whole_words=word_length is not None)
    cache = SnapKVCache(settings=settings)
    if word_length is not None:
        cache.word_ids = torch.arange(prompt_length) // word_length
    reference = DynamicCache()
    with torch.no_grad():
        model(input_ids, past_key_values=cache, use_cache=True)
        model(input_ids, past_key_values=reference, use_cache=True)
    num_layers, kv_heads = model.config.num_hidden_layers, model.config.num_key_value_heads
    assert sorted(cache.records) == list(range(num_layers))
    allocated = 0
    for layer_idx, record in cache.records.items():
        layer_capacity = cache.policy.capacity(layer_idx, num_layers, prompt_length)
        expected = prompt_length if method == "full" else min(layer_capacity, prompt_length)
        counts = record.kept_per_head()[0]
        kept = record.kept_positions
        assert kept.shape == (1, kv_heads, int(counts.max()))
        assert int(counts.sum()) == kv_heads * expected
        if cache.policy.head_allotment in ("uniform", "shared") or expected == prompt_length:
            assert record.kept_counts is None and counts.tolist() == [expected] * kv_heads
            if cache.policy.head_allotment == "shared" and cache.policy.compresses:
                assert bool((kept == kept[:, :1]).all()), "every head keeps the same positions"
        else:
            floor = int(settings.head_floor * (expected - window_size))
            assert int(counts.min()) >= window_size + floor
        window = torch.arange(max(0, prompt_length - window_size), prompt_length)
        for head in range(kv_heads):
            positions = record.head_positions(0, head)
            assert len(positions) == int(counts[head])
            assert bool((positions[1:] > positions[:-1]).all()), "sorted and unique"
            assert int(positions.min()) >= 0 and int(positions.max()) < prompt_length
            assert bool(torch.isin(window, positions).all()), "window kept"
            assert bool((kept[0, head, len(positions):] == prompt_length - 1).all()), "padding repeats the last token"
        full_keys = reference.layers[layer_idx].keys
        index = kept.unsqueeze(-1).expand(-1, -1, -1, full_keys.shape[-1])
        assert torch.equal(cache.layers[layer_idx].keys, full_keys.gather(2, index))
        allocated += 2 * kept.numel() * full_keys.shape[-1] * full_keys.element_size()
    assert cache.summary()["bytes_after"] == allocated


def test_fraction_budget_on_a_prompt_inside_the_window_keeps_everything():
    settings = CompressionSettings(window_size=64, max_capacity_prompt=0.5)
    assert settings.capacity_for(40) == 40
    with pytest.raises(ValueError, match="not more than the window"):
        settings.capacity_for(100)


def test_attached_prepares_for_the_block_only():
    import transformers

    from snapkv_cli import attached
    from tests.tiny_models import FAMILY_CONFIGS

    model = transformers.AutoModelForCausalLM.from_config(FAMILY_CONFIGS["llama"]()).eval()

    def compress():
        cache = SnapKVCache(window_size=4, max_capacity_prompt=10)
        with torch.no_grad():
            model(prompt_ids(20), past_key_values=cache, use_cache=True)
        return cache

    with attached(model) as same:
        assert same is model and compress().records[0].kept_positions.shape[-1] == 10
    with pytest.raises(RuntimeError, match="prepare"):
        compress()  # the hooks are gone
    prepare(model)
    with attached(model):
        pass
    assert compress().records[0].compressed  # prepared before the block: still prepared after it


def test_selection_time_is_measured_inside_the_prefill():
    import time

    model = prepare(tiny_model("llama"))
    cache = SnapKVCache(window_size=8, max_capacity_prompt=30)
    started = time.perf_counter()
    with torch.no_grad():
        model(prompt_ids(200), past_key_values=cache, use_cache=True)
    wall = time.perf_counter() - started
    assert 0 < cache.selection_seconds < wall


def test_selection_steps_run_on_the_trial_thread_counts_and_the_model_keeps_its_threads(monkeypatch):
    """The first compressing steps are the thread trial (one, the caller's, the caller's: three layers here);
    the attention always runs on the caller's threads."""
    from snapkv_cli.engine.policies.defensivekv import DefensiveKVPolicy

    model = prepare(tiny_model("llama"))
    cache = SnapKVCache(method="defensivekv", window_size=4, max_capacity_prompt=20)
    during_selection, during_attention = [], []
    real_scores = DefensiveKVPolicy.scores
    monkeypatch.setattr(DefensiveKVPolicy, "scores",
                        lambda self, context: during_selection.append(torch.get_num_threads()) or
                        real_scores(self, context))
    handles = [layer.self_attn.register_forward_pre_hook(
        lambda *_: during_attention.append(torch.get_num_threads())) for layer in model.model.layers]
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with torch.no_grad():
            model(prompt_ids(64), past_key_values=cache, use_cache=True)
    finally:
        torch.set_num_threads(threads)
        for handle in handles:
            handle.remove()
    assert during_selection == [1, 2, 2] and during_attention == [2, 2, 2]
    assert cache.selection_threads.trials == 3 and cache.selection_threads.use_caller is None
    assert all(cache.layers[i].keys.shape[2] < 64 for i in range(3))  # and it compressed


def test_the_engine_loads_its_heavy_parts_on_first_use_and_names_what_it_lacks():
    """``snapkv_cli.engine`` imports the cache, hooks and policies when first asked for them (the CLI's cheap checks
    run before torch-heavy imports); a name it does not have fails as a module's missing attribute does."""
    import snapkv_cli.engine as engine
    from snapkv_cli.engine.cache import SnapKVCache as cache_class

    assert engine.SnapKVCache is cache_class
    with pytest.raises(AttributeError, match=r"^module 'snapkv_cli\.engine' has no attribute 'Compressor'$"):
        engine.Compressor  # noqa: B018
