"""The documents' sessions the server holds, found by their prompt's tokens, and the answering of one question.

A question about a document (uploaded, or the messages before a chat's last one) is asked in the
:class:`~snapkv_cli.answering.session.DocumentSession` whose prompt prefix has the same tokens and settings (and
whose document has the same name, which its reports show), so a
second question, or a chat client resending the same document, reuses the prefilled prefix. At most ``capacity``
sessions are held, the least recently used dropped first; with the document cache on, a dropped prefix comes back
from disk. Everything here runs on the worker thread.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, replace

from ..answering.documents import Document
from ..answering.report import Answer
from ..answering.runner import Runner
from ..answering.session import DocumentSession
from ..engine import CompressionSettings
from ..generation import GenerationOptions


@dataclass(frozen=True)
class Decoding:
    """What a request may change of the decoding (None: the server's own): the OpenAI API's ``max_tokens``,
    ``temperature``, ``seed`` and ``stop`` (added to the model's own stop strings)."""

    max_new_tokens: int | None = None
    temperature: float | None = None
    seed: int | None = None
    stop: tuple[str, ...] = ()

    def applied_to(self, generation: GenerationOptions) -> GenerationOptions:
        given = {name: value for name, value in (("max_new_tokens", self.max_new_tokens),
                                                 ("temperature", self.temperature), ("seed", self.seed))
                 if value is not None}
        if self.stop:
            given["stop_strings"] = tuple(dict.fromkeys(generation.stop_strings + self.stop))
        return replace(generation, **given)


@dataclass
class Held:
    """A session held in memory and the decoding it was opened with."""

    session: DocumentSession
    generation: GenerationOptions


class Sessions:
    """Up to ``capacity`` sessions of ``runner``'s model, least recently used dropped first."""

    def __init__(self, runner: Runner, capacity: int):
        self.runner, self.capacity = runner, capacity
        self.held: OrderedDict[tuple, Held] = OrderedDict()

    def answer(self, document: Document, question: str, *, settings: CompressionSettings | None = None,
               decoding: Decoding = Decoding()) -> Answer:
        """Answer ``question`` about ``document`` with ``settings`` (None: the server's) in the session holding the
        same prompt prefix, opening one (and dropping the least recently used) when none does."""
        runner = self.runner
        if settings is not None and settings != runner.options.settings:
            runner = runner.with_options(replace(runner.options, settings=settings))
        opened = runner.open(document)
        held = Held(opened, opened.generation)
        opened.generation = decoding.applied_to(held.generation)
        prompt = opened.build_prompt(question)
        key = (tuple(prompt.input_ids[:prompt.prefix_length]), repr(opened.settings), document.source)
        if key in self.held:
            self.held.move_to_end(key)
            held = self.held[key]
            held.session.generation = decoding.applied_to(held.generation)
        else:
            self.held[key] = held
            while len(self.held) > self.capacity:
                self.held.popitem(last=False)
        return runner.answer(held.session, question, total=1)

    def status(self) -> dict:
        return {"held": len(self.held), "capacity": self.capacity,
                "prefix_tokens": sum(len(key[0]) for key in self.held)}
