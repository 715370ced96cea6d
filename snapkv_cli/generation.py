"""Prefill with a compressing cache, then decode token by token from the compressed cache, timing both."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

import torch

from .engine import CompressionSettings, SnapKVCache, prepare


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

    @property
    def decode_tokens_per_s(self) -> float:
        return self.decode_steps / self.decode_s if self.decode_s > 0 else 0.0


def stop_token_ids(model, tokenizer) -> set[int]:
    ids = model.generation_config.eos_token_id
    ids = set(ids if isinstance(ids, (list, tuple)) else [ids] if ids is not None else [])
    if tokenizer.eos_token_id is not None:
        ids.add(tokenizer.eos_token_id)
    return ids


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _next_token(logits: torch.Tensor, temperature: float, generator: torch.Generator | None) -> torch.Tensor:
    """logits: (1, vocab) -> (1, 1) token id, greedy at temperature 0."""
    if temperature <= 0:
        return logits.argmax(dim=-1, keepdim=True)
    probabilities = torch.softmax(logits.float() / temperature, dim=-1)
    return torch.multinomial(probabilities.cpu(), 1, generator=generator).to(logits.device)


def generate_answer(
    model,
    tokenizer,
    input_ids: list[int],
    settings: CompressionSettings,
    *,
    max_new_tokens: int = 256,
    temperature: float = 0.0,
    seed: int | None = None,
    on_text: Callable[[str], None] | None = None,
) -> GenerationResult:
    """Answer from a prompt whose KV cache is compressed at prefill; ``on_text`` receives the answer as it grows."""
    prepare(model)
    device = model.device
    cache = SnapKVCache(settings=settings, config=model.config)
    prompt = torch.tensor([input_ids], device=device)
    prompt_length = prompt.shape[1]
    generator = torch.Generator().manual_seed(seed) if seed is not None else None
    stops = stop_token_ids(model, tokenizer)
    generated: list[int] = []
    emitted = ""
    decode_steps = 0
    with torch.inference_mode():
        _synchronize(device)
        started = time.perf_counter()
        logits = model(prompt, cache=cache, use_cache=True).logits[:, -1]
        _synchronize(device)
        prefill_s = time.perf_counter() - started
        started = time.perf_counter()
        for step in range(max_new_tokens):
            token = _next_token(logits, temperature, generator)
            token_id = int(token)
            if token_id in stops:
                break
            generated.append(token_id)
            if on_text is not None:
                text = tokenizer.decode(generated, skip_special_tokens=True)
                if not text.endswith("\ufffd"):  # wait for the rest of a multi-byte character
                    on_text(text[len(emitted):])
                    emitted = text
            if step + 1 == max_new_tokens:
                break
            position = torch.tensor([[prompt_length + step]], device=device)
            decode_steps += 1
            logits = model(token, cache=cache, position_ids=position, cache_position=position[0],
                           use_cache=True).logits[:, -1]
        _synchronize(device)
        decode_s = time.perf_counter() - started
    answer = tokenizer.decode(generated, skip_special_tokens=True)
    if on_text is not None and len(answer) > len(emitted):
        on_text(answer[len(emitted):])
    return GenerationResult(answer=answer.strip(), generated_ids=generated, prompt_tokens=prompt_length, cache=cache,
                            prefill_s=prefill_s, decode_s=decode_s, decode_steps=decode_steps)
