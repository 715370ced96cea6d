"""One question about one document, end to end: prompt -> compressed prefill -> answer -> report.

The CLI and the benchmarks call this; it knows nothing of terminals.
"""

from __future__ import annotations

import time
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


def checked_prompt(loaded: LoadedModel, document: Document, question: str, settings: CompressionSettings,
                   template: Template, *, max_new_tokens: int, truncate: str | None) -> Prompt:
    """The prompt for ``question``, leaving ``max_new_tokens`` of room in the context; a bad fit fails here."""
    try:
        check_supported(loaded.model.config)
    except ValueError as error:
        raise UserError(str(error)) from None
    prompt = build_prompt(loaded.tokenizer, document, question, template,
                          max_tokens=context_length(loaded) - max_new_tokens, truncate=truncate)
    if settings.is_fraction:
        settings.capacity_for(prompt.length)  # a fraction too small for this prompt fails before the prefill
    return prompt


def _report(loaded: LoadedModel, prompt: Prompt, result: GenerationResult, document: Document, question: str,
            load_s: float) -> dict:
    return build_report(model_name=loaded.name, device=str(loaded.device), dtype=torch_dtype_name(loaded.dtype),
                        prompt=prompt, result=result, load_s=load_s, document=document.source, question=question)


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
    chunk_size: int | None = None,
    generate: bool = True,
    on_prompt: Callable[[Prompt], None] | None = None,
    on_text: Callable[[str], None] | None = None,
) -> Answer:
    """Answer ``question`` about ``document`` with ``loaded``'s model and a cache compressed per ``settings``.

    ``chunk_size`` prefills in chunks of that many tokens (the selection stays exact). ``generate=False`` stops after
    the prefill and selection (the answer is empty): ``max_new_tokens`` then only reserves room in the context, so
    the prompt is the very one a generating run sees.
    """
    prompt = checked_prompt(loaded, document, question, settings, template, max_new_tokens=max_new_tokens,
                            truncate=truncate)
    if on_prompt is not None:
        on_prompt(prompt)
    result = generate_answer(loaded.model, loaded.tokenizer, prompt.input_ids, settings,
                             max_new_tokens=max_new_tokens if generate else 0, temperature=temperature, seed=seed,
                             on_text=on_text, chunk_size=chunk_size)
    return Answer(prompt=prompt, result=result,
                  report=_report(loaded, prompt, result, document, question, loaded.load_seconds))


def select(loaded: LoadedModel, document: Document, question: str, settings: CompressionSettings,
           template: Template, **options) -> Answer:
    """The prompt, prefill and selection of :func:`ask` with the same arguments, without decoding."""
    return ask(loaded, document, question, settings, template, generate=False, **options)


@dataclass
class SharedPrefix:
    """The question-independent start of the prompt, prefilled once with its full KV (or loaded from disk).

    source: ``prefill`` or ``disk``; seconds: what building or loading it took; doc_cache: the ``doc_cache`` part of
    the report (``status`` off, hit, stored, rebuilt or not_stored, with ``reason``, ``path`` and ``bytes``).
    """

    ids: list[int]
    cache: object
    source: str
    seconds: float
    doc_cache: dict


class DocumentSession:
    """Answer question after question about one document, prefilling the prompt's prefix once.

    Each question's prompt is built exactly as :func:`ask` builds it; its question-independent prefix
    (``Prompt.prefix_length`` tokens) is prefilled once with its full KV kept (``build_prefix``), or loaded from
    ``doc_cache``; each question is then prefilled on a fork of it, SnapKV selects with that question's window over
    all keys, and the answer decodes from the compressed fork, leaving the prefix intact for the next question. The
    kept positions and greedy answers are those of separate :func:`ask` runs with the same settings.
    """

    def __init__(self, loaded: LoadedModel, document: Document, settings: CompressionSettings, template: Template, *,
                 max_new_tokens: int = 256, truncate: str | None = None, doc_cache=None,
                 chunk_size: int | None = None, on_progress: Callable[[str], None] | None = None):
        try:
            check_supported(loaded.model.config)
        except ValueError as error:
            raise UserError(str(error)) from None
        from .engine import POLICIES

        self.loaded, self.document, self.settings, self.template = loaded, document, settings, template
        self.max_new_tokens, self.truncate, self.doc_cache = max_new_tokens, truncate, doc_cache
        self.chunk_size = chunk_size
        self.on_progress = on_progress or (lambda _message: None)
        self.attention_sums = POLICIES[settings.method].accumulates_attention
        self.prefix: SharedPrefix | None = None
        self.asked = 0

    def build_prompt(self, question: str) -> Prompt:
        return checked_prompt(self.loaded, self.document, question, self.settings, self.template,
                              max_new_tokens=self.max_new_tokens, truncate=self.truncate)

    def prepare(self, prompt: Prompt) -> tuple[SharedPrefix, bool]:
        """The shared prefix for ``prompt`` and whether it was built or loaded just now (a truncated document can
        give a longer question a shorter prefix: that one gets its own)."""
        prefix_ids = prompt.input_ids[:prompt.prefix_length]
        if self.prefix is not None and self.prefix.ids == prefix_ids:
            return self.prefix, False
        self.prefix = None  # free the old prefix before building the next
        self.prefix = self._obtain(prefix_ids)
        return self.prefix, True

    def _obtain(self, prefix_ids: list[int]) -> SharedPrefix:
        from . import doc_cache as disk
        from .generation import build_prefix, synchronize

        status = {"enabled": self.doc_cache is not None, "status": "off", "reason": None, "path": None,
                  "bytes": None}
        key = None
        if self.doc_cache is not None:
            key = disk.prefix_key(self.loaded, self.template, prefix_ids, self.settings.window_size,
                                  self.attention_sums, prefill_chunk=self.chunk_size)
            self.on_progress(f"Loading the document's cache ({len(prefix_ids)} tokens)...")
            lookup = self.doc_cache.load(key, prefix_ids, self.loaded.model)
            status.update(status=lookup.status, reason=lookup.reason, path=str(lookup.path))
            if lookup.cache is not None:
                status["bytes"] = lookup.bytes
                return SharedPrefix(prefix_ids, lookup.cache, "disk", lookup.seconds, status)
        self.on_progress(f"Reading the document: {len(prefix_ids)} tokens...")
        synchronize(self.loaded.device)
        started = time.perf_counter()
        cache = build_prefix(self.loaded.model, prefix_ids, self.settings.window_size,
                             accumulate_attention=self.attention_sums, chunk_size=self.chunk_size)
        synchronize(self.loaded.device)
        seconds = time.perf_counter() - started
        if self.doc_cache is not None:
            self.on_progress("Saving the document's cache...")
            stored, reason, size = self.doc_cache.store(key, prefix_ids, cache, document=self.document.source)
            if stored:
                status.update(status="stored" if status["status"] == "miss" else "rebuilt", bytes=size)
            else:
                status.update(status="not_stored", reason=reason, bytes=size or None)
        return SharedPrefix(prefix_ids, cache, "prefill", seconds, status)

    def ask(self, question: str, *, temperature: float = 0.0, seed: int | None = None,
            on_prompt: Callable[[Prompt], None] | None = None,
            on_text: Callable[[str], None] | None = None) -> Answer:
        """Answer one question; the report gets ``question_index``, ``reused_prefix_tokens``, ``prefix`` and
        ``doc_cache`` keys and ``timings.prefix_s``."""
        prompt = self.build_prompt(question)
        if on_prompt is not None:
            on_prompt(prompt)
        prefix, fresh = self.prepare(prompt)
        self.on_progress(f"Prefill: {prompt.length - prompt.prefix_length} question tokens...")
        result = generate_answer(self.loaded.model, self.loaded.tokenizer, prompt.input_ids, self.settings,
                                 max_new_tokens=self.max_new_tokens, temperature=temperature, seed=seed,
                                 on_text=on_text, prefix=prefix.cache, prefix_length=prompt.prefix_length)
        report = _report(self.loaded, prompt, result, self.document, question,
                         self.loaded.load_seconds if self.asked == 0 else 0.0)
        source = prefix.source if fresh else "memory"
        report["question_index"] = self.asked
        report["reused_prefix_tokens"] = 0 if source == "prefill" else prompt.prefix_length
        report["prefix"] = {"tokens": prompt.prefix_length, "source": source,
                            "seconds": round(prefix.seconds, 3) if fresh else 0.0}
        report["doc_cache"] = dict(prefix.doc_cache)  # what the disk cache did for this prefix (hit, stored...)
        report["timings"]["prefix_s"] = report["prefix"]["seconds"]
        self.asked += 1
        return Answer(prompt=prompt, result=result, report=report)
