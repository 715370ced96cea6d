"""The text of a text document's bytes, its encoding told by its content (:func:`decode_document_bytes`), and the
refusal of binary content (:func:`refuse_binary_text`) whatever the file's name says."""

from __future__ import annotations

import re

from snapkv_cli.errors import BinaryDocument


def decode_document_bytes(data: bytes, source: str, *, legacy: bool = True) -> str:
    """The text of document bytes, newlines made ``\\n``; binary content (zero bytes, many control characters) is
    refused with a UserError.

    A byte order mark (UTF-8, UTF-16, UTF-32) decides; else UTF-16/32 without a mark when the zero bytes fall as
    they do there; else UTF-8, keeping it (bad bytes become U+FFFD) when most non-ASCII sequences in it are valid
    UTF-8; else a legacy encoding: cp1252 for mostly-Latin text, a guess (charset-normalizer) for other scripts,
    latin-1 as the last resort (it maps every byte). ``legacy=False`` accepts only text that declares or proves its
    encoding (a byte order mark, UTF-8, UTF-16/32).
    """
    text = _decode(data, legacy=legacy)
    if text is None:
        binary = b"\x00" in data
        raise BinaryDocument(source, "it holds zero bytes, as binary files do" if binary else
                             "it is not UTF-8 or UTF-16/32 text")
    refuse_binary_text(source, text)
    return text.replace("\r\n", "\n").replace("\r", "\n")


_BOMS = (  # longest first: the UTF-32 LE mark starts with the UTF-16 LE one
    (b"\xff\xfe\x00\x00", "utf-32-le"),
    (b"\x00\x00\xfe\xff", "utf-32-be"),
    (b"\xef\xbb\xbf", "utf-8"),
    (b"\xff\xfe", "utf-16-le"),
    (b"\xfe\xff", "utf-16-be"),
)
_SAMPLE = 1 << 16
# C0 controls other than tab, newlines, form feed and escape (ANSI colours in logs), DEL and the C1 controls
_CONTROL = re.compile("[\x00-\x08\x0e-\x1a\x1c-\x1f\x7f-\x9f]")
_SURROGATE_ESCAPES = re.compile("[\udc80-\udcff]")
_NON_ASCII = re.compile("[^\x00-\x7f\udc80-\udcff]")


def _decode(data: bytes, legacy: bool) -> str | None:
    """The text of ``data``, or None when ``legacy`` is off and it is not Unicode text."""
    for mark, encoding in _BOMS:
        if data.startswith(mark):
            return data[len(mark):].decode(encoding, errors="replace")
    wide = _wide_text(data)
    if wide is not None:
        return wide
    if b"\x00" in data:
        return None  # not UTF-8 text, nor any single-byte encoding of text
    probe = data.decode("utf-8", errors="surrogateescape")
    invalid = len(_SURROGATE_ESCAPES.findall(probe))
    if not invalid:
        return probe
    valid_non_ascii = len(_NON_ASCII.findall(probe))
    if valid_non_ascii >= invalid:  # mostly UTF-8 with a few damaged bytes: keep it, marking the damage
        return data.decode("utf-8", errors="replace")
    return _decode_legacy(data) if legacy else None


def _wide_text(data: bytes) -> str | None:
    """UTF-32 or UTF-16 (either byte order) without a byte order mark, judged by where the zero bytes fall: mostly
    Latin text in UTF-16 LE has a zero in nearly every second byte and almost never in the first."""
    sample = data[:_SAMPLE]
    for width, encoding, zero_columns, busy_column in (
        (4, "utf-32-le", (2, 3), 0), (4, "utf-32-be", (0, 1), 3),
        (2, "utf-16-le", (1,), 0), (2, "utf-16-be", (0,), 1),
    ):
        usable = len(sample) - len(sample) % width
        if usable < 2 * width:
            continue
        units = usable // width
        zeros = [sample[column:usable:width].count(0) / units for column in range(width)]
        threshold = 0.98 if width == 4 else 0.3
        if zeros[busy_column] > 0.02 or min(zeros[column] for column in zero_columns) < threshold:
            continue
        whole = len(data) - len(data) % width
        try:
            text = data[:whole].decode(encoding)
        except UnicodeDecodeError:
            continue
        return text + ("\ufffd" if whole < len(data) else "")
    return None


def _decode_legacy(data: bytes) -> str:
    """A single- or multi-byte legacy encoding: cp1252 for mostly-Latin text, else charset-normalizer's guess."""
    try:
        western = data.decode("cp1252")
    except UnicodeDecodeError:
        western = None
    high_bytes = len(data) - len(data.translate(None, bytes(range(0x80, 0x100))))
    if western is not None and (high_bytes < 16 or _mostly_ascii_letters(western[:_SAMPLE * 16])):
        return western
    if high_bytes >= 16:  # enough evidence for a statistical guess (Cyrillic, Greek, CJK, ...)
        guessed = _guess_encoding(data)
        if guessed is not None:
            return guessed
    return western if western is not None else data.decode("latin-1")


def _mostly_ascii_letters(text: str) -> bool:
    """Western European text: accented letters are a minority of the letters (Cyrillic read as cp1252 is not)."""
    letters = re.findall(r"[^\W\d_]", text)
    return len([c for c in letters if c > "\x7f"]) <= 0.3 * len(letters)


def _guess_encoding(data: bytes) -> str | None:
    try:
        from charset_normalizer import from_bytes
    except ImportError:  # an optional helper: without it, cp1252 or latin-1
        return None
    best = from_bytes(data).best()
    return None if best is None else str(best)


def refuse_binary_text(source: str, text: str) -> None:
    """Raise :class:`BinaryDocument` for decoded text that is not text: a zero byte, or control characters
    (:data:`_CONTROL`) making up more than 1% of its first ``16 * _SAMPLE`` characters (one is always allowed)."""
    if "\x00" in text:
        raise BinaryDocument(source, "it holds zero bytes, as binary files do")
    controls = len(_CONTROL.findall(text[:_SAMPLE * 16]))
    if controls > max(1, min(len(text), _SAMPLE * 16) // 100):
        raise BinaryDocument(source, f"it holds {controls} control characters, as binary files do")
