"""The one run path of every command that asks the model: load it once, open documents, answer questions.

A :class:`Runner` takes its :class:`RunOptions` (built once, by the command line or a caller) and reports what
happens through a :class:`~snapkv_cli.answering.presenter.Presenter`: progress, each prompt, the streamed answer, the
finished answer. ``ask`` (one question or several), ``chat``, ``inspect`` and ``batch`` differ only in the
questions they feed it and the presenter they give it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ..engine import CompressionSettings
from ..generation import GenerationOptions
from .documents import Document, DocumentReader
from .presenter import Presenter
from .prompting import Template, load_template
from .report import Answer
from .session import DocumentSession


@dataclass(frozen=True)
class RunOptions:
    """Everything a run needs besides its documents and questions.

    model/device/dtype/quantize/device_map: what to load (see :func:`snapkv_cli.models.loader.load_model`);
    settings: the compression; generation: decoding and prefill chunking; reader: how documents are read (page
    selection, size limit); template/truncate: how they become prompts;
    doc_cache_mb: the on-disk document cache's cap in MB, or None when it is off.
    """

    model: str | None = None
    device: str = "auto"
    dtype: str = "auto"
    quantize: str | None = None
    device_map: str | None = None
    settings: CompressionSettings = field(default_factory=CompressionSettings)
    generation: GenerationOptions = field(default_factory=GenerationOptions)
    reader: DocumentReader = field(default_factory=DocumentReader)
    template: Template = field(default_factory=load_template)
    truncate: str | None = None
    doc_cache_mb: int | None = None


class Runner:
    """Answers questions about documents with one loaded model, telling ``presenter`` what happens."""

    def __init__(self, options: RunOptions, presenter: Presenter | None = None, *,
                 load_model: Callable | None = None):
        self.options = options
        self.presenter = presenter or Presenter()
        self._load_model = load_model
        self._loaded = None
        self._doc_cache = None

    def with_options(self, options: RunOptions) -> Runner:
        """A runner with ``options`` that shares this one's loaded model, document cache and presenter: for options
        that change only how documents become prompts (``template``, ``truncate``: a batch job's own)."""
        runner = Runner(options, self.presenter)  # never loads: it is handed this one's model
        runner._loaded, runner._doc_cache = self.loaded, self.doc_cache  # loads the model if not yet loaded
        return runner

    def read(self, path: str, *, stdin=None) -> Document:
        """The document at ``path`` (``-``: stdin), read by the options' reader (page selection, size limit)."""
        return self.options.reader.read(path, stdin=stdin)

    @property
    def loaded(self):
        """The loaded model (loaded on first use)."""
        if self._loaded is None:
            from ..models.loader import load_model

            options = self.options
            self.presenter.progress("Loading model...")
            self._loaded = (self._load_model or load_model)(
                options.model, device=options.device, dtype=options.dtype, device_map=options.device_map,
                quantize=options.quantize, progress=self.presenter.progress, notice=self.presenter.notice)
        return self._loaded

    @property
    def doc_cache(self):
        """The on-disk document cache, or None when it is off."""
        if self._doc_cache is None and self.options.doc_cache_mb is not None:
            from ..doc_cache import DocCache

            self._doc_cache = DocCache(max_bytes=self.options.doc_cache_mb * 1024 * 1024)
        return self._doc_cache

    def open(self, document: Document, *, questions: int | None = None) -> DocumentSession:
        """A session on ``document``; ``questions=1`` (and no document cache) keeps nothing for later questions."""
        options = self.options
        return DocumentSession(self.loaded, document, options.settings, options.template,
                               generation=options.generation, truncate=options.truncate, doc_cache=self.doc_cache,
                               share_prefix=questions != 1, progress=self.presenter)

    def answer(self, session: DocumentSession, question: str, *, index: int = 0, total: int | None = None,
               generate: bool = True) -> Answer:
        """Answer one question in ``session``, reporting its prompt, streamed text and result."""
        presenter = self.presenter
        presenter.question(question, index, total)
        asked_at = time.perf_counter()
        prompt = session.build_prompt(question)
        presenter.prompt(prompt, session.settings.window_size, index, total)
        answer = session.ask(question, generate=generate, prompt=prompt, asked_at=asked_at)
        presenter.answered(answer, index, total)
        return answer

    def ask(self, document: Document, questions: list[str], *, generate: bool = True) -> list[Answer]:
        """Answer every question about ``document``, reading it once; the presenter is closed at the end."""
        try:
            session = self.open(document, questions=len(questions))
            return [self.answer(session, question, index=index, total=len(questions), generate=generate)
                    for index, question in enumerate(questions)]
        finally:
            self.presenter.close()

