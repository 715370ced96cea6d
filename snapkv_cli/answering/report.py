"""The report of one answer: a typed object with one stable JSON schema, built once per answer.

``Report.to_json()`` is the ``--json`` object of ``snapkv ask`` and ``snapkv chat`` (one per answer), the base of
``snapkv inspect --json`` (``answer=False`` leaves out what describes the answer), and what the terminal views read.
The schema is documented in docs/usage.md; :data:`SCHEMA_VERSION` changes when a key changes meaning or goes away
(new keys are added without a change).
"""

from __future__ import annotations

import resource
import sys
import typing
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from ..engine import CompressionSettings, SnapKVCache
from ..engine.settings import settings_declarations
from ..generation import GenerationOptions, GenerationResult
from ..generation.options import reported_options
from .prompting import Prompt

SCHEMA_VERSION = 1


def peak_rss_bytes() -> int:
    """Peak resident memory of this process so far (Linux reports KiB, macOS bytes)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)


@dataclass(frozen=True)
class SettingsInfo:
    """The compression settings as applied to this prompt (``max_capacity_prompt`` resolved from ``budget``, the
    method's own choice where a setting was left to it): ``values`` holds every reported setting, and its ``given_as``
    key, in declaration order (:meth:`~snapkv_cli.engine.CompressionSettings.applied`), so a setting declared
    ``reported`` needs nothing here. Each reads as an attribute too (``info.window_size``); ``values`` is the JSON
    settings block."""

    values: dict[str, Any]

    @staticmethod
    def declared_types() -> dict[str, Any]:
        """The keys of ``values`` in their order, each with its setting's declared type (the JSON schema's)."""
        hints = typing.get_type_hints(CompressionSettings)
        types = {}
        for name, declared in settings_declarations(CompressionSettings).items():
            if declared.reported:
                types[name] = hints[name]
                if declared.given_as is not None:
                    types[declared.given_as] = hints[name]
        return types

    def __getattr__(self, name: str) -> Any:
        """A reported setting's value (Python asks here only for names that are not attributes of the class)."""
        values = vars(self).get("values", {})  # none yet while a copy or an unpickled instance is being built
        if name not in values:
            raise AttributeError(f"{type(self).__name__!r} has no setting {name!r}")
        return values[name]


@dataclass(frozen=True)
class PromptInfo:
    """Token counts of the prompt's parts and how much of the observation window is question."""

    document: int
    question: int
    template: int
    window_size: int
    question_tokens_in_window: int
    question_tokens: int
    question_fits: bool
    truncated_document_tokens: int
    template_name: str = "qa"  # the template used (a base model gets its completion variant, e.g. qa_base)
    style: str = "chat"  # "chat" (the model's chat template) or "completion" (plain text ending in "Answer:")


@dataclass(frozen=True)
class StopInfo:
    """Where the answer ends and why (:mod:`snapkv_cli.generation.stopping`). ``reason`` is one of ``STOP_REASONS``:
    ``eos`` (the model's end-of-sequence token), ``stop_string`` (before the first of the stop strings, a base
    model's rule; the one found is ``stop_string``), ``max_new_tokens`` (the token limit cut it) or ``repetition`` (a
    loop, by ``LOOP_RULE`` when ``stop_on_repeat``; the n-gram that looped is ``repeated``).
    ``stopped_by`` says both in one key of the schema, derived from them: the stop string that ended it, else the
    reason. The rules in force (the stop strings, ``stop_on_repeat``) are the report's generation options, which the
    JSON's ``stop`` block shows beside these keys (:meth:`Report.to_json`)."""

    stopped_by: str = field(init=False)
    reason: str = "eos"
    stop_string: str | None = None
    repeated: str | None = None

    def __post_init__(self):
        object.__setattr__(self, "stopped_by", self.stop_string if self.reason == "stop_string" else self.reason)

    @property
    def cut(self) -> bool:
        """The answer did not end by itself: the token limit or the loop rule ended it."""
        return self.reason in ("max_new_tokens", "repetition")


@dataclass(frozen=True)
class CacheInfo:
    """Prompt KV before and after compression. ``tokens_after`` is the mean number of prompt tokens a (layer, KV
    head) keeps, ``tokens_after_min`` and ``tokens_after_max`` the fewest and most any keeps, ``tokens_allocated`` the
    mean number of cache slots holding them (more only where heads keep different numbers and are padded, as AdaKV's
    are); ``bytes_after`` is what is allocated, padding included."""

    tokens_before: int
    tokens_after: float
    tokens_allocated: float
    bytes_before: int
    bytes_after: int
    compression_ratio: float
    tokens_after_min: int = 0
    tokens_after_max: int = 0


@dataclass(frozen=True)
class LayerRow:
    layer: int
    kept_tokens_min: int
    kept_tokens_max: int
    kept_tokens_mean: float
    capacity: int
    compressed: bool
    sliding_window: bool


@dataclass(frozen=True)
class PageRow:
    """One document page: its prompt tokens and the share of them kept over all (layer, KV head) pairs."""

    page: int
    document_tokens: int
    kept_share: float


@dataclass(frozen=True)
class Timings:
    """Seconds. ``prefill_s`` is the question's prefill (the whole prompt's when nothing was shared);
    ``prefix_s`` what building or loading a shared prefix took for this answer (0 when prefilled in one pass or
    reused); ``wall_s`` the answer's wall time, from its question to its report (prompt, prefix, prefill, decoding;
    not the model's load)."""

    load_s: float
    prefill_s: float
    decode_s: float
    decode_tokens_per_s: float
    selection_s: float
    prefix_s: float = 0.0
    wall_s: float = 0.0


@dataclass(frozen=True)
class Memory:
    peak_rss_bytes: int
    cuda_peak_bytes: int | None


@dataclass(frozen=True)
class PrefixInfo:
    """The question-independent start of the prompt: ``source`` is ``prefill`` (prefilled for this answer),
    ``memory`` (reused from an earlier answer) or ``disk`` (loaded from the document cache); ``extended_tokens``: of a
    prefix prefilled for this answer, the first tokens taken from another prefix held in memory, which it extends (a
    server continuing a conversation); the rest were prefilled."""

    tokens: int
    source: str
    seconds: float
    extended_tokens: int = 0


@dataclass(frozen=True)
class DocCacheInfo:
    """What the on-disk document cache did for this answer's prefix: ``status`` is off, hit, stored, rebuilt
    (a bad entry was replaced) or not_stored, with the ``reason`` for the last two."""

    enabled: bool = False
    status: str = "off"
    reason: str | None = None
    path: str | None = None
    bytes: int | None = None


@dataclass(frozen=True)
class Report:
    """Everything ``--json`` says about one answer (field order is the JSON's key order)."""

    answer: str
    question: str
    document: str
    model: str
    device: str
    dtype: str
    dtype_reason: str
    quantization: str | None
    method: str
    settings: SettingsInfo
    prompt_tokens: int
    prompt: PromptInfo
    generated_tokens: int
    cache: CacheInfo
    layers: list[LayerRow]
    pages: list[PageRow]
    timings: Timings
    memory: Memory
    question_index: int
    reused_prefix_tokens: int
    prefix: PrefixInfo
    doc_cache: DocCacheInfo = field(default_factory=DocCacheInfo)
    stop: StopInfo = field(default_factory=StopInfo)
    decode_path: str | None = None  # what the decoding steps ran and why, where not the weights as loaded
    generation: GenerationOptions = field(default_factory=GenerationOptions)
    schema_version: int = SCHEMA_VERSION

    def to_json(self, *, answer: bool = True) -> dict:
        """The JSON object; ``answer=False`` drops the answer, its token count and the decode timings. The generation
        options declared ``reported`` (:mod:`snapkv_cli.generation.options`) lead the ``stop`` block, under their JSON
        keys; the others are not shown."""
        data = {"schema_version": self.schema_version}  # first; updating it below keeps its place
        data.update(asdict(self))
        data["settings"] = data["settings"]["values"]  # the block is the settings themselves
        del data["generation"]
        data["stop"] = {**reported_options(self.generation), **data["stop"]}
        if not answer:
            del data["answer"], data["generated_tokens"]
            for key in ("decode_s", "decode_tokens_per_s"):
                del data["timings"][key]
        return data


@dataclass
class Answer:
    """One answered question: its prompt, what generation returned (the cache with its records among it) and the
    report."""

    prompt: Prompt
    result: GenerationResult
    report: Report


def layer_rows(cache: SnapKVCache) -> list[LayerRow]:
    """Per layer: kept tokens across (batch, KV head), the budget, and whether it was compressed."""
    rows = []
    for layer in sorted(cache.records):
        record = cache.records[layer]
        kept = record.kept_per_head()  # real tokens per (batch, KV head); padded heads differ
        rows.append(LayerRow(layer=layer, kept_tokens_min=int(kept.min()), kept_tokens_max=int(kept.max()),
                             kept_tokens_mean=float(kept.float().mean()), capacity=record.capacity,
                             compressed=record.compressed, sliding_window=record.sliding))
    return rows


def page_rows(cache: SnapKVCache, prompt: Prompt) -> list[PageRow]:
    """Per document page: its tokens and the share of them kept over all (layer, KV head) pairs."""
    page_tokens = Counter(page for page in prompt.token_pages if page is not None)
    if not page_tokens:
        return []
    page_of_position = torch.tensor([page or 0 for page in prompt.token_pages])
    kept_counts: Counter = Counter()
    pairs = 0
    for record in cache.records.values():
        positions = record.kept_positions.reshape(-1, record.kept_positions.shape[-1]).cpu()
        pairs += positions.shape[0]
        pages, counts = page_of_position[positions.reshape(-1)].unique(return_counts=True)
        kept_counts.update({int(page): int(count) for page, count in zip(pages, counts) if page})
    return [PageRow(page=page, document_tokens=tokens, kept_share=round(kept_counts[page] / (tokens * pairs), 4))
            for page, tokens in sorted(page_tokens.items())]


def cache_info(cache: SnapKVCache, layers: list[LayerRow]) -> CacheInfo:
    """Sizes before and after compression, summed over layers (see :meth:`SnapKVCache.summary`), and the fewest and
    most tokens a (layer, KV head) keeps (from ``layers``)."""
    return CacheInfo(**cache.summary(), tokens_after_min=min((row.kept_tokens_min for row in layers), default=0),
                     tokens_after_max=max((row.kept_tokens_max for row in layers), default=0))


def build_report(*, model_name: str, device: str, dtype: str, prompt: Prompt, result: GenerationResult,
                 generation: GenerationOptions, document: str, question: str, load_s: float, question_index: int,
                 prefix: PrefixInfo, doc_cache: DocCacheInfo, wall_s: float = 0.0, dtype_reason: str = "asked for",
                 quantization: str | None = None) -> Report:
    """The report of one answer (documented in docs/usage.md), ``result`` generated with ``generation``; ``wall_s``:
    the answer's wall time; ``dtype`` and ``quantization`` as read back from the model, ``dtype_reason`` why that
    dtype."""
    cache = result.cache
    settings = cache.settings
    window = prompt.window_report(settings.window_size)
    layers = layer_rows(cache)
    return Report(
        answer=result.answer,
        question=question,
        document=document,
        model=model_name,
        device=device,
        dtype=dtype,
        dtype_reason=dtype_reason,
        quantization=quantization,
        method=settings.method,
        settings=SettingsInfo(settings.applied(prompt.length)),
        prompt_tokens=prompt.length,
        prompt=PromptInfo(**prompt.counts(), **window,
                          truncated_document_tokens=prompt.truncated_document_tokens, template_name=prompt.template,
                          style=prompt.style),
        generated_tokens=len(result.generated_ids),
        cache=cache_info(cache, layers),
        layers=layers,
        pages=page_rows(cache, prompt),
        timings=Timings(load_s=round(load_s, 3), prefill_s=round(result.prefill_s, 3),
                        decode_s=round(result.decode_s, 3),
                        decode_tokens_per_s=round(result.decode_tokens_per_s, 2),
                        selection_s=round(cache.selection_seconds, 3), prefix_s=round(prefix.seconds, 3),
                        wall_s=round(wall_s, 3)),
        memory=Memory(peak_rss_bytes=peak_rss_bytes(),
                      cuda_peak_bytes=torch.cuda.max_memory_allocated() if torch.cuda.is_available() else None),
        question_index=question_index,
        reused_prefix_tokens=prefix.extended_tokens if prefix.source == "prefill" else prefix.tokens,
        prefix=prefix,
        doc_cache=doc_cache,
        stop=StopInfo(reason=result.stop_reason, stop_string=result.stop_string, repeated=result.repeated),
        decode_path=result.decode_path,
        generation=generation,
    )
