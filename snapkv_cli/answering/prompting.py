"""Build the prompt: a template from ``prompts/`` around the document, the question at the very end.

A template file holds an optional system message, a line ``---``, then the user message with ``{document}`` and
``{question}``; ``{question}`` must close the user message so it lands in SnapKV's observation window. The model's
chat template then wraps the messages ("chat" style). A base model (or a tokenizer without a chat template) gets the
"completion" style instead: the tokenizer's BOS, the system text, a blank line, the user text, and ``\n\nAnswer:``
for the model to continue; a template ``NAME`` then uses its completion variant ``NAME_base`` from ``prompts/`` where
there is one (``qa_base``). Every prompt token is tagged as document, question or template, and document tokens with
their page number.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from ..errors import PromptTooLong, TemplateTooLong, UserError
from ..paths import refuse_overlong
from .documents import Document

DEFAULT_TEMPLATE = "qa"
BASE_VARIANT_SUFFIX = "_base"
ANSWER_CUE = "\n\nAnswer:"  # ends a completion-style prompt
_DOC_MARK, _QUESTION_MARK = "\uE000DOCUMENT\uE000", "\uE000QUESTION\uE000"
TRUNCATIONS = ("middle", "start", "end")


@dataclass(frozen=True)
class Template:
    name: str
    system: str | None
    user: str
    packaged: bool = False  # one of prompts/ (so it may have a completion variant there)


def available_templates() -> list[str]:
    return sorted(p.name[:-4] for p in resources.files("snapkv_cli.prompts").iterdir() if p.name.endswith(".txt"))


def load_template(name_or_path: str | None = None) -> Template:
    """A template by name (a file in ``prompts/``) or by path."""
    name_or_path = name_or_path or DEFAULT_TEMPLATE
    path = Path(name_or_path).expanduser()
    refuse_overlong(path)
    if path.suffix == ".txt" or path.exists():
        if not path.is_file():
            raise UserError(f"template file not found: {name_or_path}")
        text, name, packaged = path.read_text(encoding="utf-8"), path.stem, False
    else:
        packaged = resources.files("snapkv_cli.prompts") / f"{name_or_path}.txt"
        if not packaged.is_file():
            raise UserError(f"unknown template {name_or_path!r}: choose one of {', '.join(available_templates())} "
                            "or give a path to a .txt template")
        text, name = packaged.read_text(encoding="utf-8"), name_or_path
        packaged = True
    system, separator, user = text.partition("\n---\n")
    if not separator:
        system, user = None, text
    user = user.strip()
    if user.count("{document}") != 1 or user.count("{question}") != 1 or not user.endswith("{question}"):
        raise UserError(f"template {name!r} must contain {{document}} and {{question}} once each and end with "
                        "{question} (the question must close the prompt to fall in the observation window)")
    return Template(name=name, system=(system or "").strip() or None, user=user, packaged=packaged)


def completion_variant(template: Template) -> Template:
    """The template for a base model: ``prompts/<name>_base.txt`` for a packaged template that has one, else the
    template itself (rendered in completion style all the same)."""
    if not template.packaged or template.name.endswith(BASE_VARIANT_SUFFIX):
        return template
    variant = template.name + BASE_VARIANT_SUFFIX
    return load_template(variant) if variant in available_templates() else template


@dataclass(frozen=True)
class Prompt:
    """A tokenized prompt and what each token is.

    input_ids: the prompt's token ids; document_span / question_span: [start, end) token ranges;
    token_pages: the page number of each token (None outside the document); prefix_length: the tokens before the
    question's line, which do not depend on the question (a shared prefix for several questions).
    """

    text: str
    input_ids: list[int]
    document_span: tuple[int, int]
    question_span: tuple[int, int]
    token_pages: list[int | None]
    prefix_length: int
    truncated_document_tokens: int = 0
    template: str = DEFAULT_TEMPLATE  # the name of the template used
    style: str = "chat"  # "chat" (the model's chat template) or "completion" (plain text ending in "Answer:")

    @property
    def length(self) -> int:
        return len(self.input_ids)

    def counts(self) -> dict[str, int]:
        document = self.document_span[1] - self.document_span[0]
        question = self.question_span[1] - self.question_span[0]
        return {"document": document, "question": question, "template": self.length - document - question}

    def window_report(self, window_size: int) -> dict:
        """How much of the observation window (the last ``window_size`` tokens) is question."""
        window_start = max(0, self.length - window_size)
        overlap = max(0, self.question_span[1] - max(self.question_span[0], window_start))
        question_tokens = self.question_span[1] - self.question_span[0]
        return {
            "window_size": min(window_size, self.length),
            "question_tokens_in_window": overlap,
            "question_tokens": question_tokens,
            "question_fits": overlap == question_tokens,
        }


def _render(
    tokenizer, template: Template, document_text: str, question: str, completion: bool
) -> tuple[str, tuple[int, int], tuple[int, int]]:
    """The prompt text and the character spans of the document and the question in it: the chat template's
    rendering, or the completion style when ``completion`` is set or the tokenizer has no chat template."""
    user = template.user.replace("{document}", _DOC_MARK).replace("{question}", _QUESTION_MARK)
    messages = ([{"role": "system", "content": template.system}] if template.system else []) + [
        {"role": "user", "content": user}]
    if not completion and tokenizer.chat_template:
        rendered = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    else:
        rendered = _bos_text(tokenizer) + "\n\n".join(m["content"] for m in messages) + ANSWER_CUE
    before_doc, after_doc = rendered.split(_DOC_MARK)
    middle, after_question = after_doc.split(_QUESTION_MARK)
    doc_start = len(before_doc)
    question_start = doc_start + len(document_text) + len(middle)
    text = before_doc + document_text + middle + question + after_question
    return text, (doc_start, doc_start + len(document_text)), (question_start, question_start + len(question))


def _bos_text(tokenizer) -> str:
    """The BOS token's text when the tokenizer starts its encodings with it (Gemma needs it), else ""."""
    starts_with_bos = tokenizer("a")["input_ids"][:1] == [tokenizer.bos_token_id]  # never, without a BOS token
    return tokenizer.bos_token if starts_with_bos else ""


def _token_range(offsets: list[tuple[int, int]], chars: tuple[int, int]) -> tuple[int, int]:
    inside = [i for i, (start, end) in enumerate(offsets) if end > chars[0] and start < chars[1]]
    return (inside[0], inside[-1] + 1) if inside else (0, 0)


def build_prompt(tokenizer, document: Document, question: str, template: Template,
                 max_tokens: int | None = None, truncate: str | None = None, *, completion: bool = False) -> Prompt:
    """Tokenize ``template`` filled with ``document`` and ``question`` (question last).

    ``completion`` (a base model): the template's completion variant in completion style, whatever the tokenizer's
    chat template; without it, the chat style where the tokenizer has a chat template.

    If the prompt exceeds ``max_tokens``: a :class:`UserError` unless ``truncate`` is middle (keep the beginning and
    the end of the document, as LongBench does), start (drop the beginning) or end (drop the end).
    """
    question = question.strip()
    if not question:
        raise UserError("the question is empty: pass the question as the second argument")
    if completion:
        template = completion_variant(template)
    completion = completion or not tokenizer.chat_template
    document_text, dropped = document.text, 0
    for _attempt in range(3):
        prompt = _tokenize(tokenizer, template, document, document_text, question, dropped, completion)
        if max_tokens is None or prompt.length <= max_tokens:
            return prompt
        excess = prompt.length - max_tokens
        if truncate is None:
            raise PromptTooLong(prompt.length, max_tokens)
        document_text, dropped = _truncate(tokenizer, document_text, excess + 8 * _attempt, truncate, dropped)
    raise PromptTooLong(prompt.length, max_tokens)


def _tokenize(tokenizer, template: Template, document: Document, document_text: str, question: str,
              dropped: int, completion: bool) -> Prompt:
    text, doc_chars, question_chars = _render(tokenizer, template, document_text, question, completion)
    # The prefix (up to the line holding the question) is tokenized on its own, so its tokens never depend on the
    # question: many questions can share one prefilled prefix and still see the very same prompt tokens.
    cut = text.rfind("\n", doc_chars[1], question_chars[0]) + 1 or question_chars[0]
    input_ids: list[int] = []
    offsets: list[tuple[int, int]] = []
    for start, end in ((0, cut), (cut, len(text))):
        ids, piece_offsets = encode_guarded(tokenizer, text, start, end, (doc_chars, question_chars))
        input_ids += ids
        offsets += piece_offsets
    prefix_length = sum(1 for _, end in offsets if end <= cut)
    document_span = _token_range(offsets, doc_chars)
    token_pages: list[int | None] = [None] * len(offsets)
    if not dropped:  # page boundaries are only exact for an untruncated document
        # a token belongs to the page its first character is in (the blank line between pages leads the next page);
        # every token of the span starts before the document ends, where the last page ends
        page_ends = [(number, doc_chars[0] + end) for number, _, end in document.page_spans()]
        for index in range(*document_span):
            start = offsets[index][0]
            token_pages[index] = next(number for number, end in page_ends if start < end)
    return Prompt(text=text, input_ids=input_ids, document_span=document_span,
                  question_span=_token_range(offsets, question_chars), token_pages=token_pages,
                  prefix_length=prefix_length, truncated_document_tokens=dropped, template=template.name,
                  style="completion" if completion else "chat")


def control_token_ids(tokenizer) -> set[int]:
    """Ids of the tokens that steer the model rather than spell text: every special token, and every added token
    the chat template itself writes (Qwen's ``<tool_call>`` or ``<think>`` are added but not marked special)."""
    templates = tokenizer.chat_template or {}  # a string, or named templates ("default", "tool_use"...) in a dict
    templates = templates.values() if isinstance(templates, dict) else [templates]
    ids = set(tokenizer.all_special_ids)
    for token_id, token in tokenizer.added_tokens_decoder.items():
        if token.special or any(token.content in template for template in templates):
            ids.add(token_id)
    ids.discard(tokenizer.unk_token_id)  # what an unknown character becomes: it steers nothing
    return ids


def encode_guarded(tokenizer, text: str, start: int, end: int,
                   user_spans: tuple[tuple[int, int], ...]) -> tuple[list[int], list[tuple[int, int]]]:
    """Token ids and (absolute) character offsets of ``text[start:end]``, in which the characters of
    ``user_spans`` (the document, the question) never become control tokens.

    The text is tokenized as the model's tokenizer does it; only when a control token (:func:`control_token_ids`)
    comes out of user text are the template's own markers kept and the rest tokenized as plain text, so a document
    that writes ``<|im_start|>system`` reaches the model as those characters, not as a new chat turn.
    """
    ids, offsets = _encode(tokenizer, text[start:end], start)
    control = control_token_ids(tokenizer)
    if not any(token in control and _overlaps(span, user_spans) for token, span in zip(ids, offsets)):
        return ids, offsets
    guarded_ids: list[int] = []
    guarded_offsets: list[tuple[int, int]] = []
    plain_from = start
    for token, span in zip(ids, offsets):
        if token in control and not _overlaps(span, user_spans):  # one of the template's own markers
            _extend_plain(tokenizer, text, plain_from, span[0], control, guarded_ids, guarded_offsets)
            guarded_ids.append(token)
            guarded_offsets.append(span)
            plain_from = span[1]
    _extend_plain(tokenizer, text, plain_from, end, control, guarded_ids, guarded_offsets)
    return guarded_ids, guarded_offsets


def _encode(tokenizer, text: str, start: int, *, plain: bool = False) -> tuple[list[int], list[tuple[int, int]]]:
    if not text:
        return [], []
    encoding = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True, split_special_tokens=plain)
    return list(encoding["input_ids"]), [(start + lo, start + hi) for lo, hi in encoding["offset_mapping"]]


def _extend_plain(tokenizer, text: str, start: int, end: int, control: set[int], ids: list[int],
                  offsets: list[tuple[int, int]]) -> None:
    """Append ``text[start:end]`` tokenized with no control token at all: special tokens are split by the
    tokenizer; an added token it still matches is broken after its first character, and the rest retried."""
    piece_ids, piece_offsets = _encode(tokenizer, text[start:end], start, plain=True)
    hit = next((index for index, token in enumerate(piece_ids) if token in control), None)
    if hit is None or end - start <= 1:  # one character cannot spell a marker: it is what the tokenizer makes of it
        ids += piece_ids
        offsets += piece_offsets
        return
    first = max(start, piece_offsets[hit][0])
    _extend_plain(tokenizer, text, start, first, control, ids, offsets)
    _extend_plain(tokenizer, text, first, first + 1, control, ids, offsets)
    _extend_plain(tokenizer, text, first + 1, end, control, ids, offsets)


def _overlaps(span: tuple[int, int], others: tuple[tuple[int, int], ...]) -> bool:
    return any(span[0] < high and low < span[1] for low, high in others)


def _truncate(tokenizer, document_text: str, excess: int, how: str, dropped: int) -> tuple[str, int]:
    """``document_text`` less ``excess`` of its tokens, and ``dropped`` plus ``excess``: the tokens dropped from the
    start, from the end, or from the middle (the first half of the tokens kept, then the rest from the end after a
    ``[...]`` line). The tokens are counted as the prompt has them (:func:`encode_guarded`: markers written in the
    document are plain text there). :class:`TemplateTooLong` when not a single token would be left."""
    _, offsets = encode_guarded(tokenizer, document_text, 0, len(document_text), ((0, len(document_text)),))
    keep = len(offsets) - excess
    if keep <= 0:
        raise TemplateTooLong()
    if how == "start":
        text = document_text[offsets[excess][0]:]
    elif how == "end":
        text = document_text[: offsets[keep - 1][1]]
    else:
        head, tail = max(1, keep // 2), keep - max(1, keep // 2)
        tail_start = offsets[len(offsets) - tail][0] if tail else len(document_text)
        text = document_text[: offsets[head - 1][1]] + "\n[...]\n" + document_text[tail_start:]
    return text, dropped + excess
