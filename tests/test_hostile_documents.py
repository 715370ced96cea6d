"""Hostile and odd documents: encodings told by their content, binary refused whatever the extension, only regular
files (a FIFO must not hang, a device must not be read forever), a size cap, file names the file system refuses or
that are not UTF-8, padded PDFs, and arbitrary bytes (a property test): a Document or a UserError, nothing else."""

from __future__ import annotations

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
from snapkv_cli.documents import (
    DEFAULT_MAX_DOCUMENT_MB,
    MAX_DOCUMENT_MB_ENV,
    Document,
    decode_text,
    load_document,
    max_document_bytes,
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
    assert decode_text(b"ASCII only\r\n") == "ASCII only\n"


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
