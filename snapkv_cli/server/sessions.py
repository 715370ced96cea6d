"""The documents' sessions the server holds, found by their prompt's tokens, and the answering of one question.

A question about a document (uploaded, or the messages before a chat's last one) is asked in the
:class:`~snapkv_cli.answering.session.DocumentSession` whose prompt prefix has the same tokens and settings (and
whose document has the same name, which its reports show), so a second question, or a chat client resending the
same document, reuses the prefilled prefix. A prefix held by none is built on the held one with the same settings
whose tokens start most like it, so a conversation's next turn prefills only what is new. The sessions held keep
their prefixes' full KV under a memory cap, the least recently used dropped first; with the document cache on, a
dropped prefix comes back from disk. Everything here runs on the worker thread.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, replace

from ..answering.documents import Document
from ..answering.report import Answer
from ..answering.runner import Runner
from ..answering.session import DocumentSession, common_start
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
    """A session held in memory, the decoding it was opened with, and the bytes of its prefix's full KV (known once
    it has answered: its report's KV bytes before compression, in the share of the prompt the prefix is)."""

    session: DocumentSession
    generation: GenerationOptions
    bytes: int = 0


class Sessions:
    """The sessions of ``runner``'s model whose prefixes fit in ``capacity_bytes`` together, least recently used
    dropped first (the one answering now is always kept)."""

    def __init__(self, runner: Runner, capacity_bytes: int):
        self.runner, self.capacity_bytes = runner, capacity_bytes
        self.held: OrderedDict[tuple, Held] = OrderedDict()

    def answer(self, document: Document, question: str, *, settings: CompressionSettings | None = None,
               decoding: Decoding = Decoding()) -> Answer:
        """Answer ``question`` about ``document`` with ``settings`` (None: the server's) in the session holding the
        same prompt prefix, opening one when none does; then drop the least recently used beyond the cap."""
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
            earlier = self._closest(key)
            if earlier is not None:
                opened.continue_from(earlier)
            self.held[key] = held
        answer = runner.answer(held.session, question, total=1)
        cache = answer.report.cache
        held.bytes = cache.bytes_before * prompt.prefix_length // max(1, cache.tokens_before)
        while self.bytes > self.capacity_bytes and len(self.held) > 1:
            self.held.popitem(last=False)
        return answer

    def _closest(self, key: tuple):
        """The prefix held with ``key``'s settings whose tokens share the longest start with ``key``'s (None: none
        shares any)."""
        ids, settings = key[0], key[1]
        best, longest = None, 0
        for (held_ids, held_settings, _), held in self.held.items():
            prefix = held.session.prefix
            if held_settings != settings or prefix is None:
                continue
            common = common_start(held_ids, ids)
            if common > longest:
                best, longest = prefix, common
        return best

    @property
    def bytes(self) -> int:
        return sum(held.bytes for held in self.held.values())

    def status(self) -> dict:
        return {"held": len(self.held), "bytes": self.bytes, "capacity_bytes": self.capacity_bytes,
                "prefix_tokens": sum(len(key[0]) for key in self.held)}
