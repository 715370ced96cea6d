"""Hostile and odd documents: encodings told by their content, binary refused whatever the extension, only regular
files (a FIFO must not hang, a device must not be read forever), a size cap, file names the file system refuses or
that are not UTF-8, padded PDFs, and arbitrary bytes (a property test): a Document or a UserError, nothing else."""

from __future__ import annotations

import errno
import io
import os
import sys
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

import snapkv_cli.cli as cli
from snapkv_cli.answering.documents import (
    DEFAULT_MAX_DOCUMENT_MB,
    MAX_DOCUMENT_MB_ENV,
    Document,
    decode_document_bytes,
    load_document,
    max_document_bytes,
    megabytes,
)
from snapkv_cli.errors import (
    BinaryDocument,
    DocumentTooLarge,
    FileNameTooLong,
    InvalidValue,
    NotARegularFile,
    UserError,
)
from tests.example_writer import make_examples

ROOT = Path(__file__).resolve().parent.parent
EXTENSIONS = (".pdf", ".txt", ".text", ".log", ".rst", ".md", ".markdown", ".html", ".htm", ".bin", "")
TEXT = "Grüße aus Köln: the code is K-4417.\nSecond line, naïve café.\n"
runner = CliRunner()


@pytest.fixture(autouse=True)
def no_limit_from_the_environment(monkeypatch):
    monkeypatch.delenv(MAX_DOCUMENT_MB_ENV, raising=False)
    monkeypatch.delenv("SNAPKV_DEBUG", raising=False)


def write(tmp_path: Path, name: str, data: bytes) -> str:
    path = tmp_path / name
    path.write_bytes(data)
    return str(path)


def cli_error(*args: str) -> str:
    """``snapkv ask ...`` must fail with exactly one ``Error:`` line on stderr and exit code 1."""
    result = runner.invoke(cli.app, ["ask", *args, "--model", "/nonexistent/never-loaded"])
    assert result.exit_code == 1, (result.stdout, result.stderr, result.exception)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    assert "Traceback" not in result.stderr and "OSError" not in lines[0] and "Errno" not in lines[0]
    return lines[0]


# --------------------------------------------------------------------------- encodings


@pytest.mark.parametrize("encoding", ["utf-8-sig", "utf-16", "utf-16-le", "utf-16-be", "utf-32", "utf-32-le",
                                      "utf-32-be"])
def test_unicode_encodings_with_and_without_a_byte_order_mark(tmp_path, encoding):
    """UTF-16/32 with a mark (utf-16, utf-32 write one) or without (-le/-be), and UTF-8 with a mark."""
    doc = load_document(write(tmp_path, "notes.txt", TEXT.encode(encoding)))
    assert doc.text == TEXT.strip()


def test_utf16_text_on_stdin_and_without_extension(tmp_path):
    data = "\ufeff<html><body><p>Hallo Welt</p></body></html>".encode("utf-16-le")
    assert load_document("-", stdin=io.BytesIO(data)).text == "Hallo Welt"
    assert load_document(write(tmp_path, "NOTES", TEXT.encode("utf-16"))).text == TEXT.strip()


def test_one_stray_byte_does_not_turn_utf8_into_mojibake(tmp_path):
    data = "Café crème: the code is K-4417.".encode() + b" \xff " + "Ünïcödé stays.".encode()
    text = load_document(write(tmp_path, "notes.txt", data)).text
    assert text == "Café crème: the code is K-4417. \ufffd Ünïcödé stays."
    assert "Ã" not in text


def test_legacy_encodings(tmp_path):
    western = "Le garçon a mangé une crème brûlée à Noël, déjà vu.".encode("cp1252")
    assert load_document(write(tmp_path, "fr.txt", western)).text == western.decode("cp1252")
    russian = ("Привет, как дела? Это тестовый документ на русском языке. " * 3).encode("cp1251")
    assert "Это тестовый документ" in load_document(write(tmp_path, "ru.txt", russian)).text
    assert decode_document_bytes(b"ASCII only\r\n", "x") == "ASCII only\n"


@pytest.mark.parametrize("suffix", [".txt", ".md", ".html", ".log"])
def test_binary_content_is_refused_whatever_the_extension(tmp_path, suffix):
    executable = Path(sys.executable).resolve().read_bytes()[:200_000]
    with pytest.raises(BinaryDocument, match=r"is not a text document .*zero bytes"):
        load_document(write(tmp_path, "program" + suffix, executable))
    png = b"\x89PNG\r\n\x1a\n" + bytes(range(1, 256)) * 8  # no zero bytes: control characters give it away
    with pytest.raises(BinaryDocument, match="control characters"):
        load_document(write(tmp_path, "picture" + suffix, png))
    line = cli_error(write(tmp_path, "again" + suffix, executable), "What is it?")
    assert "is not a text document" in line


def test_control_characters_over_one_percent_are_refused(tmp_path):
    """Text may hold a few control characters (a form feed, an ANSI colour, a stray \\x01): up to 1% of its
    characters; more is binary. Tab, newlines, form feed and escape are text and never count."""
    def text(controls: int, length: int = 10_000) -> bytes:
        body = ("The lamp was lit at dusk. " * (length // 26 + 1))[:length - controls]
        step = len(body) // (controls + 1)
        pieces = [body[i * step:(i + 1) * step] for i in range(controls)] + [body[controls * step:]]
        return "\x01".join(pieces).encode()

    assert len(text(100)) == 10_000 and text(100).count(b"\x01") == 100
    assert load_document(write(tmp_path, "one-percent.txt", text(100))).text.count("\x01") == 100
    for controls in (101, 300):  # just over 1%, and 3%
        with pytest.raises(BinaryDocument, match=f"it holds {controls} control characters"):
            load_document(write(tmp_path, f"controls-{controls}.txt", text(controls)))
    layout = ("Column\tvalue\r\n\x0cPage two\x1b[1mbold\x1b[0m\n" * 400).encode()  # 10% tabs, feeds, escapes
    assert "Page two" in load_document(write(tmp_path, "layout.txt", layout)).text


def test_binary_on_stdin_is_refused():
    with pytest.raises(BinaryDocument):
        load_document("-", stdin=io.BytesIO(b"\x7fELF\x02\x01\x01\x00" + bytes(200)))


def test_html_the_parser_rejects_still_gives_its_text(tmp_path):
    doc = load_document(write(tmp_path, "odd.html", b"<p>Kept text</p><![bogus[ more <script>x()</script>"))
    assert "Kept text" in doc.text and "more" in doc.text and "x()" not in doc.text


# --------------------------------------------------------------------------- what may be opened


def _load_in_thread(path: str, seconds: float = 10.0):
    outcome: dict = {}

    def target() -> None:
        try:
            outcome["document"] = load_document(path)
        except BaseException as error:
            outcome["error"] = error

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"load_document({path!r}) hung"
    return outcome


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs POSIX FIFOs")
def test_a_fifo_without_writer_is_refused_at_once(tmp_path):
    fifo = tmp_path / "pipe.txt"
    os.mkfifo(fifo)
    outcome = _load_in_thread(str(fifo))
    assert isinstance(outcome.get("error"), NotARegularFile), outcome
    assert "is a FIFO (named pipe), not a regular file" in str(outcome["error"])
    assert "FIFO" in cli_error(str(fifo), "What is it?")


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs /dev/zero")
def test_a_device_behind_a_text_link_is_refused(tmp_path):
    link = tmp_path / "zeros.txt"
    link.symlink_to("/dev/zero")
    outcome = _load_in_thread(str(link))
    assert isinstance(outcome.get("error"), NotARegularFile) and "character device" in str(outcome["error"])


def test_size_cap_names_the_limit_and_how_to_raise_it(tmp_path, monkeypatch):
    assert max_document_bytes() == DEFAULT_MAX_DOCUMENT_MB * 2**20
    path = write(tmp_path, "big.txt", b"word " * 600)  # 3000 bytes
    with pytest.raises(DocumentTooLarge) as info:
        load_document(path, max_bytes=2048)
    assert (info.value.size_bytes, info.value.limit_bytes) == (3000, 2048)
    assert MAX_DOCUMENT_MB_ENV in str(info.value) and "limit for documents" in str(info.value)
    assert load_document(path, max_bytes=3000).text.startswith("word word")
    with pytest.raises(DocumentTooLarge, match="'<stdin>' is more than"):
        load_document("-", stdin=io.BytesIO(b"x" * 3000), max_bytes=2048)
    monkeypatch.setenv(MAX_DOCUMENT_MB_ENV, "0.002")  # 2097 bytes
    line = cli_error(path, "What is it?")
    assert "is 2.9 KB, over the 2.0 KB limit" in line and MAX_DOCUMENT_MB_ENV in line
    monkeypatch.setenv(MAX_DOCUMENT_MB_ENV, "lots")
    with pytest.raises(InvalidValue, match="a positive number of megabytes"):
        load_document(path)


def test_a_file_name_too_long_for_the_file_system(tmp_path):
    path = str(tmp_path / ("n" * 300 + ".txt"))
    with pytest.raises(FileNameTooLong) as info:
        load_document(path)
    assert info.value.name_bytes == 304
    line = cli_error(path, "What is it?")
    assert "too long" in line and len(line) < 300


def test_a_file_name_too_long_and_not_utf8_is_named_with_its_bytes_escaped(tmp_path):
    from snapkv_cli.paths import refuse_overlong

    raw = os.fsencode(str(tmp_path)) + b"/" + b"caf\xe9" * 80 + b".txt"  # one name of 324 bytes, latin-1
    with pytest.raises(FileNameTooLong) as info:
        refuse_overlong(os.fsdecode(raw))
    assert info.value.name_bytes == 324
    assert info.value.source == os.fsdecode(os.fsencode(str(tmp_path))) + "/" + "caf\\xe9" * 80 + ".txt"
    refuse_overlong(tmp_path)  # a path that exists passes, and one missing (another error) is left to the reader
    refuse_overlong(tmp_path / "missing.txt")


def test_a_file_name_that_is_not_utf8(tmp_path):
    raw = os.fsencode(str(tmp_path)) + b"/caf\xe9-notes.txt"  # latin-1 bytes in the name
    with open(raw, "wb") as file:
        file.write(TEXT.encode())
    path = os.fsdecode(raw)  # how Python hands such a name over (sys.argv, os.listdir): surrogate escapes
    doc = load_document(path)
    assert doc.text == TEXT.strip()
    assert doc.source.endswith("caf\\xe9-notes.txt")
    doc.source.encode("utf-8")  # printable and storable: no lone surrogates


def test_directory_is_refused(tmp_path):
    assert "is a directory" in cli_error(str(tmp_path), "What is it?")


# --------------------------------------------------------------------------- PDFs


def test_pdf_with_trailing_zero_bytes_loads(tmp_path):
    data = (ROOT / "examples" / "annual_report.pdf").read_bytes()
    doc = load_document(write(tmp_path, "padded.pdf", data + b"\x00" * 4096))
    assert doc.pages == load_document(str(ROOT / "examples" / "annual_report.pdf")).pages


def test_pdf_with_a_marker_but_garbage_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match="could not read PDF"):
        load_document(write(tmp_path, "fake.pdf", b"%PDF-1.7\n" + bytes(range(256)) * 4 + b"\n%%EOF\n"))


# --------------------------------------------------------------------------- arbitrary bytes

_EXAMPLE_PDF = make_examples.pdf_bytes(["Page one text.", "Page two text."])


@st.composite
def document_bytes(draw) -> bytes:
    """Arbitrary bytes, arbitrary text in some encoding, or a real PDF with bytes changed, cut or added."""
    kind = draw(st.sampled_from(["bytes", "text", "pdf"]))
    if kind == "bytes":
        return draw(st.binary(max_size=600))
    if kind == "text":
        encoding = draw(st.sampled_from(["utf-8", "utf-16", "utf-16-le", "utf-32-be", "cp1252", "latin-1"]))
        return draw(st.text(max_size=200)).encode(encoding, errors="replace")
    data = bytearray(_EXAMPLE_PDF)
    for _ in range(draw(st.integers(0, 4))):
        position = draw(st.integers(0, len(data) - 1))
        data[position] = draw(st.integers(0, 255))
    cut = draw(st.integers(len(data) // 2, len(data)))
    return bytes(data[:cut]) + draw(st.binary(max_size=64))


def _loads_or_user_error(call) -> None:
    try:
        document = call()
    except UserError as error:
        assert str(error) and "\n" not in str(error)
        return
    assert isinstance(document, Document) and document.pages
    assert all(page.text.strip() for page in document.pages)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=document_bytes(), suffix=st.sampled_from(EXTENSIONS))
def test_any_bytes_under_any_extension_give_a_document_or_a_user_error(tmp_path, data, suffix):
    path = write(tmp_path, "document" + suffix, data)
    _loads_or_user_error(lambda: load_document(path))


@settings(max_examples=200, deadline=None)
@given(data=document_bytes())
def test_any_bytes_on_stdin_give_a_document_or_a_user_error(data):
    _loads_or_user_error(lambda: load_document("-", stdin=io.BytesIO(data)))


# --------------------------------------------------------------------------- the size limit, exactly


@pytest.mark.parametrize(("value", "limit"), [("2", 2 * 2**20), ("0.5", 2**19), (" 1.5 ", 3 * 2**19)])
def test_the_limit_from_the_environment_is_in_megabytes(monkeypatch, value, limit):
    monkeypatch.setenv(MAX_DOCUMENT_MB_ENV, value)
    assert max_document_bytes() == limit


@pytest.mark.parametrize("value", ["0", "-3", "inf", "nan", "lots"])
def test_a_limit_that_is_not_a_positive_number_is_refused(monkeypatch, value):
    monkeypatch.setenv(MAX_DOCUMENT_MB_ENV, value)
    with pytest.raises(InvalidValue) as info:
        max_document_bytes()
    assert str(info.value) == f"SNAPKV_MAX_DOCUMENT_MB must be a positive number of megabytes, got {value!r}"


def test_max_document_mb_is_converted_to_bytes(tmp_path):
    assert megabytes(None) is None  # no setting: the default limit
    assert megabytes(1.5) == 1_572_864 and megabytes(0.002) == 2097
    path = write(tmp_path, "big.txt", b"word " * 600)  # 3000 bytes
    assert "is 2.9 KB, over the 2.0 KB limit" in cli_error(path, "What is it?", "--max-document-mb", "0.002")


def too_large(source: str, size: str, limit: str) -> str:
    return (f"'{source}' is {size}, over the {limit} limit for documents; raise max_document_mb (environment variable "
            "SNAPKV_MAX_DOCUMENT_MB) or give a smaller document")


def test_a_file_at_the_limit_is_read_whole_and_one_over_it_is_named(tmp_path):
    path = write(tmp_path, "big.txt", b"word " * 600)  # 3000 bytes
    assert load_document(path, max_bytes=3000).text == " ".join(["word"] * 600)
    with pytest.raises(DocumentTooLarge) as info:
        load_document(path, max_bytes=2999)
    assert str(info.value) == too_large(path, "2.9 KB", "2.9 KB")


def test_stdin_at_the_limit_is_read_and_more_is_refused():
    assert load_document("-", stdin=io.BytesIO(b"x" * 2048), max_bytes=2048).text == "x" * 2048
    with pytest.raises(DocumentTooLarge) as info:
        load_document("-", stdin=io.BytesIO(b"x" * 2049), max_bytes=2048)
    assert str(info.value) == too_large("<stdin>", "more than 2.0 KB", "2.0 KB")


@pytest.mark.parametrize("size, shown", [
    (12, "12 bytes"), (1023, "1023 bytes"), (1024, "1.0 KB"), (1536, "1.5 KB"), (2**20 - 1, "1024.0 KB"),
    (2**20, "1 MB"), (2**20 + 1, "1.0 MB"), (2**20 + 2, "1.0 MB"), (3 * 2**19, "1.5 MB"), (2**21, "2 MB"),
    (256 * 2**20, "256 MB"), (300 * 2**20 + 2**19, "300.5 MB")])
def test_sizes_in_the_too_large_message_are_short_amounts(size, shown):
    """Bytes under 1 KiB, KiB to one decimal under 1 MiB, whole MiB without decimals, other MiB to one decimal."""
    error = DocumentTooLarge("a.txt", size + 1, size, "SNAPKV_MAX_DOCUMENT_MB")
    assert error.limit_text == shown and str(error).endswith(f"over the {shown} limit for documents; raise "
                                                             "max_document_mb (environment variable "
                                                             "SNAPKV_MAX_DOCUMENT_MB) or give a smaller document")
    assert DocumentTooLarge("<stdin>", size, 1, "SNAPKV_MAX_DOCUMENT_MB").size_text == f"more than {shown}"


class EndlessStream:
    """A pipe that never ends (``yes | snapkv ask -``), with nothing but ``read``: read to its end, it never returns."""

    def read(self, size: int | None = -1) -> bytes:
        if size is None or size < 0:
            raise MemoryError("an endless stream was read to its end")
        return b"y" * size


def test_an_endless_stdin_is_cut_at_the_limit():
    with pytest.raises(DocumentTooLarge) as info:
        load_document("-", stdin=EndlessStream(), max_bytes=4096)
    assert str(info.value) == too_large("<stdin>", "more than 4.0 KB", "4.0 KB")


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="needs Linux /proc")
def test_a_file_whose_size_the_system_does_not_know_is_still_cut_at_the_limit():
    """Files in /proc say they hold 0 bytes; what is read still stops past the limit."""
    assert os.stat("/proc/self/status").st_size == 0
    with pytest.raises(DocumentTooLarge) as info:
        load_document("/proc/self/status", max_bytes=100)
    assert info.value.size_bytes > 100
    assert str(info.value) == too_large("/proc/self/status", f"{info.value.size_bytes} bytes", "100 bytes")


# --------------------------------------------------------------------------- what the user reads


def not_text(source: str, detail: str) -> str:
    return f"'{source}' is not a text document ({detail}): give a PDF, or a text, Markdown or HTML file"


def test_binary_refusals_name_the_file_and_the_reason(tmp_path):
    zeros = write(tmp_path, "zeros.txt", b"\x7fELF\x02\x01\x01" + bytes(64) + b"code" * 10)
    with pytest.raises(BinaryDocument) as info:
        load_document(zeros)
    assert str(info.value) == not_text(zeros, "it holds zero bytes, as binary files do")
    controls = write(tmp_path, "controls.md", b"ab\x01\x02" * 50)  # ASCII: 100 control characters in 200
    with pytest.raises(BinaryDocument) as info:
        load_document(controls)
    assert str(info.value) == not_text(controls, "it holds 100 control characters, as binary files do")


def test_one_zero_character_makes_text_binary():
    with pytest.raises(BinaryDocument) as info:
        load_document("-", stdin=io.StringIO("a text stream\x00 with one NUL"))
    assert str(info.value) == not_text("<stdin>", "it holds zero bytes, as binary files do")


def test_a_short_text_may_hold_one_control_character_but_not_two(tmp_path):
    assert load_document(write(tmp_path, "one.txt", b"bell\x07 rings")).text == "bell\x07 rings"
    with pytest.raises(BinaryDocument, match="it holds 2 control characters"):
        load_document(write(tmp_path, "two.txt", b"bell\x07 rings\x07"))


def test_control_characters_are_counted_in_the_first_million_characters_of_a_long_text(tmp_path):
    """Up to 1% of the first 16 * 65536 characters (10,485) may be control characters; here 10,486 are."""
    block = "\x01" + "The lamp was lit at dusk, and the ship sailed on through the dark sea toward home. " + "x" * 16
    assert len(block) == 100
    data = (block * 12_000).encode()  # 1.2 million characters, 1% control characters
    with pytest.raises(BinaryDocument, match="it holds 10486 control characters"):
        load_document(write(tmp_path, "long.txt", data))


def test_text_that_must_prove_its_encoding(tmp_path):
    """``decode_document_bytes`` reads legacy encodings by default; with ``legacy=False`` only Unicode text; newlines
    become ``\\n``; files of an unknown type are read only when they are Unicode text."""
    western = "Crème brûlée, déjà vu.".encode("cp1252")
    assert decode_document_bytes(western, "notes") == "Crème brûlée, déjà vu."
    with pytest.raises(BinaryDocument) as info:
        decode_document_bytes(western, "notes", legacy=False)
    assert str(info.value) == not_text("notes", "it is not UTF-8 or UTF-16/32 text")
    assert decode_document_bytes(b"one\r\ntwo\rthree\n", "notes") == "one\ntwo\nthree\n"
    with pytest.raises(UserError) as error:
        load_document(write(tmp_path, "notes.dat", western))
    assert str(error.value) == "unsupported file type '.dat': give a PDF, .txt, .md or .html file"


def test_stdin_bytes_in_a_legacy_encoding_are_read():
    doc = load_document("-", stdin=io.BytesIO("Crème brûlée, déjà vu.".encode("cp1252")))
    assert (doc.kind, doc.text) == ("text", "Crème brûlée, déjà vu.")


class _Unsure(io.BytesIO):
    def __init__(self, data: bytes, error: type[Exception]):
        super().__init__(data)
        self.error = error

    def isatty(self) -> bool:
        raise self.error("cannot tell")


@pytest.mark.parametrize("error", [ValueError, OSError])
def test_a_stdin_that_cannot_tell_whether_it_is_a_terminal_is_read(error):
    assert load_document("-", stdin=_Unsure(b"piped text", error)).text == "piped text"


def test_stdin_messages():
    class Terminal(io.BytesIO):
        def isatty(self) -> bool:
            return True

    class Failing(io.BytesIO):
        def read(self, size: int | None = -1) -> bytes:
            raise OSError(errno.EIO, "Input/output error")

    with pytest.raises(UserError) as info:
        load_document("-", stdin=Terminal(b"typed"))
    assert str(info.value) == "no document on stdin: pipe one in (e.g. cat report.pdf | ...) or give a file path"
    with pytest.raises(UserError) as info:
        load_document("-", stdin=Failing(b""))
    assert str(info.value) == "cannot read stdin: Input/output error; pipe a document in or give a path"


def test_files_that_cannot_be_read_are_named_with_the_reason(tmp_path):
    notes = write(tmp_path, "notes.txt", b"text")
    with pytest.raises(UserError) as info:
        load_document(os.path.join(notes, "inside.txt"))  # a path through a file
    assert str(info.value) == f"cannot read '{notes}/inside.txt': Not a directory; check the path"
    if os.path.exists("/proc/self/mem"):  # opens, but reading its first page fails
        with pytest.raises(UserError) as info:
            load_document("/proc/self/mem")
        assert str(info.value) == "cannot read '/proc/self/mem': Input/output error; check the file"


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs POSIX FIFOs")
def test_a_fifo_is_named_in_its_refusal(tmp_path):
    fifo = tmp_path / "pipe.txt"
    os.mkfifo(fifo)
    outcome = _load_in_thread(str(fifo))
    assert str(outcome["error"]) == (f"'{fifo}' is a FIFO (named pipe), not a regular file: give a document file, "
                                     "or pipe the data in on stdin")


# --------------------------------------------------------------------------- encodings told by their bytes


def test_damaged_bytes_after_a_byte_order_mark_are_marked_not_fatal(tmp_path):
    utf8 = b"\xef\xbb\xbf" + "Grüße ".encode() + b"\xff" + b" end"
    assert load_document(write(tmp_path, "utf8.txt", utf8)).text == "Grüße \ufffd end"
    utf16 = "\ufeffHi there".encode("utf-16-le") + b"!"  # an odd byte at the end
    assert load_document(write(tmp_path, "utf16.txt", utf16)).text == "Hi there\ufffd"


def test_utf8_with_as_many_damaged_as_valid_sequences_stays_utf8(tmp_path):
    data = "café ".encode() + b"\xff"  # one valid non-ASCII sequence, one invalid byte
    assert load_document(write(tmp_path, "notes.txt", data)).text == "café \ufffd"


@pytest.mark.parametrize("encoding", ["utf-16-le", "utf-16-be", "utf-32-le", "utf-32-be"])
def test_wide_text_without_a_mark_is_recognised_from_two_characters(tmp_path, encoding):
    assert load_document(write(tmp_path, "hi.txt", "Hi".encode(encoding))).text == "Hi"
    with pytest.raises(BinaryDocument, match="zero bytes"):  # one character is no evidence: zero bytes, binary
        load_document(write(tmp_path, "h.txt", "H".encode(encoding)))


@pytest.mark.parametrize("encoding", ["utf-16-le", "utf-32-le", "utf-32-be"])
def test_wide_text_cut_mid_character_keeps_its_text(tmp_path, encoding):
    data = "Hi there".encode(encoding)[:-1]
    assert load_document(write(tmp_path, "cut.txt", data)).text == "Hi ther\ufffd"


def test_utf16_without_a_mark_needs_30_percent_latin_characters(tmp_path):
    """UTF-16 without a mark is told by its zero bytes: the high byte of Latin characters, here 30% of them."""
    text = "Дом и сад " * 4 + "Кот и пёс."
    assert sum(ord(c) < 256 for c in text) * 10 == len(text) * 3
    assert load_document(write(tmp_path, "ru.txt", text.encode("utf-16-le"))).text == text.strip()


def test_utf16_without_a_mark_may_have_2_percent_zero_low_bytes(tmp_path):
    """A character such as Ā (U+0100) has a zero low byte; 2% of them still read as UTF-16 LE."""
    text = "The word Ātman means the self in Sanskrit texts..."
    assert len(text) == 50 and sum(ord(c) % 256 == 0 for c in text) == 1
    assert load_document(write(tmp_path, "atman.txt", text.encode("utf-16-le"))).text == text


def _table(values: list[int], size: int, order: str) -> bytes:
    return b"".join(value.to_bytes(size, order) for value in values)


def test_tables_of_binary_numbers_are_not_wide_text(tmp_path):
    """Numbers whose zero bytes do not fall as they do in mostly-Latin UTF-16/32 are binary, though each 4 or 2 bytes
    would decode: 32-bit numbers half over 65535 (little- and big-endian), 16-bit numbers that are often multiples of
    256."""
    mixed = [1000 + 7 * k if k % 2 else 100_001 + 4 * k for k in range(400)]
    astral = [65_536 + 0x41 + k % 26 for k in range(400)]
    sixteen = [0x41 + k % 26 if k % 2 else 0x100 * (1 + k % 40) for k in range(400)]
    tables = {"le32": _table(mixed, 4, "little"), "be32": _table(astral, 4, "big"),
              "le16": _table(sixteen, 2, "little")}
    for name, data in tables.items():
        with pytest.raises(BinaryDocument):
            load_document(write(tmp_path, f"{name}.txt", data))


def test_legacy_western_text_is_cp1252_short_or_long(tmp_path):
    """cp1252 for Latin text: a short one with few non-ASCII bytes, and a long one whose accented letters are a
    minority (a statistical guess misreads both as Baltic)."""
    short = "été à Noël, où?"
    assert load_document(write(tmp_path, "short.txt", short.encode("cp1252"))).text == short
    long = "Le garçon a mangé une crème brûlée à Noël, déjà vu. Voilà “quoted” — text… " * 3
    assert load_document(write(tmp_path, "long.txt", long.encode("cp1252"))).text == long.strip()
    thirty = "cet été là ok " * 6  # 18 of 60 letters accented: 30%
    assert load_document(write(tmp_path, "thirty.txt", thirty.encode("cp1252"))).text == thirty.strip()


def test_only_the_first_million_characters_decide_whether_text_is_mostly_latin(tmp_path):
    """A long Western text: its first 16 * 65536 characters (25% of their letters accented) decide, not the accented
    letters that follow."""
    head = "cet été là okay " * 65_536
    assert len(head) == 16 * 65_536
    text = head + "é" * 100_000
    assert load_document(write(tmp_path, "long.txt", text.encode("cp1252"))).text == text.strip()


def test_sixteen_non_ascii_bytes_are_enough_to_recognise_cyrillic(tmp_path):
    text = "Привет мир тест дар"
    data = text.encode("cp1251")
    assert sum(byte > 127 for byte in data) == 16
    assert load_document(write(tmp_path, "ru.txt", data)).text == text


def test_without_charset_normalizer_legacy_text_is_cp1252(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "charset_normalizer", None)  # the optional helper is not installed
    text = "“éèàâêîôûçëïüÿäöü”"
    assert load_document(write(tmp_path, "accents.txt", text.encode("cp1252"))).text == text
