"""Tests for snapkv_cli.answering.documents and the example documents."""

from __future__ import annotations

import io
import itertools
import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import pypdf
import pytest

from snapkv_cli.answering.documents import (
    DOCUMENT_SUFFIXES,
    Document,
    DocumentReader,
    Page,
    decode_document_bytes,
    formats,
    html_to_text,
    load_document,
    parse_page_ranges,
    parse_page_spec,
)
from snapkv_cli.errors import DocumentTooLarge, UserError
from tests.example_writer import make_examples

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"



PDF_PAGES = [f"# Page {n}\n\nThis is page {n}. The secret word is word{n}." for n in range(1, 7)]


def user_error(match: str, *args, **kwargs) -> str:
    """Call load_document, expecting a one-line UserError whose message contains ``match``."""
    with pytest.raises(UserError) as info:
        load_document(*args, **kwargs)
    message = str(info.value)
    assert "\n" not in message
    assert match in message, message
    return message


def write(tmp_path: Path, name: str, data: bytes | str) -> str:
    path = tmp_path / name
    if isinstance(data, str):
        path.write_text(data, encoding="utf-8")
    else:
        path.write_bytes(data)
    return str(path)


@pytest.fixture
def six_page_pdf(tmp_path: Path) -> str:
    return write(tmp_path, "six.pdf", make_examples.pdf_bytes(PDF_PAGES))


def encrypted_pdf(user_password: str) -> bytes:
    writer = pypdf.PdfWriter(clone_from=io.BytesIO(make_examples.pdf_bytes(PDF_PAGES[:2])))
    writer.encrypt(user_password=user_password, owner_password="owner")
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


# --- each kind of document loads ---------------------------------------------------------


@pytest.mark.parametrize("suffix", [".txt", ".text", ".log", ".rst"])
def test_text_file(tmp_path, suffix):
    path = write(tmp_path, "notes" + suffix, "Line one.\r\nLine two.\n")
    doc = load_document(path)
    assert doc == Document(path, "text", (Page(1, "Line one.\nLine two."),))
    assert doc.text == "Line one.\nLine two."


@pytest.mark.parametrize("suffix", [".md", ".markdown"])
def test_markdown_kept_as_is(tmp_path, suffix):
    source = "# Title\n\nSome **bold** text and a [link](http://x.example).\n\n- item\n"
    doc = load_document(write(tmp_path, "readme" + suffix, source))
    assert doc.kind == "markdown"
    assert doc.text == source.strip()


HTML = """<!DOCTYPE html>
<html><head><title>Ignored title</title><style>p { color: red }</style>
<script>var hidden = "script text";</script></head>
<body><h1>Report &amp; summary</h1>
<p>Hello    <b>world</b>,
   this&nbsp;is &lt;text&gt;.</p><script>alert("no")</script><noscript>no js</noscript>
<template><p>template text</p></template>
<ul><li>first</li><li>second</li></ul>
<table><tr><td>a</td><td>b</td></tr></table>
<div>line<br>break</div>
</body></html>"""


@pytest.mark.parametrize("suffix", [".html", ".htm"])
def test_html_visible_text_only(tmp_path, suffix):
    doc = load_document(write(tmp_path, "page" + suffix, HTML))
    assert doc.kind == "html"
    assert doc.text == (
        "Report & summary\n\nHello world, this is <text>.\n\nfirst\nsecond\n\na b\n\nline\nbreak"
    )
    for hidden in ("Ignored title", "color", "script text", "alert", "no js", "template text"):
        assert hidden not in doc.text


def test_html_unclosed_head_and_pre():
    assert html_to_text("<html><head><title>t</title><body><p>shown</p>") == "shown"
    assert html_to_text("<p>x</p><pre>  a\n    b</pre>") == "x\n\n  a\n    b"


def test_pdf_pages(six_page_pdf):
    doc = load_document(six_page_pdf)
    assert doc.kind == "pdf"
    assert [page.number for page in doc.pages] == [1, 2, 3, 4, 5, 6]
    for page in doc.pages:
        assert f"The secret word is word{page.number}." in page.text


def test_pdf_escaping_round_trips(tmp_path):
    text = r"Parentheses (like these), a back\slash and caf" + "\u00e9 \u201cquotes\u201d."
    doc = load_document(write(tmp_path, "esc.pdf", make_examples.pdf_bytes([text])))
    assert doc.text == text


def test_pdf_blank_pages_are_left_out(tmp_path):
    doc = load_document(write(tmp_path, "gap.pdf", make_examples.pdf_bytes(["one", "", "three"])))
    assert [page.number for page in doc.pages] == [1, 3]


def test_unknown_extension_utf8_is_text(tmp_path):
    assert load_document(write(tmp_path, "data.csv", "a,b\n1,2\n")).kind == "text"
    assert load_document(write(tmp_path, "NOTES", "no extension")).text == "no extension"


def test_unknown_extension_pdf_bytes_is_pdf(tmp_path):
    path = write(tmp_path, "report.bin", make_examples.pdf_bytes(["hi"]))
    assert load_document(path).kind == "pdf"


# --- the formats and the reader ----------------------------------------------------------


def test_the_file_name_endings_read_as_documents():
    assert {".pdf", ".txt", ".text", ".log", ".rst", ".md", ".markdown", ".html", ".htm"} == DOCUMENT_SUFFIXES


def test_a_format_declared_in_formats_is_read_by_its_ending_and_its_content(tmp_path, monkeypatch):
    """A new format is one line in FORMATS plus its own reading: the reader needs nothing else."""
    def scroll_pages(source, data, pages):
        return tuple(Page(number, text.decode()) for number, text in enumerate(data[7:].split(b"|"), 1)
                     if pages is None or str(number) == pages)

    scroll = formats.BinaryFormat("scroll", (".scroll",), lambda data: data.startswith(b"SCROLL:"), scroll_pages)
    shout = formats.TextFormat("shout", (".shout",), lambda text: text.startswith("SHOUT:"), str.lower)
    monkeypatch.setattr(formats, "FORMATS", (*formats.FORMATS, scroll, shout))
    by_ending = load_document(write(tmp_path, "a.scroll", b"SCROLL:one|two"), pages="2")
    assert (by_ending.kind, by_ending.pages) == ("scroll", (Page(2, "two"),))
    by_content = load_document("-", stdin=io.BytesIO(b"SCROLL:one|two"))
    assert (by_content.kind, by_content.text) == ("scroll", "one\n\ntwo")
    loud = load_document(write(tmp_path, "a.shout", "HELLO\fTHERE"))
    assert (loud.kind, loud.pages) == ("shout", (Page(1, "hello"), Page(2, "there")))
    assert load_document("-", stdin=io.StringIO("SHOUT: HI")).kind == "shout"
    assert load_document(write(tmp_path, "a.txt", "SHOUT: HI")).text == "SHOUT: HI"  # the ending decides first
    user_error("give a PDF, .txt, .md, .html, .scroll or .shout file", write(tmp_path, "a.bin", bytes(range(256))))


def test_a_document_reader_keeps_its_pages_unless_given_others_and_its_limit_in_mb(tmp_path):
    path = write(tmp_path, "paged.txt", "one\ftwo\fthree")
    reader = DocumentReader(pages="2-3")
    assert [page.text for page in reader.read(path).pages] == ["two", "three"]
    assert [page.text for page in reader.read(path, pages="1").pages] == ["one"]  # a batch job's own
    assert [page.text for page in reader.read("-", stdin=io.BytesIO(b"a\fb\fc")).pages] == ["b", "c"]
    assert len(DocumentReader().read(path).pages) == 3
    big = write(tmp_path, "big.txt", "x" * 2098)
    assert DocumentReader(max_document_mb=0.002).read(write(tmp_path, "fits.txt", "x" * 2097)).text == "x" * 2097
    with pytest.raises(DocumentTooLarge) as info:
        DocumentReader(max_document_mb=0.002).read(big)  # 0.002 MB is 2097 bytes
    assert (info.value.size_bytes, info.value.limit_bytes) == (2098, 2097)


# --- page selection ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "expected"),
    [("3", [3]), ("2-3,5", [2, 3, 5]), ("5-", [5, 6]), (" 1 , 3 - 4 ", [1, 3, 4]),
     ("4,1-2,2", [1, 2, 4]), ("1-6", [1, 2, 3, 4, 5, 6])],
)  # fmt: skip
def test_pdf_page_selection(six_page_pdf, spec, expected):
    doc = load_document(six_page_pdf, pages=spec)
    assert [page.number for page in doc.pages] == expected
    assert all(f"word{page.number}." in page.text for page in doc.pages)


@pytest.mark.parametrize(
    ("spec", "hint"),
    [("abc", "like 3-7,10"), ("1-2-3", "like 3-7,10"), (",", "like 3-7,10"),
     ("-3", "like 3-7,10"), ("0", "numbered from 1"), ("0-2", "numbered from 1"),
     ("5-3", "write 3-5"),
     ("7", "out of range"), ("2-9", "out of range"), ("7-", "out of range")],
)  # fmt: skip
def test_bad_page_selection(six_page_pdf, spec, hint):
    message = user_error(hint, six_page_pdf, pages=spec)
    assert "has 6 pages" in message


def test_parse_page_spec_directly():
    assert parse_page_spec("2-", 3, "x") == [2, 3]
    with pytest.raises(UserError, match="x has 1 page\\)"):
        parse_page_spec("1-x", 1, "x")


def test_form_feed_pages(tmp_path):
    path = write(tmp_path, "ff.txt", "first page\fsecond page\f\fthird? no, fourth\f")
    doc = load_document(path)
    assert [(p.number, p.text) for p in doc.pages] == [
        (1, "first page"), (2, "second page"), (4, "third? no, fourth")
    ]  # fmt: skip
    assert [p.number for p in load_document(path, pages="2-").pages] == [2, 4]
    user_error("has 4 pages", path, pages="5")
    user_error("no text in pages 3", path, pages="3")


def test_one_page_text_accepts_page_1_only(tmp_path):
    path = write(tmp_path, "one.md", "only page")
    assert load_document(path, pages="1").text == "only page"
    user_error("has 1 page;", path, pages="2")


def test_page_spans_map_back_to_pages(six_page_pdf, tmp_path):
    docs = [
        load_document(six_page_pdf, pages="2,4-5"),
        load_document(write(tmp_path, "ff.txt", "a\fbb\f\fccc")),
    ]
    for doc in docs:
        spans = doc.page_spans()
        assert [number for number, _, _ in spans] == [page.number for page in doc.pages]
        for (_, start, end), page in zip(spans, doc.pages):
            assert doc.text[start:end] == page.text
        for (_, _, end), (_, next_start, _) in itertools.pairwise(spans):
            assert doc.text[end:next_start] == "\n\n"
        assert spans[0][1] == 0 and spans[-1][2] == len(doc.text)


# --- stdin -------------------------------------------------------------------------------


def test_stdin_text_bytes():
    doc = load_document("-", stdin=io.BytesIO(b"\xef\xbb\xbfpiped text\n"))
    assert doc == Document("<stdin>", "text", (Page(1, "piped text"),))


def test_stdin_text_stream():
    assert load_document("-", stdin=io.StringIO("from a text stream")).text == "from a text stream"


def test_stdin_html_is_sniffed():
    doc = load_document("-", stdin=io.BytesIO(b"  \n<!DOCTYPE HTML><p>hi<script>x</script></p>"))
    assert (doc.kind, doc.text) == ("html", "hi")
    assert load_document("-", stdin=io.StringIO("<HTML><body>yo</body></html>")).kind == "html"


def test_stdin_pdf_bytes_with_pages():
    data = make_examples.pdf_bytes(PDF_PAGES)
    doc = load_document("-", pages="6", stdin=io.BytesIO(data))
    assert (doc.source, doc.kind, doc.pages[0].number) == ("<stdin>", "pdf", 6)


def test_stdin_defaults_to_sys_stdin_buffer(monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"default stdin")))
    assert load_document("-").text == "default stdin"


def test_stdin_terminal_is_refused():
    class Terminal(io.BytesIO):
        def isatty(self):
            return True

    user_error("no document on stdin: pipe one in", "-", stdin=Terminal(b"typed"))


def test_empty_stdin():
    user_error("<stdin>' has no text", "-", stdin=io.BytesIO(b" \n\t"))


# --- text decoding -----------------------------------------------------------------------


def test_cp1252_fallback(tmp_path):
    doc = load_document(write(tmp_path, "win.txt", b"caf\xe9 \x93quoted\x94 \x80 5"))
    assert doc.text == "caf\u00e9 \u201cquoted\u201d \u20ac 5"


def test_decode_fallbacks():
    assert decode_document_bytes("gr\u00fc\u00df".encode(), "x") == "gr\u00fc\u00df"
    assert decode_document_bytes(b"\xef\xbb\xbfbom\r\nline\rmac", "x") == "bom\nline\nmac"
    # \x81 is not cp1252: latin-1, which maps every byte (one control character is allowed)
    assert decode_document_bytes(b"caf\xe9 \x81 au lait", "x") == "caf\u00e9 \x81 au lait"


# --- errors ------------------------------------------------------------------------------


def test_missing_file(tmp_path):
    user_error("check the path", str(tmp_path / "nope.pdf"))


def test_directory(tmp_path):
    user_error("is a directory", str(tmp_path))


def test_unreadable_file(tmp_path, monkeypatch):
    path = write(tmp_path, "secret.txt", "x")
    real_open = os.open

    def deny(name, *args, **kwargs):  # tests may run as root, where chmod 000 does not stop reading
        if name == path:
            raise PermissionError(13, "Permission denied", name)
        return real_open(name, *args, **kwargs)

    monkeypatch.setattr(os, "open", deny)
    user_error("permission denied; check its permissions", path)


@pytest.mark.parametrize(
    ("name", "data"),
    [("empty.txt", b""), ("blank.md", b" \n\n\t "), ("script.html", b"<script>x()</script>")],
)
def test_empty_document(tmp_path, name, data):
    user_error("has no text", write(tmp_path, name, data))


def test_scanned_pdf(tmp_path):
    path = write(tmp_path, "scan.pdf", make_examples.pdf_bytes(["", ""]))
    user_error("looks scanned; run OCR first, e.g. ocrmypdf", path)


def test_pdf_without_pages(tmp_path):
    user_error("has no pages", write(tmp_path, "none.pdf", make_examples.pdf_bytes([])))


def test_scanned_selected_pages(tmp_path):
    path = write(tmp_path, "mixed.pdf", make_examples.pdf_bytes(["text", ""]))
    user_error("no extractable text in pages 2", path, pages="2")


def test_encrypted_pdf(tmp_path):
    path = write(tmp_path, "locked.pdf", encrypted_pdf("secret"))
    user_error("is encrypted; decrypt it first, e.g. qpdf --decrypt", path)


def test_encrypted_pdf_with_empty_password_loads(tmp_path):
    doc = load_document(write(tmp_path, "owner_only.pdf", encrypted_pdf("")))
    assert "word2." in doc.text


@pytest.mark.parametrize(
    ("name", "damage"),
    [
        ("truncated.pdf", lambda data: data[: len(data) // 2]),
        ("garbage.pdf", lambda data: bytes(range(256)) * 20),
        ("body.pdf", lambda data: b"%PDF-1.4\n" + b"(((( << obj >> endobj\n" * 20 + b"%%EOF\n"),
    ],
)
def test_damaged_pdf(tmp_path, name, damage):
    path = write(tmp_path, name, damage(make_examples.pdf_bytes(PDF_PAGES)))
    user_error("is it truncated or damaged?", path)
    assert str(load_error(path)).startswith("could not read PDF")


def load_error(path: str) -> UserError:
    with pytest.raises(UserError) as info:
        load_document(path)
    return info.value


def test_unsupported_binary(tmp_path):
    user_error(
        "unsupported file type '.bin': give a PDF, .txt, .md or .html file",
        write(tmp_path, "blob.bin", b"\x00\x01\x02binary"),
    )
    user_error("'(no extension)'", write(tmp_path, "blob", b"\x7fELF\x02\x01\x01\x00\x00\x00"))


def test_pypdf_warnings_are_silenced(tmp_path, caplog):
    data = make_examples.pdf_bytes(PDF_PAGES)
    data = re.sub(rb"\n0000000015 00000 n", b"\n0000000099 00000 n", data)  # wrong offset
    path = write(tmp_path, "offsets.pdf", data)
    with caplog.at_level(logging.WARNING):
        assert len(load_document(path).pages) == 6
    assert not [r for r in caplog.records if r.name.startswith("pypdf")]
    assert logging.getLogger("pypdf").level == logging.NOTSET


def test_importing_module_does_not_import_pypdf():
    code = "import sys, snapkv_cli.answering.documents; assert 'pypdf' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


# --- the example documents ---------------------------------------------------------------


def test_committed_report_matches_generator():
    assert (EXAMPLES / "annual_report.pdf").read_bytes() == make_examples.build_report()


def readme_answers() -> dict[str, list[tuple[str, str, int | None]]]:
    """``{file: [(question, answer, page)]}`` from examples/README.md."""
    answers: dict[str, list[tuple[str, str, int | None]]] = {}
    current = None
    for line in (EXAMPLES / "README.md").read_text().splitlines():
        if line.startswith("## "):
            current = answers.setdefault(line[3:].strip(), [])
        match = re.fullmatch(r"- Q: (.+?) A: (.+?)(?: \(page (\d+)\))?", line)
        if match:
            page = int(match.group(3)) if match.group(3) else None
            current.append((match.group(1), match.group(2), page))
    return answers


def test_readme_answers_are_in_the_examples():
    answers = readme_answers()
    assert set(answers) == {"annual_report.pdf", "field_notes.txt"}
    for name, qas in answers.items():
        doc = load_document(str(EXAMPLES / name))
        assert len(qas) >= 5
        for question, answer, page in qas:
            text = doc.pages[page - 1].text if page else doc.text
            assert answer in " ".join(text.split()), (name, question)


def test_report_shape():
    doc = load_document(str(EXAMPLES / "annual_report.pdf"))
    assert 4 <= len(doc.pages) <= 6
    assert 1500 <= len(doc.text.split()) <= 2500
    assert "The company's headquarters are in Tallinn." in " ".join(doc.text.split())
    notes = load_document(str(EXAMPLES / "field_notes.txt"))
    assert 800 <= len(notes.text.split()) <= 1200


# --- exact behaviour at the edges ----------------------------------------------------------


def test_stdin_text_stream_drops_the_byte_order_mark_and_keeps_pages():
    doc = load_document("-", stdin=io.StringIO("\ufeffXylophone notes\r\nline two\rline three\fpage two"))
    assert doc == Document("<stdin>", "text", (Page(1, "Xylophone notes\nline two\nline three"), Page(2, "page two")))
    assert load_document("-", pages="2", stdin=io.StringIO("one\ftwo")).pages == (Page(2, "two"),)
    html = load_document("-", stdin=io.StringIO("\ufeff<html><body><p>Hi</p></body></html>"))
    assert (html.kind, html.text) == ("html", "Hi")


def test_form_feeds_split_pages_and_only_a_trailing_one_is_dropped(tmp_path):
    assert load_document(write(tmp_path, "two.txt", "a\fb")).pages == (Page(1, "a"), Page(2, "b"))
    one = write(tmp_path, "one.txt", "one page\f")
    assert str(load_error_pages(one, "2")) == f"page selection '2' is out of range: {one} has 1 page; choose pages 1-1"
    blank = write(tmp_path, "blank.txt", "  \n")
    assert str(load_error_pages(blank, "1")) == (f"'{blank}' has no text in pages 1: give a document that contains "
                                                 "some text")
    assert str(load_error(blank)) == f"'{blank}' has no text: give a document that contains some text"
    html = write(tmp_path, "pages.html", "<p>one</p>\f<p>two</p>")
    assert load_document(html).pages == (Page(1, "one"), Page(2, "two"))


def load_error_pages(path: str, pages: str) -> UserError:
    with pytest.raises(UserError) as info:
        load_document(path, pages=pages)
    return info.value


def test_page_selection_messages_without_a_document():
    with pytest.raises(UserError) as info:
        parse_page_ranges("x")
    assert str(info.value) == "invalid page selection 'x': use numbers and ranges like 3-7,10"


def test_pdf_messages_name_the_file(six_page_pdf, tmp_path):
    assert str(load_error_pages(six_page_pdf, "7")) == (
        f"page selection '7' is out of range: {six_page_pdf} has 6 pages; choose pages 1-6"
    )
    scan = write(tmp_path, "scan.pdf", make_examples.pdf_bytes(["", ""]))
    assert str(load_error(scan)) == (
        f"'{scan}' has no extractable text; it looks scanned; run OCR first, e.g. ocrmypdf in.pdf out.pdf"
    )
    text = write(tmp_path, "text.pdf", "not a PDF at all")
    assert str(load_error(text)) == f"could not read PDF '{text}': no PDF header; is it truncated or damaged?"
    data = make_examples.pdf_bytes(PDF_PAGES)
    cut = write(tmp_path, "cut.pdf", data[: len(data) // 2])
    assert str(load_error(cut)) == f"could not read PDF '{cut}': no end-of-file marker; is it truncated or damaged?"
    fake = write(tmp_path, "fake.pdf", b"%PDF-1.7\n" + bytes(range(256)) * 4 + b"\n%%EOF\n")
    assert str(load_error(fake)) == f"could not read PDF '{fake}': startxref not found; is it truncated or damaged?"


def test_pdf_header_within_1024_bytes_and_end_marker_within_the_last_2048(tmp_path):
    """Junk may come before the %PDF- header as long as it starts in the first 1024 bytes (as Acrobat reads PDFs),
    and after the %%EOF marker as long as the marker stays in the last 2048 bytes."""
    data = make_examples.pdf_bytes(["hello world"])
    assert data.endswith(b"%%EOF\n")
    assert load_document(write(tmp_path, "head.pdf", b"J" * 1019 + data)).text == "hello world"
    late = write(tmp_path, "late.pdf", b"J" * 1020 + data)
    assert "no PDF header" in str(load_error(late))
    assert load_document(write(tmp_path, "tail.pdf", data + b"X" * 2042)).text == "hello world"  # "%%EOF\n" + 2042
    tail = write(tmp_path, "long_tail.pdf", data + b"X" * 2043)
    assert "no end-of-file marker" in str(load_error(tail))


def test_html_spacing_around_inline_and_block_elements():
    assert html_to_text("<p>one <b>two</b> three</p><p>four</p>") == "one two three\n\nfour"
    assert html_to_text("<p>one <b> two</b></p>") == "one two"
    assert html_to_text("<p>X-ray </p><p>FAX</p><p>end</p>") == "X-ray\n\nFAX\n\nend"


def test_html_pre_keeps_its_spaces_and_text_after_it_does_not():
    assert html_to_text("<pre>a  <b>b</b>  c</pre><p>after    pre</p>") == "a  b  c\n\nafter pre"
    assert html_to_text("<pre>x<pre>y</pre>  z  </pre><p>after    pre</p>") == "x\n\ny\n\n  z\n\nafter pre"
    assert html_to_text("<pre><code>x = 1\n</code></pre><p>after</p>") == "x = 1\n\nafter"  # one blank line


def test_html_the_parser_rejects_loses_its_tags_scripts_and_blank_lines():
    html = ('<p>Kept &amp; shown</p>\n<SCRIPT type="a">\nhidden()\n</SCRIPT>\n<![bogus[ ]]>  more   text \n\n'
            "<div>last</div>")
    assert html_to_text(html) == "Kept & shown\nmore text\nlast"


def test_pdf_encrypted_with_aes_is_named_encrypted(tmp_path):
    """AES-256 encryption (revision 6) needs the optional cryptography package even to try the empty password;
    without it, and with it (these keys match no password), the file is encrypted, not damaged."""
    zeros = {"O": 48, "U": 48, "OE": 32, "UE": 32, "Perms": 16}  # key lengths in bytes, as hex
    keys = b" ".join(b"/%s <%s>" % (name.encode(), b"00" * length) for name, length in zeros.items())
    encrypt = b"/Encrypt << /Filter /Standard /V 5 /R 6 /Length 256 /P -4 " + keys + b" >> /ID [<00> <00>]"
    data = make_examples.pdf_bytes(["secret"])
    assert data.count(b"/Info 5 0 R >>") == 1
    path = write(tmp_path, "aes.pdf", data.replace(b"/Info 5 0 R >>", b"/Info 5 0 R " + encrypt + b" >>"))
    assert str(load_error(path)) == f"'{path}' is encrypted; decrypt it first, e.g. qpdf --decrypt in.pdf out.pdf"


def test_pypdf_explanations_are_cut_to_200_characters(tmp_path):
    name = "Long" + "Name" * 60  # a filter pypdf does not know, named at length
    data = make_examples.pdf_bytes(["hello"]).replace(b"/Length", b"/Filter /" + name.encode() + b" /Length", 1)
    path = write(tmp_path, "filter.pdf", data)
    message = str(load_error(path))
    prefix, suffix = f"could not read PDF '{path}': ", "; is it truncated or damaged?"
    assert message.startswith(prefix) and message.endswith(suffix)
    detail = message[len(prefix):-len(suffix)]
    assert len(detail) == 200 and f"Unsupported filter /{name}".startswith(detail)
