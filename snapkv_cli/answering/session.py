"""Questions about one document, end to end: prompt -> compressed prefill -> answer -> report.

:class:`DocumentSession` is the one path every command takes (``ask`` with one question or several, ``chat``,
``inspect``, ``batch``, the benchmarks); it knows nothing of terminals. :func:`ask` and :func:`select` are its
one-question shortcuts for library users and tests.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

from ..engine import POLICIES, CompressionSettings, check_supported
from ..errors import PromptTooLong, UserError
from ..generation import GenerationOptions, build_prefix, generate_answer, synchronize
from ..generation.stopping import BASE_MODEL_STOP
from ..models.catalog import default_prefill_chunk, longer_context_alternative
from ..models.loader import LoadedModel, torch_dtype_name
from ..progress import Progress
from .documents import Document
from .prompting import Prompt, Template, build_prompt
from .report import Answer, DocCacheInfo, PrefixInfo, build_report


def context_length(loaded: LoadedModel) -> int:
    config = loaded.model.config.get_text_config()
    return int(getattr(config, "max_position_embeddings", None) or loaded.tokenizer.model_max_length)


def common_start(first: list[int], second: list[int]) -> int:
    """How many tokens ``first`` and ``second`` start with alike."""
    return next((index for index, (a, b) in enumerate(zip(first, second)) if a != b), min(len(first), len(second)))


@dataclass
class SharedPrefix:
    """The question-independent start of the prompt, prefilled once with its full KV (or loaded from disk).

    source: ``prefill`` or ``disk``; seconds: what building or loading it took; doc_cache: what the document cache
    did for it.
    """

    ids: list[int]
    cache: object
    source: str
    seconds: float
    doc_cache: DocCacheInfo
    reused: int = 0  # the first tokens taken from an earlier prefix (DocumentSession.continue_from), not prefilled


class DocumentSession:
    """Answer question after question about one document, reading the document once.

    Each question's prompt is the template filled with the document and the question (question last). Its
    question-independent prefix (``Prompt.prefix_length`` tokens) is prefilled once with its full KV kept, or loaded
    from ``doc_cache``; each question is then prefilled on a fork of it, SnapKV selects with that question's window
    over all keys, and the answer decodes from the compressed fork, leaving the prefix intact for the next question.

    With ``share_prefix=False`` (one question and no document cache) nothing is kept for later: the whole prompt is
    prefilled in one pass and compressed layer by layer as it goes, so at most one layer's uncompressed KV is alive.
    Either way the kept positions and greedy answers are the same, and so are the report's keys.

    ``progress`` (a :class:`~snapkv_cli.progress.Progress`) is told of each step: the document's prefill, the
    question's, the answer's tokens and text, and the document cache's loading and saving.
    """

    def __init__(self, loaded: LoadedModel, document: Document, settings: CompressionSettings, template: Template, *,
                 generation: GenerationOptions = GenerationOptions(), truncate: str | None = None, doc_cache=None,
                 share_prefix: bool = True, attention_sums: bool | None = None,
                 progress: Progress | None = None):
        try:
            check_supported(loaded.model.config)
        except ValueError as error:
            raise UserError(str(error)) from None
        self.loaded, self.document, self.settings, self.template = loaded, document, settings, template
        if loaded.base_model and not generation.stop_strings:  # a base model does not end its answers itself
            generation = replace(generation, stop_strings=BASE_MODEL_STOP.strings)
        if generation.prefill_chunk is None:  # the model's measured default (sliding-window models: chunks)
            generation = replace(generation, prefill_chunk=default_prefill_chunk(loaded.name, loaded.model.config))
        self.generation, self.truncate, self.doc_cache = generation, truncate, doc_cache
        self.share_prefix = share_prefix or doc_cache is not None
        # attention sums over every prefix query, for H2O: as the session's method needs, or for questions asked
        # with other settings (a benchmark that asks with several methods)
        self.attention_sums = POLICIES[settings.method].accumulates_attention if attention_sums is None \
            else attention_sums
        self.progress = progress or Progress()
        self.prefix: SharedPrefix | None = None
        self.earlier: SharedPrefix | None = None
        self.asked = 0

    # -- the prompt --------------------------------------------------------------------------------------------
    def build_prompt(self, question: str, settings: CompressionSettings | None = None) -> Prompt:
        """The prompt for ``question``, leaving ``max_new_tokens`` of room in the context; a bad fit fails here."""
        settings = settings or self.settings
        context = context_length(self.loaded)
        try:
            prompt = build_prompt(self.loaded.tokenizer, self.document, question, self.template,
                                  max_tokens=context - self.generation.max_new_tokens, truncate=self.truncate,
                                  completion=self.loaded.base_model)
        except PromptTooLong as error:  # name a built-in model whose context would hold it
            needed = error.tokens + self.generation.max_new_tokens
            raise PromptTooLong(error.tokens, error.limit, context=context, model=self.loaded.name,
                                alternative=longer_context_alternative(needed, self.loaded.name)) from None
        settings.capacity_for(prompt.length)  # a fraction too small for this prompt fails before the prefill
        return prompt

    # -- the shared prefix -------------------------------------------------------------------------------------
    def prepare(self, prompt: Prompt) -> tuple[SharedPrefix, bool]:
        """The shared prefix for ``prompt`` and whether it was built or loaded just now (a truncated document can
        give a longer question a shorter prefix: that one gets its own)."""
        prefix_ids = prompt.input_ids[:prompt.prefix_length]
        if self.prefix is not None and self.prefix.ids == prefix_ids:
            return self.prefix, False
        self.prefix = None  # free the old prefix before building the next
        self.prefix = self._obtain(prefix_ids)
        return self.prefix, True

    def continue_from(self, earlier: SharedPrefix) -> None:
        """Build this session's prefix, when it is not on disk, on ``earlier`` (another session's prefix on the same
        model and settings, which stays as it is) where their tokens start alike, prefilling only the rest: a
        conversation's next turn, or a document that grew, is not read again from its first token."""
        self.earlier = earlier

    def _earlier_head(self, prefix_ids: list[int]):
        """(tokens, head): the start of ``prefix_ids`` the earlier prefix gives, as a cache to continue (0, None
        where it gives none). The whole earlier prefix where it is a start of ``prefix_ids``; otherwise their common
        start less one window (the continuation makes the window's queries again), unless the earlier prefix
        cannot be cut (attention sums, sliding-window layers)."""
        earlier = self.earlier
        if earlier is None or earlier.cache.accumulate_attention != self.attention_sums \
                or earlier.cache.settings.window_size != self.settings.window_size:
            return 0, None
        common = common_start(earlier.ids, prefix_ids)
        if common == len(earlier.ids) < len(prefix_ids):
            return common, earlier.cache.head(common)
        tokens = common - self.settings.window_size
        if tokens <= 0 or not earlier.cache.can_cut:
            return 0, None
        return tokens, earlier.cache.head(tokens)

    def _obtain(self, prefix_ids: list[int]) -> SharedPrefix:
        from ..doc_cache import prefix_key

        status = DocCacheInfo(enabled=self.doc_cache is not None)
        key = None
        if self.doc_cache is not None:
            key = prefix_key(self.loaded, self.template, prefix_ids, self.settings.window_size,
                             self.attention_sums, prefill_chunk=self.generation.prefill_chunk)
            self.progress.progress(f"Loading the document's cache ({len(prefix_ids)} tokens)...")
            lookup = self.doc_cache.load(key, prefix_ids, self.loaded.model)
            status = replace(status, status=lookup.status, reason=lookup.reason, path=str(lookup.path))
            if lookup.cache is not None:
                return SharedPrefix(prefix_ids, lookup.cache, "disk", lookup.seconds,
                                    replace(status, bytes=lookup.bytes))
        reused, head = self._earlier_head(prefix_ids)
        self.earlier = None  # read once: this session's later prefixes are its own
        synchronize(self.loaded.device)
        started = time.perf_counter()
        beyond = f" after {reused} already read" if reused else ""
        cache = build_prefix(self.loaded.model, prefix_ids, self.settings.window_size,
                             accumulate_attention=self.attention_sums,
                             chunk_size=self.generation.prefill_chunk, progress=self.progress,
                             phase=f"Reading the document: {len(prefix_ids) - reused} tokens{beyond}",
                             continuing=head)
        synchronize(self.loaded.device)
        seconds = time.perf_counter() - started
        if self.doc_cache is not None:
            self.progress.progress("Saving the document's cache...")
            stored, reason, size = self.doc_cache.store(key, prefix_ids, cache, document=self.document.source)
            if stored:
                status = replace(status, status="stored" if status.status == "miss" else "rebuilt", bytes=size)
            else:
                status = replace(status, status="not_stored", reason=reason, bytes=size or None)
        return SharedPrefix(prefix_ids, cache, "prefill", seconds, status, reused)

    # -- answering ---------------------------------------------------------------------------------------------
    def ask(self, question: str, *, settings: CompressionSettings | None = None, generate: bool = True,
            prompt: Prompt | None = None, asked_at: float | None = None) -> Answer:
        """Answer one question (with the session's settings, or ``settings`` for this question only); ``prompt``:
        its prompt, when the caller built it already with :meth:`build_prompt` (to show it before the prefill), and
        ``asked_at`` the ``time.perf_counter()`` reading from before it did (the answer's wall time starts there).

        ``generate=False`` stops after the prefill and selection (the answer is empty): the prompt is the very one
        a generating run sees, since ``max_new_tokens`` still reserves its room in the context.
        """
        started = time.perf_counter() if asked_at is None else asked_at
        settings = settings or self.settings
        prompt = prompt or self.build_prompt(question, settings)
        options = self.generation if generate else replace(self.generation, max_new_tokens=0)
        if self.share_prefix:
            shared, fresh = self.prepare(prompt)
            prefix = PrefixInfo(tokens=prompt.prefix_length, source=shared.source if fresh else "memory",
                                seconds=round(shared.seconds, 3) if fresh else 0.0,
                                extended_tokens=shared.reused if fresh else 0)
            result = generate_answer(self.loaded.model, self.loaded.tokenizer, prompt.input_ids, settings, options,
                                     prefix=shared.cache, on_text=self.progress.text, progress=self.progress)
            doc_cache = shared.doc_cache
        else:
            prefix = PrefixInfo(tokens=prompt.prefix_length, source="prefill", seconds=0.0)
            result = generate_answer(self.loaded.model, self.loaded.tokenizer, prompt.input_ids, settings, options,
                                     on_text=self.progress.text, progress=self.progress)
            doc_cache = DocCacheInfo()
        report = build_report(model_name=self.loaded.name, device=str(self.loaded.device),
                              dtype=torch_dtype_name(self.loaded.dtype), dtype_reason=self.loaded.dtype_reason,
                              quantization=self.loaded.quantization, prompt=prompt, result=result, generation=options,
                              document=self.document.source, question=question,
                              load_s=self.loaded.load_seconds if self.asked == 0 else 0.0,
                              question_index=self.asked, prefix=prefix, doc_cache=doc_cache,
                              wall_s=time.perf_counter() - started)
        self.asked += 1
        return Answer(prompt=prompt, result=result, report=report)


def ask(loaded: LoadedModel, document: Document, question: str, settings: CompressionSettings, template: Template,
        *, generation: GenerationOptions = GenerationOptions(), truncate: str | None = None, generate: bool = True,
        progress: Progress | None = None) -> Answer:
    """One question about one document: a one-question :class:`DocumentSession` (nothing kept for later)."""
    session = DocumentSession(loaded, document, settings, template, generation=generation, truncate=truncate,
                              share_prefix=False, progress=progress)
    return session.ask(question, generate=generate)


def select(loaded: LoadedModel, document: Document, question: str, settings: CompressionSettings,
           template: Template, **options) -> Answer:
    """The prompt, prefill and selection of :func:`ask` with the same arguments, without decoding."""
    return ask(loaded, document, question, settings, template, generate=False, **options)
