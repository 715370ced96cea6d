"""Generation paths that must not change what is kept: chunked prefill, and a shared prefix forked per question."""

from __future__ import annotations

import pytest
import torch

from snapkv_cli.engine import CompressionSettings, SnapKVCache
from snapkv_cli.generation import GenerationOptions, build_prefix, generate_answer, prefill
from tests.helpers import DigitTokenizer, WordTokenizer, chunks, recorded_forwards, recording_presenter
from tests.tiny_models import prompt_ids, tiny_model


def run(model, ids, settings, **kwargs):
    chunk = kwargs.pop("chunk_size", None)
    return generate_answer(model, DigitTokenizer(), ids, settings,
                           GenerationOptions(max_new_tokens=8, prefill_chunk=chunk), **kwargs)


def assert_same_selection(first, second):
    assert first.generated_ids == second.generated_ids
    assert sorted(first.cache.records) == sorted(second.cache.records)
    for layer, record in first.cache.records.items():
        other = second.cache.records[layer]
        assert torch.equal(record.kept_positions, other.kept_positions), f"layer {layer}"
        if record.scores is not None:
            torch.testing.assert_close(record.scores, other.scores, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("family", ["llama", "qwen3", "gemma3_text", "phi3"])
@pytest.mark.parametrize("method", ["snapkv", "h2o", "pyramidkv"])
@pytest.mark.parametrize("chunk_size", [5, 16, 47])
def test_chunked_prefill_keeps_the_same_positions_and_answer(family, method, chunk_size):
    model = tiny_model(family)
    ids = prompt_ids(120, seed=11)[0].tolist()
    settings = CompressionSettings(method=method, window_size=8, max_capacity_prompt=40, kernel_size=5,
                                   pooling="maxpool")
    assert_same_selection(run(model, ids, settings), run(model, ids, settings, chunk_size=chunk_size))


@pytest.mark.parametrize("chunk_size", [None, 1, 16, 47, 120, 500])
def test_prefill_chunks_reach_the_model(chunk_size):
    """The model receives the prompt in chunks of exactly ``prefill_chunk`` tokens, then one token per decode step."""
    model = tiny_model("llama")
    ids = prompt_ids(120, seed=11)[0].tolist()
    settings = CompressionSettings(window_size=8, max_capacity_prompt=40)
    options = GenerationOptions(max_new_tokens=4, stop_at_eos=False, prefill_chunk=chunk_size)
    with recorded_forwards(model) as forwards:
        result = generate_answer(model, DigitTokenizer(), ids, settings, options)
    assert forwards == chunks(0, 120, chunk_size) + [(120 + step, 1) for step in range(3)]
    assert result.decode_steps == 3 and len(result.generated_ids) == 4


@pytest.mark.parametrize("chunk_size", [None, 7, 30])
def test_prefix_and_question_are_both_prefilled_in_chunks(chunk_size):
    """A shared prefix is prefilled in chunks, and so is each question's own part, which alone reaches the model."""
    model = tiny_model("llama")
    prefix, question = prompt_ids(100, seed=12)[0].tolist(), prompt_ids(20, seed=13)[0].tolist()
    settings = CompressionSettings(window_size=8, max_capacity_prompt=40)
    with recorded_forwards(model) as forwards:
        shared = build_prefix(model, prefix, window_size=8, chunk_size=chunk_size)
    assert forwards == chunks(0, 100, chunk_size)
    options = GenerationOptions(max_new_tokens=1, prefill_chunk=chunk_size)
    with recorded_forwards(model) as forwards:
        result = generate_answer(model, DigitTokenizer(), prefix + question, settings, options, prefix=shared)
    assert forwards == chunks(100, 120, chunk_size)
    assert result.reused_prefix_tokens == 100 and result.prompt_tokens == 120


def test_progress_counts_the_prefill_by_layer_and_the_answer_by_token():
    model = tiny_model("llama")
    progress = recording_presenter()
    generate_answer(model, DigitTokenizer(), prompt_ids(60, seed=3)[0].tolist(),
                    CompressionSettings(window_size=8, max_capacity_prompt=30),
                    GenerationOptions(max_new_tokens=5, stop_at_eos=False, prefill_chunk=25), progress=progress)
    units = 3 * model.config.num_hidden_layers  # three chunks through every attention layer
    assert progress.events == [["phase", "Prefill: 60 tokens", units, "layers", units],
                               ["phase", "Answering: up to 5 tokens", 5, "tokens", 5]]


@pytest.mark.parametrize("shared", [True, False])
def test_a_prefill_not_named_otherwise_reports_as_prefill_layer_by_layer(shared):
    model = tiny_model("llama")
    progress = recording_presenter()
    ids = prompt_ids(30, seed=4)[0].tolist()
    if shared:
        build_prefix(model, ids, window_size=4, chunk_size=10, progress=progress)
    else:
        with torch.inference_mode():
            prefill(model, ids, SnapKVCache(settings=CompressionSettings(window_size=4, max_capacity_prompt=12)),
                    chunk_size=10, progress=progress)
    units = 3 * model.config.num_hidden_layers  # three chunks through every attention layer
    assert progress.events == [["phase", "Prefill", units, "layers", units]]


def test_whole_words_rank_with_the_prompts_word_ids_on_the_models_device(monkeypatch):
    """With ``whole_words`` the prompt's word ids are read from the tokenizer and moved to the model's device (on a
    GPU they would otherwise stay on the CPU, away from the keys); tests/engine/test_words.py checks what is kept."""
    from snapkv_cli.generation import generate

    real, moved = generate.prompt_word_ids, []

    class Moving:  # the word ids, recording where they are moved
        def __init__(self, words):
            self.words = words

        def to(self, device):
            moved.append(device)
            return self.words.to(device)

    monkeypatch.setattr(generate, "prompt_word_ids", lambda tokenizer, ids: Moving(real(tokenizer, ids)))
    model = tiny_model("llama")
    ids = prompt_ids(120, seed=3)[0].tolist()
    settings = CompressionSettings(window_size=8, max_capacity_prompt=40, whole_words=True)
    options = GenerationOptions(max_new_tokens=2)
    words = generate_answer(model, WordTokenizer(), ids, settings, options)
    assert moved == [model.device]
    tokens = generate_answer(model, WordTokenizer(), ids, CompressionSettings(window_size=8, max_capacity_prompt=40),
                             options)
    assert moved == [model.device]  # only whole words need them
    assert any(not torch.equal(record.kept_positions, tokens.cache.records[layer].kept_positions)
               for layer, record in words.cache.records.items())


def test_sampler_draws_from_the_tempered_softmax():
    """Draws of the next token follow softmax(logits / temperature): not the argmax, not the untempered softmax."""
    from snapkv_cli.generation.generate import _next_token

    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0]])
    assert int(_next_token(logits, 0.0, None)) == 0
    for temperature in (0.5, 2.0):
        generator = torch.Generator().manual_seed(5)
        draws = [int(_next_token(logits, temperature, generator)) for _ in range(3000)]
        frequencies = torch.bincount(torch.tensor(draws), minlength=4).double() / len(draws)
        expected = torch.softmax(logits[0].double() / temperature, dim=0)
        assert (frequencies - expected).abs().max() < 0.03, (temperature, frequencies, expected)


def test_sampling_differs_from_greedy_and_repeats_for_a_seed():
    model = tiny_model("llama")
    ids = prompt_ids(60, seed=15)[0].tolist()
    settings = CompressionSettings(window_size=8, max_capacity_prompt=40)

    def answer(temperature: float, seed: int | None) -> list[int]:
        options = GenerationOptions(max_new_tokens=8, temperature=temperature, seed=seed, stop_at_eos=False)
        return generate_answer(model, DigitTokenizer(), ids, settings, options).generated_ids

    greedy = answer(0.0, None)
    assert answer(0.0, 3) == greedy  # a seed changes nothing at temperature 0
    sampled = {seed: answer(1.0, seed) for seed in range(4)}
    assert all(answer(1.0, seed) == tokens for seed, tokens in sampled.items())  # a seed repeats
    assert all(tokens != greedy for tokens in sampled.values())
    assert len({tuple(tokens) for tokens in sampled.values()}) == len(sampled)  # seeds differ


@pytest.mark.parametrize("family", ["llama", "gemma2"])
@pytest.mark.parametrize("method", ["snapkv", "h2o", "streamingllm"])
def test_forked_prefix_matches_separate_runs_and_stays_intact(family, method):
    model = tiny_model(family)
    prefix = prompt_ids(100, seed=12)[0].tolist()
    questions = [prompt_ids(6, seed=13)[0].tolist(), prompt_ids(20, seed=14)[0].tolist()]
    settings = CompressionSettings(method=method, window_size=12, max_capacity_prompt=48, kernel_size=5)
    shared = build_prefix(model, prefix, window_size=16, accumulate_attention=True)
    before = [layer.keys.clone() for layer in shared.layers]
    for question in questions:
        separate = run(model, prefix + question, settings)
        forked = run(model, prefix + question, settings, prefix=shared)
        assert forked.reused_prefix_tokens == 100
        assert_same_selection(separate, forked)
    assert all(torch.equal(layer.keys, kept) for layer, kept in zip(shared.layers, before))


def test_fork_refuses_a_larger_window_or_missing_attention_sums():
    model = tiny_model("llama")
    shared = build_prefix(model, prompt_ids(30)[0].tolist(), window_size=8)
    with pytest.raises(ValueError, match="window_size >= 16"):
        shared.fork(CompressionSettings(window_size=16, max_capacity_prompt=20))
    with pytest.raises(ValueError, match="accumulate_attention"):
        shared.fork(CompressionSettings(method="h2o", window_size=4, max_capacity_prompt=20))


def test_buffered_layer_writes_in_place_and_grows():
    from snapkv_cli.engine.layers import BufferedLayer

    layer, reference = BufferedLayer(), []
    layer.headroom = 4
    for step in range(11):
        tokens = 3 if step == 0 else 1
        keys = torch.randn(1, 2, tokens, 8)
        reference.append(keys)
        stored, _ = layer.update(keys, keys * 2)
        assert torch.equal(stored, torch.cat(reference, dim=2))
        assert stored.untyped_storage().data_ptr() == layer._key_buffer.untyped_storage().data_ptr()
    assert layer._key_buffer.shape[2] < 13 + 2 * 4  # reallocated only when the room ran out
    kept = torch.randn(1, 2, 5, 8)
    layer.replace_states(kept, kept)
    stored, _ = layer.update(reference[0][:, :, :1], reference[0][:, :, :1])
    assert torch.equal(stored, torch.cat([kept, reference[0][:, :, :1]], dim=2))


def plain_greedy_loop(model, ids: list[int], new_tokens: int):
    """Greedy decoding with transformers' own DynamicCache and the model's own forward, none of this project's hooks:
    written here on purpose, so the comparison below does not run the code it checks."""
    from transformers import DynamicCache

    from snapkv_cli.engine.hooks import detached, has_forward_hooks

    cache, generated = DynamicCache(config=model.config), []
    with detached(model), torch.inference_mode():
        assert has_forward_hooks(model) == []
        logits = model(torch.tensor([ids]), past_key_values=cache, use_cache=True).logits[:, -1]
        for step in range(new_tokens):
            token = logits.argmax(dim=-1, keepdim=True)
            generated.append(int(token))
            if step + 1 < new_tokens:
                logits = model(token, past_key_values=cache, use_cache=True).logits[:, -1]
    return generated, cache


@pytest.mark.parametrize("family", ["llama", "gemma3_text"])
def test_preallocated_cache_decodes_token_identically_to_plain_transformers(family):
    """The project's cache without compression (BufferedLayer: decoded tokens written in place, reallocated past its
    headroom) against transformers' concatenating DynamicCache in a plain loop: 300 tokens, the same ones."""
    from transformers.cache_utils import DynamicCache, DynamicLayer

    model = tiny_model(family)
    ids = prompt_ids(150, seed=21)[0].tolist()
    settings = CompressionSettings(method="full", window_size=8, max_capacity_prompt=200)
    buffered = generate_answer(model, DigitTokenizer(), ids, settings,
                               GenerationOptions(max_new_tokens=300, stop_at_eos=False, stop_on_repeat=False))
    full_layers = [layer for layer in buffered.cache.layers if type(layer).__name__ == "BufferedLayer"]
    assert full_layers and all(layer._key_buffer.shape[2] >= 150 + 299 for layer in full_layers)
    plain_ids, plain_cache = plain_greedy_loop(model, ids, 300)
    assert type(plain_cache) is DynamicCache and type(plain_cache.layers[0]) is DynamicLayer
    assert buffered.generated_ids == plain_ids


@pytest.mark.parametrize("family", ["llama", "gemma3_text"])
@pytest.mark.parametrize("method, budget", [("full", 200), ("snapkv", 40)])
def test_preallocated_cache_decodes_token_identically_to_concatenating_one(family, method, budget, monkeypatch):
    """Buffered layers vs the same cache (compressed or not) with transformers' concatenating DynamicLayers."""
    from snapkv_cli.engine import SnapKVCache

    model = tiny_model(family)
    ids = prompt_ids(150, seed=21)[0].tolist()
    settings = CompressionSettings(method=method, window_size=8, max_capacity_prompt=budget)
    long_run = GenerationOptions(max_new_tokens=300, stop_at_eos=False, stop_on_repeat=False)  # all 300, loops too
    buffered = generate_answer(model, DigitTokenizer(), ids, settings, long_run)
    assert any(type(layer).__name__ == "BufferedLayer" for layer in buffered.cache.layers)
    monkeypatch.setattr(SnapKVCache, "_use_buffered_layers", lambda self: None)
    concatenating = generate_answer(model, DigitTokenizer(), ids, settings, long_run)
    assert not any(type(layer).__name__ == "BufferedLayer" for layer in concatenating.cache.layers)
    assert buffered.generated_ids == concatenating.generated_ids


def test_model_dispatched_by_accelerate_compresses_and_answers_the_same(tiny_model_path, tmp_path):
    """A device map (here: two layers offloaded to disk, loaded layer by layer by accelerate's hooks) must not change
    the selection: window queries are recomputed with each layer's own weights, on that layer's device."""
    import transformers

    plain = transformers.AutoModelForCausalLM.from_pretrained(tiny_model_path).eval()
    device_map = {"model.embed_tokens": "cpu", "model.rotary_emb": "cpu", "model.layers.0": "cpu",
                  "model.layers.1": "disk", "model.layers.2": "disk", "model.norm": "cpu", "lm_head": "cpu"}
    dispatched = transformers.AutoModelForCausalLM.from_pretrained(
        tiny_model_path, device_map=device_map, offload_folder=str(tmp_path)).eval()
    assert getattr(dispatched.model.layers[1].self_attn.q_proj, "_hf_hook", None) is not None
    ids = prompt_ids(120, seed=31)[0].tolist()
    settings = CompressionSettings(window_size=8, max_capacity_prompt=40, kernel_size=5, pooling="maxpool")
    reference, result = run(plain, ids, settings), run(dispatched, ids, settings)
    assert all(record.compressed for record in result.cache.records.values())
    assert_same_selection(reference, result)


def test_streamed_text_is_the_answer_one_whole_character_at_a_time():
    """``on_text`` never gets half a multi-byte character: here each generated token is the next byte of a text."""
    text = "naïve café ☕ ok"
    data = text.encode("utf-8")

    class ByteTokenizer:
        eos_token_id = None

        def decode(self, ids, skip_special_tokens=True):
            return data[:len(ids)].decode("utf-8", errors="replace")

    pieces: list[str] = []  # the tokens are the random model's, the text this tokenizer's: no loop ends it early
    options = GenerationOptions(max_new_tokens=len(data), stop_at_eos=False, stop_on_repeat=False)
    result = generate_answer(tiny_model("llama"), ByteTokenizer(), prompt_ids(30, seed=16)[0].tolist(),
                             CompressionSettings(window_size=8, max_capacity_prompt=20), options,
                             on_text=pieces.append)
    assert pieces == list(text)
    assert result.answer == text and len(result.generated_ids) == len(data)


@pytest.mark.parametrize("inside", [1, 2])
def test_an_answer_cut_inside_a_character_drops_it_instead_of_showing_a_replacement_character(inside):
    """The token limit falls after ``inside`` of the 3 bytes of ☕: the answer and the stream end before it."""
    data = "café ☕ ok".encode()

    class ByteTokenizer:
        eos_token_id = None

        def decode(self, ids, skip_special_tokens=True):
            return data[:len(ids)].decode("utf-8", errors="replace")

    limit = data.index("☕".encode()) + inside
    pieces: list[str] = []
    result = generate_answer(tiny_model("llama"), ByteTokenizer(), prompt_ids(30, seed=16)[0].tolist(),
                             CompressionSettings(window_size=8, max_capacity_prompt=20),
                             GenerationOptions(max_new_tokens=limit, stop_at_eos=False), on_text=pieces.append)
    assert result.stop_reason == "max_new_tokens" and len(result.generated_ids) == limit
    assert result.answer == "café" and "".join(pieces) == "café "


def test_stop_tokens_come_from_the_generation_config_and_the_tokenizer():
    from types import SimpleNamespace

    from snapkv_cli.generation import stop_token_ids

    def model(eos):
        return SimpleNamespace(generation_config=SimpleNamespace(eos_token_id=eos))

    assert stop_token_ids(model([5, 7]), SimpleNamespace(eos_token_id=9)) == {5, 7, 9}
    assert stop_token_ids(model(4), SimpleNamespace(eos_token_id=None)) == {4}
    assert stop_token_ids(model(None), SimpleNamespace(eos_token_id=None)) == set()


def _eos_at(step: int, max_new_tokens: int):
    """A free run of the tiny model (EOS ignored), and a tokenizer whose EOS is the token that run gave at ``step``.

    Returns (model, prompt ids, settings, the free run's result, that tokenizer).
    """
    model = tiny_model("llama")
    ids = prompt_ids(50, seed=17)[0].tolist()
    settings = CompressionSettings(window_size=8, max_capacity_prompt=30)
    free = generate_answer(model, DigitTokenizer(), ids, settings, GenerationOptions(max_new_tokens=max_new_tokens,
                                                                                      stop_at_eos=False))
    tokenizer = DigitTokenizer()
    tokenizer.eos_token_id = free.generated_ids[step]
    return model, ids, settings, free, tokenizer


def test_generation_stops_at_an_eos_token_unless_told_not_to():
    model, ids, settings, free, tokenizer = _eos_at(3, max_new_tokens=8)
    stops = {tokenizer.eos_token_id, model.generation_config.eos_token_id}
    first_stop = next(index for index, token in enumerate(free.generated_ids) if token in stops)
    stopped = generate_answer(model, tokenizer, ids, settings, GenerationOptions(max_new_tokens=8))
    assert stopped.generated_ids == free.generated_ids[:first_stop]
    assert stopped.decode_steps == first_stop
    ignoring = generate_answer(model, tokenizer, ids, settings, GenerationOptions(max_new_tokens=8, stop_at_eos=False))
    assert ignoring.generated_ids == free.generated_ids


def test_timings_and_decode_rate():
    import time
    from dataclasses import replace

    model = tiny_model("llama")
    ids = prompt_ids(60, seed=18)[0].tolist()
    settings = CompressionSettings(window_size=8, max_capacity_prompt=30)
    started = time.perf_counter()
    result = generate_answer(model, DigitTokenizer(), ids, settings, GenerationOptions(max_new_tokens=5,
                                                                                        stop_at_eos=False))
    wall = time.perf_counter() - started
    assert result.prefill_s > 0 and result.decode_s > 0 and result.prefill_s + result.decode_s <= wall
    assert result.decode_steps == 4 and result.decode_tokens_per_s == pytest.approx(4 / result.decode_s)
    assert replace(result, decode_s=0.0).decode_tokens_per_s == 0.0
    nothing = generate_answer(model, DigitTokenizer(), ids, settings, GenerationOptions(max_new_tokens=0))
    assert nothing.generated_ids == [] and nothing.decode_steps == 0 and nothing.answer == ""


def test_synchronize_waits_for_the_given_cuda_device_only(monkeypatch):
    """The timings wait for the work queued on the model's own GPU (not the current one); a CPU has no queue."""
    waited: list = []
    monkeypatch.setattr(torch.cuda, "synchronize", waited.append)
    from snapkv_cli.generation import synchronize

    synchronize(torch.device("cpu"))
    assert waited == []
    synchronize(torch.device("cuda", 1))
    assert waited == [torch.device("cuda", 1)]


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_tensors_go_to_the_models_device_whatever_torchs_default_device(temperature):
    """Prompt chunks, decode positions and sampled tokens are made on the model's device: a default device set
    elsewhere (here ``meta``, where nothing can be computed) changes nothing."""
    model = tiny_model("llama")
    ids = prompt_ids(60, seed=3)[0].tolist()
    settings = CompressionSettings(window_size=8, max_capacity_prompt=30)
    options = GenerationOptions(max_new_tokens=5, stop_at_eos=False, prefill_chunk=25, temperature=temperature,
                                seed=2)
    expected = generate_answer(model, DigitTokenizer(), ids, settings, options)
    with torch.device("meta"):
        result = generate_answer(model, DigitTokenizer(), ids, settings, options)
    assert result.generated_ids == expected.generated_ids and len(expected.generated_ids) == 5


def test_memory_goes_back_to_the_os_after_a_compressing_prefill_only(monkeypatch):
    """Trimming the heap (glibc's ``malloc_trim``) takes time, and only a compressing prefill has something to give
    back (the uncompressed layers it freed): a shared prefix stored whole, or a cache that is not this project's,
    is not followed by one."""
    from transformers.cache_utils import DynamicCache

    import snapkv_cli.generation.generate as generate
    from snapkv_cli.engine import SnapKVCache, prepare
    from snapkv_cli.generation import prefill

    trims = []
    monkeypatch.setattr(generate, "return_freed_memory_to_os", lambda: trims.append("trim") or True)
    model = prepare(tiny_model("llama"))
    ids = prompt_ids(60, seed=3)[0].tolist()
    settings = CompressionSettings(window_size=8, max_capacity_prompt=30)
    with torch.inference_mode():
        prefill(model, ids, SnapKVCache(settings=settings, config=model.config), chunk_size=25)
        assert trims == ["trim"]
        build_prefix(model, ids, window_size=8)
        prefill(model, ids, SnapKVCache(settings=settings, config=model.config), compress=False)
        prefill(model, ids, DynamicCache(config=model.config))
    assert trims == ["trim"]


def test_a_prompt_with_nothing_to_prefill_is_refused():
    """No logits without a token: an empty prompt, a prompt no longer than its shared prefix, an empty prefix, or a
    chunk size below 1 is a ``ValueError`` saying so (not a failure further on, or a prefill of nothing)."""
    from snapkv_cli.engine import SnapKVCache
    from snapkv_cli.generation import prefill

    model = tiny_model("llama")
    prefix = prompt_ids(30, seed=4)[0].tolist()
    settings = CompressionSettings(window_size=8, max_capacity_prompt=20)
    with pytest.raises(ValueError, match=r"^nothing to prefill: the prompt needs"):
        prefill(model, [], SnapKVCache(settings=settings, config=model.config))
    with pytest.raises(ValueError, match=r"^nothing to prefill: the prompt needs"):
        generate_answer(model, DigitTokenizer(), [], settings, GenerationOptions(max_new_tokens=0))
    shared = build_prefix(model, prefix, window_size=8)
    with pytest.raises(ValueError, match=r"at least one token beyond its shared prefix$"):
        generate_answer(model, DigitTokenizer(), prefix, settings, GenerationOptions(max_new_tokens=2), prefix=shared)
    with pytest.raises(ValueError, match=r"^nothing to prefill: the prompt needs"):
        build_prefix(model, [], window_size=8)
    for chunk_size in (0, -3):  # a negative chunk would otherwise prefill nothing (no chunk in the range)
        with pytest.raises(ValueError, match=f"^chunk_size must be a positive number of tokens.*got {chunk_size}$"):
            prefill(model, prefix, SnapKVCache(settings=settings, config=model.config), chunk_size=chunk_size)


def test_decoded_tokens_sit_at_their_place_in_the_sequence_not_at_the_compressed_length():
    """After compression the cache holds fewer tokens than the prompt; each decoded token is still rotated at its
    true position (prompt length + step), as the model saw positions 0... during the prefill."""
    model = tiny_model("llama")
    ids = prompt_ids(60, seed=5)[0].tolist()
    settings = CompressionSettings(window_size=8, max_capacity_prompt=20)
    seen: list[list[int]] = []

    def record(module, args, kwargs):
        seen.append(kwargs["position_ids"][0].tolist() if "position_ids" in kwargs else args[1][0].tolist())

    handle = model.model.rotary_emb.register_forward_pre_hook(record, with_kwargs=True)
    try:
        result = generate_answer(model, DigitTokenizer(), ids, settings,
                                 GenerationOptions(max_new_tokens=4, stop_at_eos=False))
    finally:
        handle.remove()
    assert all(record.kept_positions.shape[-1] == 20 for record in result.cache.records.values())
    assert seen == [list(range(60)), [60], [61], [62]]


class MarkingTokenizer:
    """Token ids decode to their digits; ids in ``special`` are special tokens, shown as ``<s>`` unless skipped
    (transformers' default keeps them). Counts its decodes."""

    eos_token_id = None

    def __init__(self, special: set[int]):
        self.special, self.decodes = special, 0

    def decode(self, ids, skip_special_tokens=False):
        self.decodes += 1
        return " ".join("<s>" if i in self.special and not skip_special_tokens else str(i)
                        for i in ids if not (skip_special_tokens and i in self.special))


@pytest.mark.parametrize("mode", ["plain", "streamed", "stop strings"])
def test_answer_leaves_out_special_tokens_and_is_decoded_once_unless_watched(mode):
    """Special tokens never reach the answer or the stream; without a stream or stop strings to watch, the answer is
    decoded once at the end (not at every step: that costs quadratic time over a long answer)."""
    model = tiny_model("llama")
    ids = prompt_ids(50, seed=6)[0].tolist()
    settings = CompressionSettings(window_size=8, max_capacity_prompt=30)
    options = GenerationOptions(max_new_tokens=8, stop_at_eos=False,
                                stop_strings=("never said",) if mode == "stop strings" else ())
    free = generate_answer(model, DigitTokenizer(), ids, settings, options)
    tokenizer = MarkingTokenizer({free.generated_ids[2]})
    pieces: list[str] = []
    result = generate_answer(model, tokenizer, ids, settings, options,
                             on_text=pieces.append if mode == "streamed" else None)
    assert result.generated_ids == free.generated_ids
    expected = " ".join(str(i) for i in free.generated_ids if i != free.generated_ids[2])
    assert result.answer == expected and "<s>" not in result.answer
    assert result.stop_reason == "max_new_tokens"
    if mode == "streamed":
        assert "".join(pieces) == expected
    assert tokenizer.decodes == (1 if mode == "plain" else 8)


def test_an_answer_ended_by_eos_at_once_is_empty_and_streams_nothing():
    model, ids, settings, _, tokenizer = _eos_at(0, max_new_tokens=3)
    pieces: list[str] = []
    result = generate_answer(model, tokenizer, ids, settings, GenerationOptions(max_new_tokens=3),
                             on_text=pieces.append)
    assert result.answer == "" and result.generated_ids == [] and pieces == []
    assert result.stop_reason == "eos" and result.decode_steps == 0


def test_a_held_back_tail_that_never_became_a_stop_string_is_streamed_at_the_end():
    """The stream holds back a tail that may begin a stop string; when the token limit comes first, that tail is
    sent then, so the stream adds up to the answer, in non-empty pieces."""
    model = tiny_model("llama")
    ids = prompt_ids(80, seed=3)[0].tolist()
    settings = CompressionSettings(window_size=8, max_capacity_prompt=40)
    free = generate_answer(model, DigitTokenizer(), ids, settings, GenerationOptions(max_new_tokens=6,
                                                                                      stop_at_eos=False))
    last = free.answer.split(" ")[-1]
    stop = f" {last}!"  # the answer ends with all of it but the "!"
    pieces: list[str] = []
    result = generate_answer(model, DigitTokenizer(), ids, settings,
                             GenerationOptions(max_new_tokens=6, stop_at_eos=False, stop_strings=(stop,)),
                             on_text=pieces.append)
    assert result.answer == free.answer and result.stop_reason == "max_new_tokens"
    assert "".join(pieces) == free.answer and all(pieces)
    assert pieces[-1] == f" {last}"  # held back until the limit


def test_a_prefix_read_back_from_its_state_is_the_built_one_and_forks_without_compressing():
    """``build_prefix``'s cache and the one the document cache rebuilds from its tensors are interchangeable (same
    settings, same tensors); continued by a fork without settings of its own, the prefix keeps every token."""
    from snapkv_cli.engine import SnapKVCache
    from snapkv_cli.generation import prefill

    model = tiny_model("llama")
    prefix, question = prompt_ids(100, seed=12)[0].tolist(), prompt_ids(20, seed=13)[0].tolist()
    shared = build_prefix(model, prefix, window_size=8)
    state = shared.prefix_state().tensors()
    rebuilt = SnapKVCache.from_prefix_state(shared.prefix_state(), model.config, 8)
    assert rebuilt.settings == shared.settings and rebuilt.accumulate_attention == shared.accumulate_attention
    assert sorted(rebuilt.prefix_state().tensors()) == sorted(state)
    assert all(torch.equal(rebuilt.prefix_state().tensors()[name], tensor) for name, tensor in state.items())
    fork = shared.fork()
    with torch.inference_mode():
        prefill(model, question, fork, start=100)
    assert all(torch.equal(record.kept_positions[0, 0], torch.arange(120)) for record in fork.records.values())


@pytest.mark.parametrize("chunk_size", [None, 16])
def test_prefill_puts_tokens_at_the_given_start_and_computes_only_the_last_logits(chunk_size):
    """``prefill(start=s)`` rotates the tokens at positions s, s+1, ... (whatever the cache holds), and asks the model
    for the last position's logits only: a whole prompt's logits would cost prompt length x vocabulary floats."""
    from snapkv_cli.engine import SnapKVCache, prepare
    from snapkv_cli.generation import prefill

    model = prepare(tiny_model("llama"))
    ids = prompt_ids(40, seed=7)[0].tolist()
    positions: list[int] = []
    logits_rows: list[int] = []
    hooks = [model.model.rotary_emb.register_forward_pre_hook(
                 lambda module, args, kwargs: positions.extend(kwargs["position_ids"][0].tolist()), with_kwargs=True),
             model.register_forward_hook(lambda module, args, output: logits_rows.append(output.logits.shape[1]))]
    cache = SnapKVCache(settings=CompressionSettings(window_size=8, max_capacity_prompt=20), config=model.config)
    try:
        with torch.inference_mode():
            logits = prefill(model, ids, cache, start=25, chunk_size=chunk_size)
    finally:
        for hook in hooks:
            hook.remove()
    assert positions == list(range(25, 65))
    assert logits_rows == [1] * len(chunks(0, 40, chunk_size)) and logits.shape == (1, model.config.vocab_size)
