"""One question about one document, end to end: prompt -> compressed prefill -> answer -> report.

The CLI and the benchmarks call this; it knows nothing of terminals.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from .documents import Document
from .engine import CompressionSettings, check_supported
from .errors import UserError
from .generation import GenerationResult, generate_answer
from .models.loader import LoadedModel, torch_dtype_name
from .prompting import Prompt, Template, build_prompt
from .report import build_report


@dataclass
class Answer:
    prompt: Prompt
    result: GenerationResult
    report: dict


def context_length(loaded: LoadedModel) -> int:
    config = loaded.model.config.get_text_config()
    return int(getattr(config, "max_position_embeddings", None) or loaded.tokenizer.model_max_length)


def ask(
    loaded: LoadedModel,
    document: Document,
    question: str,
    settings: CompressionSettings,
    template: Template,
    *,
    max_new_tokens: int = 256,
    temperature: float = 0.0,
    seed: int | None = None,
    truncate: str | None = None,
    on_prompt: Callable[[Prompt], None] | None = None,
    on_text: Callable[[str], None] | None = None,
) -> Answer:
    """Answer ``question`` about ``document`` with ``loaded``'s model and a cache compressed per ``settings``."""
    try:
        check_supported(loaded.model.config)
    except ValueError as error:
        raise UserError(str(error)) from None
    prompt = build_prompt(loaded.tokenizer, document, question, template,
                          max_tokens=context_length(loaded) - max_new_tokens, truncate=truncate)
    if settings.is_fraction:
        settings.capacity_for(prompt.length)  # a fraction too small for this prompt fails before the prefill
    if on_prompt is not None:
        on_prompt(prompt)
    result = generate_answer(loaded.model, loaded.tokenizer, prompt.input_ids, settings,
                             max_new_tokens=max_new_tokens, temperature=temperature, seed=seed, on_text=on_text)
    report = build_report(model_name=loaded.name, device=str(loaded.device), dtype=torch_dtype_name(loaded.dtype),
                          prompt=prompt, result=result, load_s=loaded.load_seconds, document=document.source,
                          question=question)
    return Answer(prompt=prompt, result=result, report=report)


def select(
    loaded: LoadedModel,
    document: Document,
    question: str,
    settings: CompressionSettings,
    template: Template,
    *,
    max_new_tokens: int = 256,
    truncate: str | None = None,
    on_prompt: Callable[[Prompt], None] | None = None,
) -> Answer:
    """The prompt, prefill and selection of :func:`ask` with the same arguments, without decoding.

    ``max_new_tokens`` only reserves room in the context, as in :func:`ask`, so both build the very same prompt;
    the result's cache holds the per-layer records, its answer is empty and nothing is generated.
    """
    try:
        check_supported(loaded.model.config)
    except ValueError as error:
        raise UserError(str(error)) from None
    prompt = build_prompt(loaded.tokenizer, document, question, template,
                          max_tokens=context_length(loaded) - max_new_tokens, truncate=truncate)
    if settings.is_fraction:
        settings.capacity_for(prompt.length)
    if on_prompt is not None:
        on_prompt(prompt)
    result = generate_answer(loaded.model, loaded.tokenizer, prompt.input_ids, settings, max_new_tokens=0)
    report = build_report(model_name=loaded.name, device=str(loaded.device), dtype=torch_dtype_name(loaded.dtype),
                          prompt=prompt, result=result, load_s=loaded.load_seconds, document=document.source,
                          question=question)
    return Answer(prompt=prompt, result=result, report=report)
