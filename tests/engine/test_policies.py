"""Each compression method against a reference computed here, independently, from eager attention weights and the
module's weights; and AdaKV's padded layout decoding exactly as attention over each head's kept keys."""

from __future__ import annotations

import pytest
import torch
from transformers import DynamicCache

from snapkv_cli import CompressionSettings, SnapKVCache, prepare
from snapkv_cli.engine.policies import POLICY_NAMES
from snapkv_cli.errors import UnsupportedAttention
from tests.tiny_models import FAMILIES, prompt_ids, tiny_model

WINDOW, CAPACITY, LENGTH = 6, 26, 90
PREFIX = LENGTH - WINDOW


def run(method: str, family: str = "llama", **overrides):
    """Compress a prompt with ``method`` under eager attention; return the cache, the eager attention weights per
    layer (query_heads, keys, keys), the full values per layer (kv_heads, keys, head_dim) and the model."""
    model = prepare(tiny_model(family, "eager"))
    input_ids = prompt_ids(LENGTH, seed=11)
    settings = CompressionSettings(method=method, window_size=WINDOW, max_capacity_prompt=CAPACITY,
                                   kernel_size=overrides.pop("kernel_size", 5),
                                   pooling=overrides.pop("pooling", "avgpool"), **overrides)
    cache, plain = SnapKVCache(settings=settings), DynamicCache()
    with torch.no_grad():
        output = model(input_ids, past_key_values=cache, use_cache=True, output_attentions=True)
        model(input_ids, past_key_values=plain, use_cache=True)
    attentions = [a[0].double() for a in output.attentions]
    values = [plain.layers[i].values[0].double() for i in range(len(attentions))]
    return cache, attentions, values, model


def pooled(row: torch.Tensor, kernel: int, how: str, window: str = "centered") -> torch.Tensor:
    """1-D pooling of ``row`` (positions,) by hand: stride 1, zero padding (on the left only for the causal window),
    averages over the full kernel."""
    before = kernel - 1 if window == "causal" else kernel // 2
    padded = torch.cat([row.new_zeros(before), row, row.new_zeros(kernel - 1 - before)])
    windows = torch.stack([padded[i:i + kernel] for i in range(len(row))])
    return windows.mean(dim=1) if how == "avgpool" else windows.amax(dim=1)


def snapkv_scores(attention: torch.Tensor, kv_heads: int, kernel: int = 5) -> torch.Tensor:
    """(kv_heads, PREFIX): window rows summed, pooled, averaged over each KV head's query heads."""
    votes = attention[:, -WINDOW:, :PREFIX].sum(dim=1)
    per_query_head = torch.stack([pooled(v, kernel, "avgpool") for v in votes])
    return per_query_head.reshape(kv_heads, -1, PREFIX).mean(dim=1)


def adaptive_budgets(scores: torch.Tensor, budget: int, floor: float = 0.2) -> list[int]:
    """AdaKV's split by hand: every head's top floor share, then the best (head, position) pairs left."""
    guaranteed = int(floor * budget)
    taken = [set(torch.argsort(head, descending=True)[:guaranteed].tolist()) for head in scores]
    rest = sorted(((float(scores[h, j]), h, j) for h in range(len(scores)) for j in range(scores.shape[1])
                   if j not in taken[h]), reverse=True)
    counts = [guaranteed] * len(scores)
    for _, head, _ in rest[:len(scores) * (budget - guaranteed)]:
        counts[head] += 1
    return counts


def top(values: torch.Tensor, count: int) -> set[int]:
    return set(torch.argsort(values, descending=True)[:count].tolist())


def projected_norms(values: torch.Tensor, model, layer: int) -> torch.Tensor:
    """(kv_heads, PREFIX): ||W_o^h v_j||_1 for every query head h, averaged over each KV head's query heads."""
    attention_module = model.model.layers[layer].self_attn
    weight = attention_module.o_proj.weight.double()
    head_dim, kv_heads = values.shape[-1], values.shape[0]
    query_heads = weight.shape[1] // head_dim
    norms = torch.stack([
        (values[h // (query_heads // kv_heads), :PREFIX] @ weight[:, h * head_dim:(h + 1) * head_dim].T).abs().sum(-1)
        for h in range(query_heads)])
    return norms.reshape(kv_heads, -1, PREFIX).mean(dim=1)


def two_stage(scores: torch.Tensor, norms: torch.Tensor, budget: int, epsilon: float) -> set[int]:
    """CriticalKV by hand: half the budget by score, the rest by (score + epsilon) * norm among the others."""
    first = top(scores, int(budget * 0.5))
    weighted = (scores + epsilon) * norms
    order = [j for j in torch.argsort(weighted, descending=True).tolist() if j not in first]
    return first | set(order[:budget - len(first)])


def kept_sets(record, kv_heads: int) -> list[set[int]]:
    """Each head's kept positions before the window, and a check that the window is kept whole."""
    sets = []
    for head in range(kv_heads):
        positions = record.head_positions(0, head).tolist()
        assert positions[-WINDOW:] == list(range(PREFIX, LENGTH))
        sets.append(set(positions[:-WINDOW]))
    return sets


def test_a_policy_class_takes_every_fact_of_the_method_it_names():
    """A policy declares its method by name (``class ...(Policy, method=...)``) and carries that method's facts from
    the registry, as a subclass of it does; a class that names no method (a shared base) takes none."""
    from dataclasses import fields

    from snapkv_cli.engine.methods import METHODS, Method
    from snapkv_cli.engine.policies.base import Policy

    class Base(Policy):
        pass

    class Heavy(Base, method="h2o"):
        pass

    class Heavier(Heavy):
        pass

    facts = [fact.name for fact in fields(Method)]
    assert not any(fact in vars(Base) for fact in facts)
    for cls in (Heavy, Heavier):
        assert {fact: getattr(cls, fact) for fact in facts} == {fact: getattr(METHODS["h2o"], fact) for fact in facts}
    assert Heavy.name == "h2o"


@pytest.mark.parametrize("method", ["snapkv", "pyramidkv"])
def test_snapkv_and_pyramidkv_keep_the_top_pooled_votes(method):
    cache, attentions, _, model = run(method)
    kv_heads = model.config.num_key_value_heads
    for layer, record in cache.records.items():
        scores = snapkv_scores(attentions[layer], kv_heads)
        budget = cache.policy.capacity(layer, len(attentions), LENGTH) - WINDOW
        assert kept_sets(record, kv_heads) == [top(scores[h], budget) for h in range(kv_heads)]
    if method == "pyramidkv":
        assert cache.records[0].kept_positions.shape[-1] > cache.records[2].kept_positions.shape[-1]


@pytest.mark.parametrize("floor", [0.2, 0.9])
def test_adakv_splits_the_layer_budget_by_one_top_k_over_heads_with_a_floor(floor):
    cache, attentions, _, model = run("adakv", head_floor=floor)
    kv_heads, budget = model.config.num_key_value_heads, CAPACITY - WINDOW
    uneven = False
    for layer, record in cache.records.items():
        scores = snapkv_scores(attentions[layer], kv_heads)
        counts = adaptive_budgets(scores, budget, floor)
        assert min(counts) >= int(floor * budget)
        assert (record.kept_per_head()[0] - WINDOW).tolist() == counts
        assert kept_sets(record, kv_heads) == [top(scores[h], counts[h]) for h in range(kv_heads)]
        uneven |= len(set(counts)) > 1
    assert uneven, "the tiny model should give its heads different budgets somewhere"


@pytest.mark.parametrize("method", [name for name in POLICY_NAMES if name != "full"])  # full scores nothing
def test_every_policy_scores_each_position_of_each_head_in_floating_point(method):
    model = prepare(tiny_model("llama", "eager"))
    cache = SnapKVCache(settings=CompressionSettings(method=method, window_size=WINDOW, max_capacity_prompt=CAPACITY))
    scores, policy_scores = [], cache.policy.scores
    cache.policy.scores = lambda context: scores.append(policy_scores(context)) or scores[-1]
    with torch.no_grad():
        model(prompt_ids(LENGTH, seed=11), past_key_values=cache, use_cache=True)
    assert len(scores) == model.config.num_hidden_layers
    assert all(s.is_floating_point() and s.shape == (1, model.config.num_key_value_heads, LENGTH) for s in scores)


def test_a_floor_of_one_token_still_reaches_a_head_that_no_vote_favours():
    from snapkv_cli.engine.allotment import head_prefix_budgets

    scores = torch.tensor([[[1.0] * 10, [0.0] * 10]])  # head 1 would get nothing from one top-k over both heads
    assert head_prefix_budgets(scores, 5, "adaptive", floor=0.2).tolist() == [[9, 1]]  # floor: int(0.2 * 5) = 1
    assert head_prefix_budgets(scores, 5, "adaptive", floor=0.0).tolist() == [[10, 0]]
    assert head_prefix_budgets(scores, 5, "uniform", floor=0.2).tolist() == [[5, 5]]
    assert head_prefix_budgets(scores, 5, "shared", floor=0.2).tolist() == [[5, 5]]


def test_shared_ranking_puts_each_heads_favourites_first():
    """By hand: head 0 orders the four positions before the window 2 > 0 > 1 > 3, head 1 orders them 3 > 2 > 0 > 1
    (places: head 0 gives 1, 2, 0, 3; head 1 gives 2, 3, 1, 0). Best places 1, 2, 0, 0 and sums 3, 5, 1, 3: so 2
    (best 0, sum 1), 3 (best 0, sum 3), 0, 1, for both heads; a budget of two keeps each head's favourite."""
    from snapkv_cli.engine.allotment import shared_ranking
    from snapkv_cli.engine.selection import select_kept_positions

    ranking = torch.tensor([[[0.5, 0.2, 0.9, 0.1, 7.0], [0.3, 0.1, 0.6, float("inf"), -1.0]]])  # last: the window
    shared = shared_ranking(ranking, window_size=1)
    assert shared.shape == ranking.shape and shared.dtype == torch.long
    assert torch.equal(shared[0, 0], shared[0, 1])
    assert shared[0, 0, :4].argsort(descending=True).tolist() == [2, 3, 0, 1]
    kept = select_kept_positions(shared, 1, torch.tensor([[2, 2]]))
    assert kept.positions.tolist() == [[[2, 3, 4], [2, 3, 4]]] and not kept.padded
    # each head by its own order would keep {0, 2} and {2, 3}
    assert select_kept_positions(ranking, 1, torch.tensor([[2, 2]])).positions.tolist() == [[[0, 2, 4], [2, 3, 4]]]


def test_shared_ranking_against_a_plain_python_fusion_with_ties_and_a_batch_of_two():
    """Each head's places (by score, ties by position), the best place over heads first, then the smaller sum of
    places: computed in plain Python for two prompts whose heads disagree, with many tied scores."""
    from snapkv_cli.engine.allotment import shared_ranking

    generator = torch.Generator().manual_seed(3)
    ranking = torch.randint(0, 4, (2, 3, 30), generator=generator).float()
    window, prefix_length, heads = 4, 26, 3
    shared = shared_ranking(ranking, window_size=window)
    assert shared.shape == ranking.shape
    for batch in range(2):
        places = []
        for head in range(heads):
            row = ranking[batch, head, :prefix_length].tolist()
            order = sorted(range(prefix_length), key=lambda position: (-row[position], position))
            places.append({position: place for place, position in enumerate(order)})
        fused = [-(min(p[i] for p in places) * heads * prefix_length + sum(p[i] for p in places))
                 for i in range(prefix_length)]
        for head in range(heads):
            assert shared[batch, head].tolist() == fused + [0] * window


def test_adaptive_heads_combine_with_pyramid_layers():
    cache, attentions, _, model = run("adakv", layer_budgets="pyramid")
    kv_heads = model.config.num_key_value_heads
    for layer, record in cache.records.items():
        budget = cache.policy.capacity(layer, len(attentions), LENGTH) - WINDOW
        counts = adaptive_budgets(snapkv_scores(attentions[layer], kv_heads), budget)
        assert (record.kept_per_head()[0] - WINDOW).tolist() == counts
    assert cache.policy.capacity(0, 3, LENGTH) > cache.policy.capacity(2, 3, LENGTH)


def test_criticalkv_takes_half_by_attention_and_half_by_attention_times_projected_value_norm():
    cache, attentions, values, model = run("criticalkv")
    kv_heads, budget = model.config.num_key_value_heads, CAPACITY - WINDOW
    differs_from_snapkv = False
    for layer, record in cache.records.items():
        scores = snapkv_scores(attentions[layer], kv_heads)
        norms = projected_norms(values[layer], model, layer)
        expected = [two_stage(scores[h], norms[h], budget, 1e-4 * WINDOW) for h in range(kv_heads)]
        assert kept_sets(record, kv_heads) == expected
        differs_from_snapkv |= expected != [top(scores[h], budget) for h in range(kv_heads)]
    assert differs_from_snapkv, "the value norms should change some choice"


@pytest.mark.parametrize("window", ["centered", "causal"])
def test_defensivekv_keeps_by_worst_case_votes_with_a_prior_floor_on_ada_criticalkv(window):
    cache, attentions, values, model = run("defensivekv", pooling_window=window)
    kv_heads, budget = model.config.num_key_value_heads, CAPACITY - WINDOW
    for layer, record in cache.records.items():
        rows = attentions[layer][:, -WINDOW:, :]  # (query_heads, window, keys)
        worst = []
        for head_rows in rows:
            for row in head_rows:
                smoothed = pooled(row[:PREFIX], 5, "avgpool", window)
                worst.append(smoothed * row[:PREFIX].sum() / smoothed.sum())
        worst = torch.stack(worst).reshape(kv_heads, -1, PREFIX).amax(dim=1)
        corrected = torch.stack([head.clamp(min=float(head.mean())) for head in worst])
        torch.testing.assert_close(record.scores[0, :, :PREFIX].double(), corrected, atol=1e-6, rtol=1e-5)
        window_keys = rows[..., PREFIX:].reshape(kv_heads, -1, WINDOW).amax(dim=1)  # each window key's largest vote
        torch.testing.assert_close(record.scores[0, :, PREFIX:].double(), window_keys, atol=1e-6, rtol=1e-5)
        counts = adaptive_budgets(corrected, budget)
        assert (record.kept_per_head()[0] - WINDOW).tolist() == counts
        norms = projected_norms(values[layer], model, layer)
        assert kept_sets(record, kv_heads) == [two_stage(corrected[h], norms[h], counts[h], 1e-4)
                                               for h in range(kv_heads)]


def test_chunk_ranking_scales_a_short_last_chunk_and_fills_the_remainder_with_its_best_tokens():
    from snapkv_cli.engine.policies.chunkkv import chunk_ranking
    from snapkv_cli.engine.selection import select_kept_positions

    # chunks of 4 before a 1-token window: [0-3] sums to 3.9, [4-7] to 0.4, [8-9] to 3.0, i.e. 6.0 over 4 tokens
    scores = torch.tensor([[[0.9, 1.2, 0.8, 1.0, 0.1, 0.1, 0.1, 0.1, 1.5, 1.5, 9.0]]])
    ranking = chunk_ranking(scores, prefix_length=10, chunk_size=4)
    kept = select_kept_positions(ranking, window_size=1, prefix_budgets=torch.tensor([[4]]))
    assert kept.positions[0, 0].tolist() == [1, 3, 8, 9, 10]


@pytest.mark.parametrize("chunk_size", [4, 7, 8])
def test_chunkkv_keeps_whole_chunks_by_summed_votes(chunk_size):
    cache, attentions, _, model = run("chunkkv", chunk_size=chunk_size)
    kv_heads, budget = model.config.num_key_value_heads, CAPACITY - WINDOW
    for layer, record in cache.records.items():
        votes = attentions[layer][:, -WINDOW:, :PREFIX].sum(dim=1).reshape(kv_heads, -1, PREFIX).mean(dim=1)
        expected = []
        for head in votes:
            chunks = [list(range(start, min(start + chunk_size, PREFIX))) for start in range(0, PREFIX, chunk_size)]
            worth = [float(head[chunk].sum()) * chunk_size / len(chunk) for chunk in chunks]
            kept: set[int] = set()
            for index in sorted(range(len(chunks)), key=lambda i: -worth[i]):
                room = budget - len(kept)
                if room <= 0:
                    break
                chunk = chunks[index]
                kept |= set(chunk) if len(chunk) <= room else {chunk[i] for i in top(head[chunk], room)}
            expected.append(kept)
        assert kept_sets(record, kv_heads) == expected


def kept_masks(cache, model, length: int, extra: int) -> dict[int, torch.Tensor]:
    """Per compressed layer, the (query_heads, length + extra, length + extra) boolean mask of a full forward in
    which every prompt row is causal and each later row sees exactly its KV head's kept prompt positions plus the
    tokens since the prompt."""
    query_heads = model.config.num_attention_heads
    group = query_heads // model.config.num_key_value_heads
    total = length + extra
    masks = {}
    for layer, record in cache.records.items():
        if record.sliding:
            continue
        allowed = torch.tril(torch.ones(total, total, dtype=torch.bool)).repeat(query_heads, 1, 1)
        for head in range(query_heads):
            row = torch.zeros(total, dtype=torch.bool)
            row[record.head_positions(0, head // group)] = True
            allowed[head, length:, :length] = row[:length]
        masks[layer] = allowed
    return masks


@pytest.mark.parametrize("family", FAMILIES)
def test_adakv_padded_layout_decodes_exactly_as_attention_over_each_heads_kept_keys(family):
    """Decode three tokens from the padded AdaKV cache (sdpa where the family has it, and eager), then recompute
    each step as a full eager forward whose attention, layer by layer and query head by query head, may only see
    that head's kept prompt positions (a per-head mask over the uncompressed prompt: no gathering, no padding)."""
    input_ids = prompt_ids(LENGTH, seed=5)
    steps = 3
    reference_model = prepare(tiny_model(family, "eager"))
    for implementation in ("sdpa", "eager"):
        model = prepare(tiny_model(family, implementation))
        cache = SnapKVCache(settings=CompressionSettings(method="adakv", window_size=WINDOW,
                                                         max_capacity_prompt=CAPACITY, kernel_size=5))
        decoded_logits, tokens = [], input_ids
        with torch.no_grad():
            logits = model(input_ids, past_key_values=cache, use_cache=True).logits[:, -1]
            for step in range(steps):
                token = logits.argmax(-1, keepdim=True)
                tokens = torch.cat([tokens, token], dim=1)
                position = torch.tensor([[LENGTH + step]])
                logits = model(token, past_key_values=cache, position_ids=position, cache_position=position[0],
                               use_cache=True).logits[:, -1]
                decoded_logits.append(logits[0])
        padded = [r for r in cache.records.values() if r.kept_counts is not None]
        assert padded and any(len(set(r.kept_counts[0].tolist())) > 1 for r in padded), "heads must differ"
        masks = kept_masks(cache, reference_model, LENGTH, steps)
        handles = []
        for layer, allowed in masks.items():
            additive = torch.zeros(allowed.shape).masked_fill(~allowed, torch.finfo(torch.float32).min)[None]

            def hook(module, args, kwargs, additive=additive):
                size = kwargs["hidden_states"].shape[1]
                kwargs["attention_mask"] = additive[:, :, :size, :size]
                return args, kwargs

            attention = reference_model.model.layers[layer].self_attn
            handles.append(attention.register_forward_pre_hook(hook, with_kwargs=True))
        try:
            with torch.no_grad():
                reference = reference_model(tokens).logits[0]
        finally:
            for handle in handles:
                handle.remove()
        for step in range(steps):
            torch.testing.assert_close(decoded_logits[step], reference[LENGTH + step], atol=1e-4, rtol=1e-4)


def test_padded_heads_report_kept_tokens_and_allocated_bytes_apart():
    cache, _, _, model = run("adakv")
    summary = cache.summary()
    per_slot = 2 * model.config.num_key_value_heads * 16 * 4  # (k, v) x kv heads x head_dim x float32
    slots = sum(r.kept_positions.shape[-1] for r in cache.records.values())
    assert summary["tokens_after"] == CAPACITY  # the mean over heads is the budget
    assert summary["tokens_allocated"] == round(slots / len(cache.records), 2) > CAPACITY
    assert summary["bytes_after"] == slots * per_slot


def test_padded_heads_refuse_attention_that_takes_no_mask(monkeypatch):
    model = prepare(tiny_model("llama", "sdpa"))
    monkeypatch.setattr(model.config, "_attn_implementation", "flash_attention_2")
    cache = SnapKVCache(settings=CompressionSettings(method="adakv", window_size=WINDOW, max_capacity_prompt=CAPACITY))
    with pytest.raises(UnsupportedAttention, match="sdpa") as raised, torch.no_grad():
        model(prompt_ids(LENGTH, seed=5), past_key_values=cache, use_cache=True)
    assert raised.value.method == "adakv" and raised.value.implementation == "flash_attention_2"


@pytest.mark.parametrize("family", ["llama", "gemma2"])
def test_layers_of_different_lengths_decode_under_eager_attention(family):
    """transformers sizes its causal mask by the first layer's cache; PyramidKV's layers differ in length, which
    eager attention cannot broadcast. The cache gives such layers a causal mask of their own length."""
    model = prepare(tiny_model(family, "eager"))
    input_ids = prompt_ids(LENGTH, seed=6)
    settings = CompressionSettings(method="pyramidkv", window_size=WINDOW, max_capacity_prompt=CAPACITY)
    with torch.no_grad():
        eager = model.generate(input_ids, past_key_values=SnapKVCache(settings=settings), max_new_tokens=5,
                               do_sample=False, pad_token_id=0)
    assert eager.shape[1] == LENGTH + 5
    if family == "llama":
        sdpa_model = prepare(tiny_model(family, "sdpa"))
        with torch.no_grad():
            sdpa = sdpa_model.generate(input_ids, past_key_values=SnapKVCache(settings=settings), max_new_tokens=5,
                                       do_sample=False, pad_token_id=0)
        assert torch.equal(eager, sdpa)


@pytest.mark.parametrize("spread", ["heavy-tailed", "flat"])
def test_criticalkv_second_stage_computes_few_norms_yet_selects_as_if_it_computed_all(spread):
    """The second stage visits positions by an upper bound and stops early; its top picks must equal those of the
    exact value computed at every position (by hand here), and on heavy-tailed attention it must skip most norms."""
    from snapkv_cli.engine.policies.criticalkv import per_query_head_weights, second_stage

    generator = torch.Generator().manual_seed(3)
    batch, kv_heads, group, positions, head_dim, hidden = 1, 2, 3, 2000, 16, 48
    values = torch.randn(batch, kv_heads, positions, head_dim, generator=generator)
    weight = torch.randn(hidden, kv_heads * group * head_dim, generator=generator)
    if spread == "heavy-tailed":
        scores = torch.rand(batch, kv_heads, positions, generator=generator) ** 12
    else:
        scores = 1 + 0.01 * torch.rand(batch, kv_heads, positions, generator=generator)
    eligible = torch.rand(batch, kv_heads, positions, generator=generator) > 0.05
    counts = torch.tensor([[40, 75]])
    ranking = second_stage(scores, values, per_query_head_weights(weight, kv_heads, head_dim), eligible, counts, 1e-4)
    for h in range(kv_heads):
        norms = torch.stack([(values[0, h] @ weight[:, q * head_dim:(q + 1) * head_dim].T).abs().sum(-1)
                             for q in range(h * group, (h + 1) * group)]).mean(0)
        exact = ((scores[0, h] + 1e-4) * norms).masked_fill(~eligible[0, h], float("-inf"))
        assert top(ranking[0, h], int(counts[0, h])) == top(exact, int(counts[0, h]))
        computed = int(torch.isfinite(ranking[0, h]).sum())
        if spread == "heavy-tailed":
            assert computed < positions // 4


@pytest.mark.parametrize("method", ["adakv", "pyramidkv"])
@pytest.mark.parametrize("implementation", ["sdpa", "eager"])
def test_several_tokens_at_once_after_compression_equal_one_at_a_time(method, implementation):
    """The masks of padded heads and of layers of other lengths stay causal among the tokens of one forward."""
    model = prepare(tiny_model("llama", implementation))
    input_ids, extra = prompt_ids(LENGTH, seed=8), torch.tensor([[17, 33, 51]])
    positions = torch.arange(LENGTH, LENGTH + 3)[None]
    settings = CompressionSettings(method=method, window_size=WINDOW, max_capacity_prompt=CAPACITY)
    together, apart = SnapKVCache(settings=settings), SnapKVCache(settings=settings)
    with torch.no_grad():
        model(input_ids, past_key_values=together, use_cache=True)
        model(input_ids, past_key_values=apart, use_cache=True)
        at_once = model(extra, past_key_values=together, position_ids=positions, cache_position=positions[0],
                        use_cache=True).logits[0]
        one_by_one = torch.stack([
            model(extra[:, i:i + 1], past_key_values=apart, position_ids=positions[:, i:i + 1],
                  cache_position=positions[0, i:i + 1], use_cache=True).logits[0, 0] for i in range(3)])
    torch.testing.assert_close(at_once, one_by_one, atol=1e-4, rtol=1e-4)
