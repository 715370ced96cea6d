"""Prefill with a compressing cache, then decode token by token from the compressed cache, timing both."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from ..engine import CompressionSettings, SnapKVCache, prepare
from ..engine.families import is_attention_module
from ..engine.words import prompt_word_ids
from ..progress import Progress
from .allocator import return_freed_memory_to_os
from .decode_path import decode_path
from .options import GenerationOptions
from .stopping import LOOP_RULE, StopRule
from .streaming import AnswerText


@dataclass
class GenerationResult:
    """The answer and what it cost. ``cache`` holds the per-layer records of what was kept."""

    answer: str
    generated_ids: list[int]
    prompt_tokens: int
    cache: SnapKVCache
    prefill_s: float
    decode_s: float
    decode_steps: int  # forwards after the prefill (the first token comes from the prefill's logits)
    reused_prefix_tokens: int = 0
    stop_reason: str = "eos"  # why the answer ended: a key of .stopping.STOP_REASONS
    stop_string: str | None = None  # the stop string that ended the answer, when one did
    stop_strings: tuple[str, ...] = ()  # the stop strings in force (none: only the end-of-sequence token)
    stop_on_repeat: bool = True  # whether the loop rule was in force
    repeated: str | None = None  # the text of the n-gram that looped, when a loop ended the answer
    decode_path: str | None = None  # what the decoding steps ran and why, where not the weights as loaded

    @property
    def decode_tokens_per_s(self) -> float:
        return self.decode_steps / self.decode_s if self.decode_s > 0 else 0.0


def stop_token_ids(model, tokenizer) -> set[int]:
    ids = model.generation_config.eos_token_id
    ids = set(ids if isinstance(ids, (list, tuple)) else [ids] if ids is not None else [])
    if tokenizer.eos_token_id is not None:
        ids.add(tokenizer.eos_token_id)
    return ids


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@contextlib.contextmanager
def counting_layers(model, progress: Progress, name: str, chunks: int):
    """Tell ``progress`` of a phase ``name`` that advances by one at every attention layer's forward, over ``chunks``
    forwards of the model: the prefill's progress, layer by layer (the selection runs inside each layer's forward)."""
    layers = [module for module in model.modules() if is_attention_module(module)]
    progress.phase(name, len(layers) * chunks or None, "layers")
    handles = [layer.register_forward_hook(lambda *_: progress.advance(1)) for layer in layers]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def prefill(model, input_ids: list[int], cache: SnapKVCache, *, start: int = 0, chunk_size: int | None = None,
            compress: bool = True, progress: Progress | None = None, phase: str = "Prefill") -> torch.Tensor:
    """Run ``input_ids`` (at positions ``start``...) through the model into ``cache``; return the last logits
    (1, vocab). Raises ``ValueError`` for no tokens (there are no logits to return) or a chunk_size below 1.

    With ``chunk_size``, the tokens go in chunks (bounding activation memory); every chunk but the last only stores,
    and the last compresses, so selection stays exact. ``compress=False`` stores everything (a shared prefix).
    ``progress`` is told of it as the phase ``phase``, one unit per layer and chunk.
    """
    if not input_ids:  # a prompt no longer than its shared prefix, an empty prefix: no logits to return
        raise ValueError("nothing to prefill: the prompt needs at least one token beyond its shared prefix")
    if chunk_size is not None and chunk_size < 1:  # a negative one would prefill nothing (no chunk in the range)
        raise ValueError(f"chunk_size must be a positive number of tokens (or None: one pass), got {chunk_size}")
    device = model.device
    chunk_size = chunk_size or len(input_ids)
    logits = None
    counting = counting_layers(model, progress, phase, -(-len(input_ids) // chunk_size)) if progress is not None \
        else contextlib.nullcontext()
    with counting:
        for first in range(0, len(input_ids), chunk_size):
            chunk = torch.tensor([input_ids[first:first + chunk_size]], device=device)
            positions = torch.arange(start + first, start + first + chunk.shape[1], device=device)
            is_last = first + chunk_size >= len(input_ids)
            store_only = isinstance(cache, SnapKVCache) and (not is_last or not compress)
            with cache.deferred() if store_only else contextlib.nullcontext():
                output = model(chunk, cache=cache, position_ids=positions[None], cache_position=positions,
                               use_cache=True, logits_to_keep=1)
            logits = output.logits[:, -1]
    if compress and isinstance(cache, SnapKVCache):
        return_freed_memory_to_os()  # the uncompressed layers freed while compressing
    return logits


def _next_token(logits: torch.Tensor, temperature: float, generator: torch.Generator | None) -> torch.Tensor:
    """logits: (1, vocab) -> (1, 1) token id, greedy at temperature 0."""
    if temperature <= 0:
        return logits.argmax(dim=-1, keepdim=True)
    probabilities = torch.softmax(logits.float() / temperature, dim=-1)
    # drawn with the CPU generator, so that a seed gives the same answer on every device; made on the logits' device
    drawn = torch.multinomial(probabilities.cpu(), 1, generator=generator)
    return torch.tensor(drawn.tolist(), device=logits.device)


def build_prefix(model, prefix_ids: list[int], window_size: int, *, accumulate_attention: bool = False,
                 chunk_size: int | None = None, progress: Progress | None = None, phase: str = "Prefill",
                 continuing: SnapKVCache | None = None) -> SnapKVCache:
    """Prefill a question-independent prefix and keep its full KV, ready for :meth:`SnapKVCache.fork`
    (``progress`` is told of it as the phase ``phase``). ``continuing``: a prefix of the first tokens of
    ``prefix_ids`` (a :meth:`SnapKVCache.head` of an earlier one), which only the rest are prefilled into."""
    prepare(model)
    cache = continuing if continuing is not None else SnapKVCache(
        settings=CompressionSettings(method="full", window_size=window_size, max_capacity_prompt=window_size + 1),
        config=model.config, accumulate_attention=accumulate_attention)
    start = cache.get_seq_length()
    with torch.inference_mode():
        prefill(model, prefix_ids[start:], cache, start=start, chunk_size=chunk_size, compress=False,
                progress=progress, phase=phase)
    return cache


def generate_answer(
    model,
    tokenizer,
    input_ids: list[int],
    settings: CompressionSettings,
    options: GenerationOptions = GenerationOptions(),
    *,
    prefix: SnapKVCache | None = None,
    on_text: Callable[[str], None] | None = None,
    progress: Progress | None = None,
) -> GenerationResult:
    """Answer from a prompt whose KV cache is compressed at prefill; ``on_text`` receives the answer as it grows
    (in whole characters), ``progress`` the prefill's and the decoding's phases.

    With ``prefix`` (from :func:`build_prefix` over the first ``prefix.get_seq_length()`` tokens of ``input_ids``),
    only the rest of the prompt is prefilled, on a fork of the prefix, and the selection still sees every key.
    The answer ends at an end-of-sequence token, a stop string, a loop (``options.stop_on_repeat``) or the token
    limit; ``stop_reason`` says which (and ``stop_string`` which stop string). With ``options.decode_weights``
    ``bfloat16`` the decoding steps (not the prefill) multiply by bfloat16 copies of the weights where that applies
    (:mod:`.decode_path`); ``decode_path`` says what they ran, or why not.
    """
    prepare(model)
    device = model.device
    path, not_applied = decode_path(model, options.decode_weights)
    stepping = path.step if path is not None else contextlib.nullcontext
    if prefix is not None:
        cache, start = prefix.fork(settings), prefix.get_seq_length()
    else:
        cache, start = SnapKVCache(settings=settings, config=model.config), 0
    if settings.whole_words:
        cache.word_ids = prompt_word_ids(tokenizer, input_ids).to(device)
    prompt_length = len(input_ids)
    generator = torch.Generator().manual_seed(options.seed) if options.seed is not None else None
    stops = stop_token_ids(model, tokenizer) if options.stop_at_eos else set()
    text = AnswerText(tokenizer, StopRule(options.stop_strings) if options.stop_strings else None, on_text)
    loops = LOOP_RULE.watch() if options.stop_on_repeat else None
    repeated = None
    decode_steps = 0
    stop_reason, stop_string = "max_new_tokens", None
    beyond = f" after the {start}-token prefix" if start else ""
    with torch.inference_mode():
        synchronize(device)
        started = time.perf_counter()
        logits = prefill(model, input_ids[start:], cache, start=start, chunk_size=options.prefill_chunk,
                         progress=progress, phase=f"Prefill: {prompt_length - start} tokens{beyond}")
        synchronize(device)
        prefill_s = time.perf_counter() - started
        if progress is not None and options.max_new_tokens:
            progress.phase(f"Answering: up to {options.max_new_tokens} tokens", options.max_new_tokens, "tokens")
        started = time.perf_counter()
        for step in range(options.max_new_tokens):
            token = _next_token(logits, options.temperature, generator)
            token_id = int(token)
            if token_id in stops:
                stop_reason = "eos"
                break
            if progress is not None:
                progress.advance(1)
            if text.add(token_id):
                stop_reason, stop_string = "stop_string", text.stop_string
                break
            looped = loops.add(token_id) if loops is not None else None
            if looped is not None:
                stop_reason, repeated = "repetition", tokenizer.decode(list(looped), skip_special_tokens=True)
                break
            if step + 1 == options.max_new_tokens:
                break
            position = torch.tensor([prompt_length + step], device=device)
            decode_steps += 1
            with stepping():
                logits = model(token, cache=cache, position_ids=position[None], cache_position=position,
                               use_cache=True).logits[:, -1]
        synchronize(device)
        decode_s = time.perf_counter() - started
    answer = text.finish()
    return GenerationResult(answer=answer, generated_ids=text.ids, prompt_tokens=prompt_length, cache=cache,
                            prefill_s=prefill_s, decode_s=decode_s, decode_steps=decode_steps,
                            reused_prefix_tokens=start, stop_reason=stop_reason, stop_string=stop_string,
                            stop_strings=options.stop_strings, stop_on_repeat=options.stop_on_repeat, repeated=repeated,
                            decode_path=path.describe() if path is not None else not_applied)
