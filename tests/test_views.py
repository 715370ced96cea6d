"""The views of an inspection (``snapkv_cli.views``) and the inspection's own arithmetic, on a hand-built inspection.

A 24-token prompt whose tokens, pages, paragraphs, window and kept positions are written here, so that every shown
number (shares, counts, positions, percentages) is counted in the test: the terminal view's text, the HTML page's
tables and embedded data, the PNG's pixels, and the units bytes are written in.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import io
import json
import os
import re

import numpy as np
import pytest
from rich.console import Console, Group
from rich.style import Style

from snapkv_cli.answering.inspection import Inspection, Occurrence
from snapkv_cli.answering.prompting import Prompt
from snapkv_cli.answering.report import (
    CacheInfo,
    DocCacheInfo,
    LayerRow,
    Memory,
    PageRow,
    PrefixInfo,
    PromptInfo,
    Report,
    SettingsInfo,
    Timings,
)
from snapkv_cli.output_files import Terminated, check_writable
from snapkv_cli.views import heatmap, terminal
from snapkv_cli.views import html as html_view
from snapkv_cli.views.units import human_bytes

TOKENS = ["<s>user:", "The", " lamp", " was", " lit", ".", "\n\n", "Hale", " fixed", " the", " fog", ".", "\n \n",
          "Coal", " came", ".", "\nQ:", " Who", " fixed", " the", " fog?", "\n", "A", ":"]
DOCUMENT, QUESTION = (1, 16), (17, 21)
WINDOW = 6  # positions 18-23
PAGES = [None] + [1] * 6 + [2] * 6 + [3] * 3 + [None] * 8  # page 1: 1-6, page 2: 7-12, page 3: 13-15
# what each (layer, KV head) kept besides the window (always kept)
KEPT = {
    (0, 0): [0, 1, 2, 3, 7, 8], (0, 1): [0, 2, 3, 4, 9, 13],
    (1, 0): [0, 2, 3, 10, 11, 14], (1, 1): [1, 2, 3, 12, 13, 15],
    (2, 0): [0, 2, 5, 6, 7, 8], (2, 1): [0, 2, 3, 4, 5, 6],
}


def hand_report(*, question: str = "Who fixed the fog?", model: str = "tiny/model") -> Report:
    settings = SettingsInfo({"window_size": WINDOW, "max_capacity_prompt": 12, "budget": 0.5, "kernel_size": 3,
                             "pooling": "maxpool", "pooling_window": "centered", "gqa_aggregation": "mean",
                             "layer_budgets": "uniform", "head_budgets": "uniform", "whole_words": False})
    layers = [LayerRow(layer=layer, kept_tokens_min=12, kept_tokens_max=12, kept_tokens_mean=12.0, capacity=12,
                       compressed=True, sliding_window=False) for layer in range(3)]
    return Report(
        answer="Hale", question=question, document="notes <b>.txt", model=model, device="cpu", dtype="float32",
        dtype_reason="asked for", quantization=None, method="snapkv", settings=settings, prompt_tokens=24,
        prompt=PromptInfo(document=15, question=4, template=5, window_size=WINDOW, question_tokens_in_window=3,
                          question_tokens=4, question_fits=False, truncated_document_tokens=0),
        generated_tokens=2,
        cache=CacheInfo(tokens_before=24, tokens_after=11.5, tokens_allocated=12.0, bytes_before=6144,
                        bytes_after=2944, compression_ratio=2.087, tokens_after_min=10, tokens_after_max=12),
        layers=layers, pages=[PageRow(page=1, document_tokens=6, kept_share=0.25),
                              PageRow(page=2, document_tokens=6, kept_share=0.1667)],
        timings=Timings(load_s=1.5, prefill_s=0.25, decode_s=0.5, decode_tokens_per_s=4.0, selection_s=0.01),
        memory=Memory(peak_rss_bytes=3 * 1024 ** 3, cuda_peak_bytes=None), question_index=0, reused_prefix_tokens=0,
        prefix=PrefixInfo(tokens=16, source="prefill", seconds=0.0), doc_cache=DocCacheInfo())


def hand_inspection(*, paged: bool = False, layers: tuple[int, ...] = (0, 1, 2), tokens: list[str] | None = None,
                    **report) -> Inspection:
    tokens = list(tokens or TOKENS)
    prompt = Prompt(text="".join(tokens), input_ids=list(range(500, 500 + len(tokens))), document_span=DOCUMENT,
                    question_span=QUESTION, token_pages=list(PAGES) if paged else
                    [1 if DOCUMENT[0] <= p < DOCUMENT[1] else None for p in range(len(tokens))],
                    prefix_length=QUESTION[0])
    kept = np.zeros((3, 2, len(tokens)), dtype=bool)
    kept[:, :, len(tokens) - WINDOW:] = True
    for (layer, head), positions in KEPT.items():
        kept[layer, head, positions] = True
    scores = np.random.default_rng(0).random((3, 2, len(tokens))).astype(np.float32) + 0.1
    return Inspection(prompt=prompt, tokens=tokens, layers=list(layers), kept=kept, scores=scores,
                      scored=[True, True, True], report=hand_report(**report))


def plain(renderable, width: int = 200) -> str:
    """What a console without colour (a file, a pipe) prints."""
    console = Console(width=width, file=io.StringIO(), color_system=None)
    console.print(renderable)
    return console.file.getvalue()


def pairs_keeping(position: int, layer: int | None = None, head: int | None = None) -> int:
    """How many of the selected (layer, KV head) pairs keep ``position``, counted from ``KEPT`` and the window."""
    return sum(1 for (l_, h), positions in KEPT.items() if (layer is None or l_ == layer)
               and (head is None or h == head) and (position in positions or position >= len(TOKENS) - WINDOW))


# --------------------------------------------------------------------------- units


@pytest.mark.parametrize(("count", "shown"), [
    (0, "0 B"), (1, "1 B"), (512.7, "512 B"), (1023, "1023 B"), (1024, "1.0 KB"), (1536, "1.5 KB"),
    (1024 ** 2 - 1, "1024.0 KB"), (1024 ** 2, "1.0 MB"), (5 * 1024 ** 2 + 1024 ** 2 // 4, "5.2 MB"),
    (1024 ** 3, "1.0 GB"), (3 * 1024 ** 4, "3072.0 GB"), (-2048, "-2.0 KB"), (-1023, "-1023 B"),
])
def test_byte_counts_read_in_the_largest_unit_below_1024(count, shown):
    assert human_bytes(count) == shown


# --------------------------------------------------------------------------- the inspection's arithmetic


def test_kept_counts_and_shares_count_the_selected_pairs():
    inspection = hand_inspection()
    length = len(TOKENS)
    assert inspection.length == length and inspection.num_heads == 2 and inspection.window == (18, 24)
    assert [inspection.in_window(p) for p in (17, 18, 23)] == [False, True, True]
    for layer, head in [(None, None), (1, None), (None, 0), (2, 1)]:
        expected = [pairs_keeping(p, layer, head) for p in range(length)]
        assert inspection.kept_counts(layer, head).tolist() == expected
        chosen = (1 if layer is not None else 3) * (1 if head is not None else 2)
        assert inspection.pairs(layer, head) == chosen
        assert inspection.kept_share(layer, head) == pytest.approx([count / chosen for count in expected])
    other = hand_inspection(layers=(4, 7, 9))  # the model's layer numbers, not row indices
    assert other.kept_counts(7).tolist() == [pairs_keeping(p, 1) for p in range(length)]
    assert other.describe_selection(7, 1) == "layer 7, KV head 1"


def test_the_selection_is_described_as_shaded():
    inspection = hand_inspection()
    assert inspection.describe_selection() == "share of 3 layers x 2 KV heads"
    assert inspection.describe_selection(layer=2) == "layer 2, share of its 2 KV heads"
    assert inspection.describe_selection(head=1) == "KV head 1, share of 3 layers"
    assert inspection.describe_selection(layer=0, head=0) == "layer 0, KV head 0"


@pytest.mark.parametrize(("layer", "head", "fragments"), [
    (3, None, ("layer 3 is out of range", "3 layers (0-2)")), (-1, None, ("layer -1 is out of range",)),
    (None, 2, ("head 2 is out of range", "2 KV heads (0-1)")), (None, -1, ("head -1 is out of range",)),
])
def test_a_layer_or_head_outside_the_model_is_refused(layer, head, fragments):
    from snapkv_cli.errors import OutOfRange

    inspection = hand_inspection()
    with pytest.raises(OutOfRange) as caught:
        inspection.kept_share(layer, head)
    assert all(fragment in str(caught.value) for fragment in fragments), str(caught.value)
    inspection.check_selection(2, 1)  # the last of each is fine
    inspection.check_selection(0, 0)


def test_page_runs_and_paragraphs():
    paged = hand_inspection(paged=True)
    assert paged.page_runs() == [(1, 1, 7), (2, 7, 13), (3, 13, 16)]
    assert [paged.page_of(p) for p in (0, 1, 12, 13, 16)] == [None, 1, 2, 3, None]
    # split at the blank lines "\n\n" (position 6) and "\n \n" (position 12): each ends its paragraph
    assert paged.paragraphs() == [(1, 7), (7, 13), (13, 16)]
    one_page = hand_inspection()
    assert one_page.page_runs() == [(1, 1, 16)]
    # a page that comes back after another makes a run of its own
    back = hand_inspection(paged=True)
    back.prompt.token_pages[13:16] = [1, 1, 1]
    assert back.page_runs() == [(1, 1, 7), (2, 7, 13), (1, 13, 16)]


def test_segments_are_pages_or_paragraphs_with_the_template_and_the_question():
    labels = lambda segments: [(s.label, s.start, s.end, s.length) for s in segments]
    assert labels(hand_inspection(paged=True).segments()) == [
        ("start", 0, 1, 1), ("p1", 1, 7, 6), ("p2", 7, 13, 6), ("p3", 13, 16, 3), ("question", 16, 24, 8)]
    assert labels(hand_inspection().segments()) == [
        ("start", 0, 1, 1), ("¶1", 1, 7, 6), ("¶2", 7, 13, 6), ("¶3", 13, 16, 3), ("question", 16, 24, 8)]
    # more units than rows: grouped into runs of about (16 - 1) / rows tokens, labelled first-last
    # (a unit starts a new group once the group would pass 15 / 2 tokens, while groups are left)
    assert labels(hand_inspection(paged=True).segments(max_rows=2)) == [
        ("start", 0, 1, 1), ("p1", 1, 7, 6), ("p2-3", 7, 16, 9), ("question", 16, 24, 8)]
    assert labels(hand_inspection().segments(max_rows=1)) == [
        ("start", 0, 1, 1), ("¶1-3", 1, 16, 15), ("question", 16, 24, 8)]
    assert labels(hand_inspection().segments(max_rows=3)) == labels(hand_inspection().segments())


def test_many_paragraphs_are_grouped_into_at_most_max_rows():
    body = [word for number in range(30) for word in (f"w{number}", "\n\n")]
    tokens = ["<s>", *body, "Q?", "A"]
    inspection = hand_inspection(tokens=tokens)
    inspection.prompt = dataclasses.replace(inspection.prompt, document_span=(1, 61), question_span=(61, 62),
                                            token_pages=[None] * len(tokens))
    units = inspection.paragraphs()
    assert units == [(1 + 2 * n, 3 + 2 * n) for n in range(30)]
    for rows in (4, 7, 20):
        segments = inspection.segments(max_rows=rows)
        middle = segments[1:-1]
        assert segments[0].label == "start" and segments[-1].label == "question"
        assert len(middle) <= rows
        assert [s.start for s in middle[1:]] == [s.end for s in middle[:-1]]  # contiguous, covering the document
        assert middle[0].start == 1 and middle[-1].end == 61
        for segment in middle:  # each label names the paragraphs it holds
            first, last = (segment.start - 1) // 2 + 1, (segment.end - 1) // 2
            assert segment.label == (f"¶{first}" if first == last else f"¶{first}-{last}")


def test_found_text_is_covered_by_its_tokens():
    inspection = hand_inspection()
    (fog,) = [o for o in inspection.find("fog") if o.start < 16]
    assert (fog.start, fog.end, fog.length) == (10, 11, 1)
    (hale,) = inspection.find("Hale fixed")
    assert (hale.start, hale.end) == (7, 9)
    assert hale.kept_per_head.tolist() == [[sum(p in KEPT[(layer, head)] for p in (7, 8)) for head in (0, 1)]
                                           for layer in range(3)]
    across = inspection.find("lit.\n")  # from inside a token to inside another
    assert [(o.start, o.end) for o in across] == [(4, 7)]
    assert [(o.start, o.end) for o in inspection.find("fixed the fog")] == [(8, 11), (18, 21)]
    with pytest.raises(ValueError, match=r"^nothing to find: the text is empty$"):
        inspection.find("")


def test_an_occurrence_counts_the_pairs_that_kept_it_whole_in_part_or_not():
    occurrence = Occurrence("x", 3, 6, np.array([[3, 0], [1, 3], [0, 2]]))
    assert occurrence.heads() == (2, 2, 2)
    assert occurrence.to_json() == {"text": "x", "span": [3, 6], "heads_whole": 2, "heads_part": 2, "heads_none": 2,
                                    "kept_per_head": [[3, 0], [1, 3], [0, 2]]}


# --------------------------------------------------------------------------- terminal


@pytest.mark.parametrize(("share", "level"), [
    (0.0, 0), (-0.5, 0), (1e-6, 1), (0.2, 1), (0.2001, 2), (0.4, 2), (0.41, 3), (0.6, 3), (0.61, 4), (0.8, 4),
    (0.81, 5), (1.0, 5), (1 / 3, 2), (2 / 3, 4), (1.5, 5),
])
def test_the_shading_level_is_the_fifth_of_the_share(share, level):
    assert terminal.level(share) == level


@pytest.mark.parametrize(("share", "width", "drawn"), [
    (0.0, 16, " " * 16), (1.0, 16, "█" * 16), (0.5, 16, "█" * 8 + " " * 8), (0.5, 4, "██  "),
    (1 / 32, 4, "▏   "), (3 / 32, 4, "▍   "), (7 / 32, 4, "▉   "), (9 / 32, 4, "█▏  "),
    (1 / 128, 16, "▏" + " " * 15), (3 / 256, 16, "▎" + " " * 15),
    (-0.3, 4, "    "), (1.7, 4, "████"), (0.3, 16, "████▊" + " " * 11),
])
def test_the_bar_is_drawn_in_eighths_of_a_cell(share, width, drawn):
    assert terminal.bar(share, width) == drawn


def test_the_header_says_the_model_budget_window_and_cache():
    text = plain(terminal.header(hand_inspection()))
    assert text == ("snapkv inspect  tiny/model · snapkv · budget 12 · window 6\n"
                    "prompt 24 tokens = 15 document + 5 template + 4 question\n"
                    "KV cache 24 → 11.5 tokens per head (2.09x) over 3 layers x 2 KV heads\n")


def summary_rows(text: str) -> list[list[str]]:
    return [line.split() for line in text.splitlines() if re.match(r"^ ?(start|question|p\d|¶\d)", line)]


def test_the_summary_table_gives_each_parts_tokens_and_kept_share():
    for paged, title in ((True, "Kept share by page"), (False, "Kept share by paragraph")):
        inspection = hand_inspection(paged=paged)
        share = inspection.kept_share()
        text = plain(terminal.summary_table(inspection, share))
        assert text.lstrip().startswith(title)
        assert re.search(r"part +positions +tokens +kept", text)
        rows = summary_rows(text)
        expected = []
        for label, start, end in [("start", 0, 1), ("1", 1, 7), ("2", 7, 13), ("3", 13, 16), ("question", 16, 24)]:
            mean = sum(pairs_keeping(p) for p in range(start, end)) / (6 * (end - start))
            name = label if not label.isdigit() else ("p" if paged else "¶") + label
            expected.append([name, f"{start}-{end}", str(end - start), f"{round(mean * 100)}%"])
        assert [row[:4] for row in rows] == expected
        # the bar: a sixteenth of its 16 cells per 1/16 of share
        bars = [line.split("%", 1)[1].strip() for line in text.splitlines() if re.match(r"^ ?(start|question|p\d|¶\d)",
                                                                                       line)]
        for bar, row in zip(bars, expected):
            mean = int(row[3][:-1]) / 100
            assert abs(len(bar.replace(" ", "")) - mean * 16) <= 1.01


def test_the_default_view_shows_passages_and_the_window():
    inspection = hand_inspection(paged=True)
    text = plain(terminal.build_view(inspection, plain=True))
    assert "Most-kept passages (60 tokens)" in text
    # the document before the window is 15 tokens: one passage, all of it
    share = sum(pairs_keeping(p) for p in range(1, 16)) / (6 * 15)
    assert re.findall(r"^#(\d)  positions (\d+)-(\d+)(.*) · (\d+)% kept$", text, re.M) == [
        ("1", "1", "16", " · pages 1-3", str(round(share * 100)))]
    assert "Observation window (positions 18-24, always kept)" in text
    window = text.split("Observation window (positions 18-24, always kept)\n")[1]
    assert window.startswith(f" ⟦W {''.join(TOKENS[18:]).strip()}⟧")  # " fixed": its blank before the mark
    passage, _ = text.split("% kept\n")[1].split("\n\nObservation window")
    assert passage.startswith("…⟦") and passage.endswith("⟧…")  # the passage's text between ellipses, then a blank line
    assert re.sub(r"⟦\S |⟧", "", passage) == "…" + "".join(TOKENS[1:16]) + "…"


def test_a_passage_on_one_page_names_that_page():
    inspection = hand_inspection(paged=True)
    found = terminal._pages_label(inspection, 7, 13), terminal._pages_label(inspection, 5, 8)
    assert found == (" · page 2", " · pages 1-2")
    assert terminal._pages_label(inspection, 16, 20) == ""


def test_the_full_view_shades_the_whole_prompt_then_the_summary():
    inspection = hand_inspection(paged=True)
    text = plain(terminal.build_view(inspection, full=True, plain=True))
    body = text.split("Shading: share of 3 layers x 2 KV heads\n")[1]
    assert re.sub(r"⟦\S |⟧", "", body).lstrip("\n").startswith("".join(TOKENS))
    assert body.index("Kept share by page") > body.index("A:")
    assert "Most-kept passages" not in text and "Observation window" not in text
    marks = re.findall(r"⟦(\S) ([^⟧]*)⟧", body.split("Kept share by page")[0])
    # each run of tokens of one level, as counted here
    runs: list[tuple[str, str]] = []
    for position, token in enumerate(TOKENS):
        count = pairs_keeping(position)
        mark = "W" if position >= 18 else (str(terminal.level(count / 6)) if count else None)
        if runs and runs[-1][0] == mark:
            runs[-1] = (mark, runs[-1][1] + token)
        else:
            runs.append((mark, token))
    assert marks == [(mark, run.strip()) for mark, run in runs if mark is not None and run.strip()]


def test_the_coloured_legend_names_each_shade_and_the_window():
    inspection = hand_inspection()
    text = plain(terminal.legend(inspection, None, None))
    assert text == "Legend:  none  ≤20%  ≤40%  ≤60%  ≤80%  ≤100%    window \nShading: share of 3 layers x 2 KV heads\n"
    one = plain(terminal.legend(inspection, 1, 0))
    assert one == "Legend:  kept  not kept    window \nShading: layer 1, KV head 0\n"
    assert plain(terminal.legend(inspection, 1, None)).endswith("Shading: layer 1, share of its 2 KV heads\n")
    # each swatch in the style it stands for
    console = Console(width=200, file=io.StringIO(), force_terminal=True, color_system="truecolor")
    swatches = {segment.text.strip(): segment.style for segment in console.render(terminal.legend(inspection, None,
                                                                                                   None))}
    assert [swatches[f"≤{share}%"] for share in (20, 40, 60, 80, 100)] == terminal.LEVEL_STYLES[1:]
    assert swatches["window"] == terminal.WINDOW_STYLE and not swatches["none"]
    one_pair = {segment.text.strip(): segment.style for segment in console.render(terminal.legend(inspection, 1, 0))}
    assert one_pair["kept"] == terminal.KEPT_STYLE and not one_pair["not kept"]
    assert plain(terminal.legend(inspection, None, 1, plain=True)) == (
        "Legend: ⟦1 …⟧ ⟦2 …⟧ ⟦3 …⟧ ⟦4 …⟧ ⟦5 …⟧ kept by ≤20%, ≤40%, ≤60%, ≤80%, ≤100% of the pairs; unmarked text: kept "
        "by none; ⟦W text⟧ the observation window (always kept)\nShading: KV head 1, share of 3 layers\n")
    assert plain(terminal.legend(inspection, 0, 1, plain=True)) == (
        "Legend: ⟦K text⟧ kept; unmarked text: not kept; ⟦W text⟧ the observation window (always kept)\n"
        "Shading: layer 0, KV head 1\n")


def test_coloured_tokens_take_their_levels_style_and_the_window_its_own():
    inspection = hand_inspection()
    share = inspection.kept_share()
    text = terminal.shaded_text(inspection, share, 0, 24)
    assert text.plain == "".join(TOKENS)
    styles = {}
    for span in text.spans:
        for position in range(24):
            start = len("".join(TOKENS[:position]))
            if span.start == start and span.end == start + len(TOKENS[position]):
                styles[position] = span.style
    for position in range(24):
        expected = terminal.WINDOW_STYLE if position >= 18 else terminal.LEVEL_STYLES[
            terminal.level(pairs_keeping(position) / 6)]
        assert styles.get(position, Style()) == expected, position
    empty = hand_inspection(tokens=[*TOKENS[:5], "", *TOKENS[6:]])
    assert terminal.shaded_text(empty, share, 4, 7).plain == TOKENS[4] + TOKENS[6]  # an empty token adds nothing


def test_plain_marks_keep_the_blank_around_a_run_outside_the_marks():
    inspection = hand_inspection()
    share = np.zeros(24)
    share[2:4] = 1.0  # " lamp was": level 5
    text = terminal.shaded_text(inspection, share, 1, 6, plain=True).plain
    assert text == "The ⟦5 lamp was⟧ lit."
    one = terminal.shaded_text(inspection, share, 1, 6, plain=True, one_pair=True).plain
    assert one == "The ⟦K lamp was⟧ lit."
    share[6] = 1.0  # "\n\n" alone: blank, so not marked
    assert terminal.shaded_text(inspection, share, 5, 8, plain=True).plain == ".\n\nHale"


def test_level_marks():
    assert [terminal.level_mark(level) for level in range(6)] == [None, "1", "2", "3", "4", "5"]
    assert [terminal.level_mark(level, one_pair=True) for level in range(6)] == [None, "K", "K", "K", "K", "K"]


def test_found_occurrences_say_where_they_are_and_how_many_pairs_kept_them():
    inspection = hand_inspection(paged=True)
    found = inspection.find("fixed")  # 8 (page 2) and 18 (the window)
    text = plain(terminal.build_view(inspection, found=(found,), plain=True))
    lines = re.findall(r"^Found .*$", text, re.M)
    whole = sum(8 in KEPT[pair] for pair in KEPT)
    assert lines == [f"Found 'fixed' at positions 8-9 · page 2: kept whole by {whole} of 6 (layer, KV head) pairs, "
                     f"in part by 0, not at all by {6 - whole}",
                     "Found 'fixed' at positions 18-19 · observation window, always kept: kept whole by 6 of 6 "
                     "(layer, KV head) pairs, in part by 0, not at all by 0"]
    assert text.count("Layer by layer: how many of its 2 KV heads kept all 1 tokens, some, none; then each head's "
                      "count of the 1 it kept (head 0 first)") == 2
    question = Occurrence("Who", 17, 18, np.zeros((3, 2), dtype=int))
    template = Occurrence("user", 0, 1, np.zeros((3, 2), dtype=int))
    assert terminal._where(inspection, question) == " · question"
    assert terminal._where(inspection, template) == " · template"
    assert terminal._where(inspection, found[1]) == " · observation window, always kept"


def test_only_the_first_ten_occurrences_are_shown_and_the_rest_counted():
    inspection = hand_inspection()
    many = [Occurrence("a", 2, 3, np.zeros((3, 2), dtype=int)) for _ in range(13)]
    text = plain(Group(*terminal.found_section(inspection, many)))
    assert text.count("Found 'a' at positions 2-3") == 10
    assert "... and 3 more occurrences of 'a' (--json lists them all)" in text
    ten = plain(Group(*terminal.found_section(inspection, many[:10])))
    assert ten.count("Found 'a'") == 10 and "more occurrences" not in ten


def table_rows(text: str) -> list[list[str]]:
    return [line.split() for line in text.splitlines() if re.match(r"^ ?\d", line)]


def test_the_found_table_merges_consecutive_layers_that_kept_the_same():
    inspection = hand_inspection(layers=(0, 1, 3))
    occurrence = Occurrence("x", 2, 5, np.array([[3, 1], [3, 1], [0, 3]]))
    text = plain(terminal.found_table(inspection, occurrence))
    assert re.search(r"layers +all +some +none +tokens kept, head by head", text)
    assert table_rows(text) == [["0-1", "1", "1", "0", "3", "1"], ["3", "1", "0", "1", "0", "3"]]
    gap = hand_inspection(layers=(0, 2, 3))  # layers 0 and 2 are not consecutive: two rows
    same = Occurrence("x", 2, 5, np.array([[3, 0], [3, 0], [3, 0]]))
    assert table_rows(plain(terminal.found_table(gap, same))) == [["0", "1", "0", "1", "3", "0"],
                                                                 ["2-3", "1", "0", "1", "3", "0"]]


def test_render_prints_marks_without_colour_and_shading_with_it():
    inspection = hand_inspection()
    piped = Console(width=200, file=io.StringIO())
    assert terminal.has_colour(piped) is False
    terminal.render(inspection, piped)
    assert piped.file.getvalue() == plain(terminal.build_view(inspection, plain=True))
    found = Console(width=200, file=io.StringIO())
    terminal.render(inspection, found, found=(inspection.find("Coal"),))
    assert "Found 'Coal' at positions 13-14" in found.file.getvalue()
    coloured = Console(width=200, file=io.StringIO(), force_terminal=True, color_system="truecolor")
    assert terminal.has_colour(coloured) is True
    terminal.render(inspection, coloured, full=True)
    assert "⟦" not in coloured.file.getvalue() and "\x1b[" in coloured.file.getvalue()
    no_color = Console(width=200, file=io.StringIO(), force_terminal=True, color_system="truecolor", no_color=True)
    assert terminal.has_colour(no_color) is False


def test_the_full_view_goes_through_the_pager_on_a_terminal(monkeypatch):
    inspection = hand_inspection()
    paged = []

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    console = Console(width=200, file=Terminal(), force_terminal=True, color_system="truecolor")
    def pager(**kwargs):
        paged.append(kwargs)
        return contextlib.nullcontext()

    monkeypatch.setattr(console, "pager", pager)
    terminal.render(inspection, console, full=True)
    assert paged == [{"styles": True}] and "snapkv inspect" in console.file.getvalue()  # the view, paged
    terminal.render(inspection, console, full=False)
    terminal.render(inspection, console, full=True, page=False)
    assert len(paged) == 1
    terminal.render(inspection, console, full=False, page=True)
    assert len(paged) == 2


# --------------------------------------------------------------------------- HTML


def embedded_data(page: str) -> dict:
    return json.loads(re.search(r'<script type="application/json" id="snapkv-data">(.*?)</script>', page,
                                re.S).group(1))


def test_the_page_embeds_what_each_head_kept_as_bits_and_its_scores():
    inspection = hand_inspection(paged=True)
    inspection.scored[1] = False
    data = html_view.page_data(inspection, layer=2, head=1)
    assert data["tokens"] == TOKENS and data["window"] == [18, 24] and data["heads"] == 2
    assert data["question_span"] == [17, 21] and data["document_span"] == [1, 16]
    assert data["pages"] == [[1, 1, 7], [2, 7, 13], [3, 13, 16]]
    assert data["initial"] == {"layer": 2, "head": 1}
    assert html_view.page_data(inspection)["initial"] == {"layer": "all", "head": "all"}
    assert data["report"] == inspection.report.to_json(answer=False)
    assert [entry["layer"] for entry in data["layers"]] == [0, 1, 2]
    for row, entry in enumerate(data["layers"]):
        for head, bits in enumerate(entry["kept"]):
            raw = np.frombuffer(base64.b64decode(bits), dtype=np.uint8)
            kept = [position for position in range(24) if raw[position // 8] >> (position % 8) & 1]
            assert kept == sorted(set(KEPT[(row, head)]) | set(range(18, 24)))  # bit i of byte i // 8, low first
        if row == 1:
            assert entry["scored"] is False and entry["scores"] is None and "scores_dtype" not in entry
            continue
        assert entry["scored"] is True and entry["scores_dtype"] == "f2"
        for head, encoded in enumerate(entry["scores"]):
            decoded = np.frombuffer(base64.b64decode(encoded), dtype="<f2")
            assert decoded.tolist() == pytest.approx(inspection.scores[row, head].tolist(), rel=1e-3)


@pytest.mark.parametrize(("peak", "dtype"), [(65504.0, "f2"), (70000.0, "f4"), (-70000.0, "f4")])
def test_scores_beyond_float16_travel_as_float32(peak, dtype):
    inspection = hand_inspection()
    inspection.scores[0, 1, 5] = peak
    inspection.scores[0, 0, 6] = np.nan  # not a score: does not count
    entry = html_view.page_data(inspection)["layers"][0]
    assert entry["scores_dtype"] == dtype
    decoded = np.frombuffer(base64.b64decode(entry["scores"][1]), dtype="<" + dtype)
    assert decoded[5] == peak and decoded.size == 24
    assert html_view.page_data(inspection)["layers"][1]["scores_dtype"] == "f2"


def test_embedded_json_cannot_end_the_script_or_open_a_comment():
    hostile = {"t": "</script><!-- a & b \u2028 \u2029 <b>", "n": [1, 2.5, None, True]}
    text = html_view.script_json(hostile)
    assert "<" not in text and ">" not in text and "&" not in text
    assert "\u2028" not in text and "\u2029" not in text
    assert json.loads(text) == hostile and '","n":[1,2.5,null,true]}' in text  # compact separators
    assert text.startswith('{"t":"\\u003c/script\\u003e\\u003c!-- a \\u0026 b \\u2028 \\u2029')
    assert html_view.script_json({"t": "Ærø café 🌊"}) == '{"t":"Ærø café 🌊"}'  # other text as it is, not escaped
    with pytest.raises(ValueError):
        html_view.script_json({"x": float("nan")})


def test_report_cells_show_numbers_bytes_and_missing_values():
    assert html_view._cell("ratio", 2.08695) == "2.087"
    assert html_view._cell("ratio", 123456.0) == "1.235e+05"
    assert html_view._cell("reason", None) == "–"
    assert html_view._cell("bytes_after", 2944) == "2944 (2.9 KB)"  # every byte count, wherever "bytes" is
    assert html_view._cell("peak_rss_bytes", 1024.0) == "1024.0 (1.0 KB)"
    assert html_view._cell("bytes", None) == "–"
    assert html_view._cell("bytes", True) == "True"
    assert html_view._cell("name", "<b>&") == "&lt;b&gt;&amp;"
    assert html_view._cell("flag", False) == "False"


def test_the_report_tables_hold_every_value_escaped():
    report = hand_report(model="<img src=x onerror=alert(1)>").to_json(answer=False)
    text = html_view.report_html(report)
    titles = re.findall(r"<h2>([^<]*)</h2>", text)
    assert titles == ["Run", "Settings", "Prompt", "Cache", "Layers", "Pages", "Timings", "Memory", "Prefix",
                      "Doc_cache", "Stop"]
    assert "<img" not in text and "&lt;img src=x onerror=alert(1)&gt;" in text
    run = text.split("</section>")[0]
    assert re.fullmatch(r'<section><h2>Run</h2><table>(<tr><th>\w+</th><td class="n?">[^<]*</td></tr>)+</table>', run)
    assert re.findall(r"<tr><th>(\w+)</th>", run) == [key for key, value in report.items()
                                                      if not isinstance(value, (dict, list))]
    assert '<tr><th>prompt_tokens</th><td class="n">24</td></tr>' in run
    assert '<tr><th>method</th><td class="">snapkv</td></tr>' in run
    assert '<tr><th>quantization</th><td class="">–</td></tr>' in run
    cache = text.split("<h2>Cache</h2>")[1].split("</section>")[0]
    assert '<tr><th>bytes_before</th><td class="n">6144 (6.0 KB)</td></tr>' in cache
    assert '<tr><th>compression_ratio</th><td class="n">2.087</td></tr>' in cache
    prompt = text.split("<h2>Prompt</h2>")[1].split("</section>")[0]
    assert '<tr><th>question_fits</th><td class="">False</td></tr>' in prompt  # a boolean is not a number
    layers = text.split("<h2>Layers</h2>")[1].split("</section>")[0]
    assert re.findall(r'<th class="n">(\w+)</th>', layers) == ["layer", "kept_tokens_min", "kept_tokens_max",
                                                               "kept_tokens_mean", "capacity", "compressed",
                                                               "sliding_window"]
    rows = re.findall(r"<tr>(<td.*?)</tr>", layers)
    assert [re.findall(r'<td class="n">([^<]*)</td>', row) for row in rows] == [
        [str(layer), "12", "12", "12", "12", "True", "False"] for layer in range(3)]
    assert re.fullmatch(r'<section><h2>Layers</h2><div class="scroll"><table><thead><tr>(<th class="n">\w+</th>)+</tr>'
                        r'</thead><tbody>(<tr>(<td class="n">[^<]*</td>)+</tr>)+</tbody></table></div></section>\n',
                        "<section><h2>Layers</h2>" + layers + "</section>\n")
    assert re.fullmatch(r"(<section><h2>\w+</h2>.*?</section>\n)+", text, re.S) and text.count("<section>") == 11
    assert text.count("</section>\n<section>") == 10  # the tables follow one another, nothing between them
    assert html_view._rows_table("Empty", []) == ""
    one_page = html_view._rows_table("Pages", [{"page": 1, "document_tokens": 6, "kept_share": 0.25}])
    assert re.findall(r'<td class="n">([^<]*)</td>', one_page) == ["1", "6", "0.25"]
    stop = text.split("<h2>Stop</h2>")[1].split("</section>")[0]
    assert "<tr><th>strings</th>" in stop  # a list of strings stays a value of its table


def test_the_summary_and_header_of_the_page():
    inspection = hand_inspection(paged=True, question="Who <fixed> the fog?")
    summary = html_view.summary_html(inspection)
    assert "<h2>Kept share by page (all layers and heads)</h2>" in summary
    rows = re.findall(r'<tr><td>([^<]*)</td><td class="n">(\d+)-(\d+)</td><td class="n">(\d+)%</td>'
                      r'<td><span class="bar" style="width:([\d.]+)px"></span></td></tr>', summary)
    expected = []
    for label, start, end in [("start", 0, 1), ("p1", 1, 7), ("p2", 7, 13), ("p3", 13, 16), ("question", 16, 24)]:
        mean = sum(pairs_keeping(p) for p in range(start, end)) / (6 * (end - start))
        expected.append((label, str(start), str(end), str(round(mean * 100)), f"{mean * 100:.1f}"))
    assert rows == expected
    assert re.fullmatch(r"<section><h2>[^<]+</h2><table><thead><tr>(<th[^>]*>[^<]*</th>)+</tr></thead><tbody>"
                        r"(<tr>(<td[^>]*>[^<]*(<span[^>]*></span>)?</td>)+</tr>)+</tbody></table></section>\n", summary)
    assert "Kept share by paragraph" in html_view.summary_html(hand_inspection())
    header = html_view.header_html(inspection)
    assert header.splitlines() == [
        "<h1>snapkv inspect</h1>", '<p class="question">Q: Who &lt;fixed&gt; the fog?</p>',
        '<p class="meta">notes &lt;b&gt;.txt · tiny/model · snapkv · budget 12 · window 6 · 24 prompt tokens · '
        "KV cache 24 → 11.5 tokens per head (2.09x)</p>"]
    inspection.answer = "Hale & <Co>"
    assert '<p class="question">A: Hale &amp; &lt;Co&gt;</p>' in html_view.header_html(inspection).splitlines()
    assert "Q:" not in html_view.header_html(hand_inspection(question=""))


def test_the_written_page_fills_every_marker(tmp_path):
    inspection = hand_inspection(paged=True, question="</title><script>alert(1)</script>")
    path = tmp_path / "view.html"
    html_view.write_html(inspection, path, layer=1, head=0)
    page = path.read_text(encoding="utf-8")
    assert page == "".join(html_view.render_chunks(inspection, layer=1, head=0))
    assert "<!--snapkv:" not in page and page.count("<script>alert") == 0
    assert re.search(r"<title>snapkv inspect · &lt;/title&gt;&lt;script&gt;alert\(1\)&lt;/script&gt;</title>", page)
    assert html_view.header_html(inspection) in page and html_view.summary_html(inspection) in page
    assert html_view.report_html(inspection.report.to_json(answer=False)) in page
    assert embedded_data(page) == json.loads(json.dumps(html_view.page_data(inspection, layer=1, head=0)))
    assert page.startswith(html_view.template().split("<!--snapkv:")[0])
    assert page.endswith(html_view.template().rsplit("-->", 1)[1])
    assert [p.name for p in tmp_path.iterdir()] == ["view.html"]


# --------------------------------------------------------------------------- heatmap


def test_binned_averages_equal_runs_of_positions():
    values = np.arange(10, dtype=float).reshape(1, 10)
    assert heatmap.binned(values, 10) is values
    assert heatmap.binned(values, 4).tolist() == [[1.0, 4.0, 7.0, 9.0]]  # width 3: 0-2, 3-5, 6-8, 9
    assert heatmap.binned(values, 5).tolist() == [[0.5, 2.5, 4.5, 6.5, 8.5]]
    with_nan = np.array([[1.0, np.nan, 3.0, np.nan, np.nan]])
    assert heatmap.binned(with_nan, 3).tolist()[0][:2] == [1.0, 3.0] and np.isnan(heatmap.binned(with_nan, 3)[0, 2])
    assert heatmap.binned(np.ones((2, 4801)), 2400).shape == (2, 1601)  # bins of 3: at most 2400 columns


def test_score_cells_are_relative_to_the_peak_before_the_window():
    inspection = hand_inspection()
    inspection.scores[:] = 1.0
    inspection.scores[0, 0, :18] = np.linspace(0.5, 4.0, 18)  # peak before the window: 4.0
    inspection.scores[0, 0, 20] = 100.0  # inside the window: clipped to 1
    inspection.scores[0, 1, :] = 2.0
    inspection.scores[0, 1, 3] = 1e-9  # below the floor
    inspection.scores[2] = np.nan  # not scored
    inspection.scores[1, 0] = 0.0  # nothing scored above 0: no reference
    cells = heatmap.cell_values(inspection, scores=True)
    head0 = np.clip(inspection.scores[0, 0] / 4.0, heatmap.SCORE_FLOOR, 1.0)
    head1 = np.where(np.arange(24) == 3, heatmap.SCORE_FLOOR, 1.0)
    assert cells[0] == pytest.approx((head0 + head1) / 2)
    assert cells[1] == pytest.approx(np.ones(24))  # head 1 only (1.0 / 1.0)
    assert np.isnan(cells[2]).all()
    one = heatmap.cell_values(inspection, scores=True, head=1)
    assert one[0] == pytest.approx(head1) and one[1] == pytest.approx(np.ones(24))
    kept = heatmap.cell_values(inspection, head=0)
    assert kept.tolist() == [[float(pairs_keeping(p, layer, 0)) for p in range(24)] for layer in range(3)]
    with_window(inspection, 24)  # the window is the whole prompt: the peak over all of it
    cells = heatmap.cell_values(inspection, scores=True, head=0)
    assert cells[0] == pytest.approx(np.clip(inspection.scores[0, 0] / 100.0, heatmap.SCORE_FLOOR, 1.0))


def figure_pixels(figure) -> np.ndarray:
    figure.canvas.draw()
    return np.asarray(figure.canvas.buffer_rgba())[..., :3].astype(int)


def test_the_heatmap_cells_are_coloured_by_the_share_kept():
    import matplotlib

    inspection = hand_inspection(paged=True)
    figure = heatmap.draw(inspection)
    axes = figure.axes[0]
    pixels = figure_pixels(figure)
    height = pixels.shape[0]
    cmap = matplotlib.colormaps["YlOrRd"]
    for layer in range(3):
        for position in (2, 5, 11, 15):  # outside the window, between page lines
            x, y = axes.transData.transform((position + 0.5, layer))
            share = pairs_keeping(position, layer) / 2
            expected = np.array(cmap(share)[:3]) * 255
            assert np.abs(pixels[int(height - y), int(x)] - expected).max() <= 3, (layer, position, share)
    assert axes.get_xlim() == (0.0, 24.0) and axes.get_ylim() == (2.5, -0.5)
    assert axes.get_xlabel() == "prompt position" and axes.get_ylabel() == "layer"
    assert [tick.get_text() for tick in axes.get_yticklabels()] == ["0", "1", "2"]
    assert axes.get_title(loc="left") == "tiny/model · snapkv · budget 12 of 24 tokens · window 6"
    assert figure.axes[1].get_ylabel() == "kept (share of 2 KV heads)"
    # the window's frame, the page boundaries (between pages 1|2 and 2|3) and the document's edges
    window = [patch for patch in axes.patches if patch.get_hatch() == "///"]
    assert [(patch.get_x(), patch.get_x() + patch.get_width()) for patch in window] == [(18, 24)]
    assert "window" in [text.get_text() for text in axes.texts]
    lines = sorted((float(line.get_xdata()[0]), line.get_linestyle()) for line in axes.lines)
    assert lines == [(1.0, ":"), (7.0, "--"), (13.0, "--"), (16.0, ":")]
    (top,) = axes.child_axes
    assert [tick.get_text() for tick in top.get_xticklabels()] == ["p1", "p2", "p3"]
    assert list(top.get_xticks()) == [4.0, 10.0, 14.5]


def test_the_score_heatmap_and_one_head():
    inspection = hand_inspection()
    figure = heatmap.draw(inspection, scores=True, head=1)
    axes = figure.axes[0]
    assert axes.get_title(loc="left").endswith("window 6 · KV head 1")
    assert figure.axes[1].get_ylabel() == "pooled score / its maximum before the window (log)"
    assert heatmap.draw(inspection, head=1).axes[1].get_ylabel() == "kept (KV head 1)"
    assert not heatmap.draw(inspection, head=1).axes[0].get_title(loc="left").endswith("KV head 1")
    one_page = heatmap.draw(inspection).axes[0]
    assert [tick.get_text() for tick in one_page.child_axes[0].get_xticklabels()] == []
    with pytest.raises(Exception, match="head 2 is out of range"):
        heatmap.draw(inspection, head=2)


def test_the_heatmap_png_is_written_whole(tmp_path):
    from PIL import Image

    path = tmp_path / "map.png"
    inspection = hand_inspection()
    heatmap.write_heatmap(inspection, path, found=(inspection.find("fog"),))
    with Image.open(path) as picture:
        assert picture.format == "PNG" and picture.size == (13 * 110, int(3.6 * 110))
    assert [p.name for p in tmp_path.iterdir()] == ["map.png"]


def test_found_texts_get_one_colour_each_in_turn():
    from matplotlib.colors import to_hex

    inspection = hand_inspection()
    found = tuple(inspection.find(text) for text in ("lamp", "fog", "Coal", "Who", "came"))
    axes = heatmap.draw(inspection, found=found).axes[0]
    labels = [text.get_text() for text in axes.get_legend().get_texts()]
    assert labels == ["--find 'lamp' (1 occurrence)", "--find 'fog' (2 occurrences)", "--find 'Coal' (1 occurrence)",
                      "--find 'Who' (1 occurrence)", "--find 'came' (1 occurrence)"]
    triangles = {float(line.get_xdata()[0]): to_hex(line.get_color()) for line in axes.lines
                 if line.get_marker() == "v"}
    assert triangles == {2.5: heatmap.FOUND_COLOURS[0], 10.5: heatmap.FOUND_COLOURS[1],
                         20.5: heatmap.FOUND_COLOURS[1], 13.5: heatmap.FOUND_COLOURS[2], 17.5: heatmap.FOUND_COLOURS[3],
                         14.5: heatmap.FOUND_COLOURS[0]}  # the fifth text takes the first colour again
    # an empty list of occurrences takes no colour and no legend entry
    axes = heatmap.draw(inspection, found=([], inspection.find("fog"))).axes[0]
    assert [text.get_text() for text in axes.get_legend().get_texts()] == ["--find 'fog' (2 occurrences)"]
    assert {to_hex(line.get_color()) for line in axes.lines if line.get_marker() == "v"} == {heatmap.FOUND_COLOURS[0]}


# --------------------------------------------------------------------------- files


def test_a_file_that_cannot_be_written_is_refused_with_the_fix(tmp_path, monkeypatch):
    from pathlib import Path

    from snapkv_cli.errors import UserError

    monkeypatch.chdir(tmp_path)
    assert check_writable("bare.html") == Path("bare.html")  # a bare name: the current directory

    with pytest.raises(UserError, match="it is a directory; give a file name"):
        check_writable(tmp_path)
    with pytest.raises(UserError, match=f"the directory {tmp_path / 'no'} does not exist; create it first"):
        check_writable(tmp_path / "no" / "x.html")
    assert check_writable(tmp_path / "x.html") == tmp_path / "x.html"
    assert check_writable(str(tmp_path / "y.png")) == tmp_path / "y.png"
    # a directory the user may not write to (root may write anywhere, so the system's answer is simulated)
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda path, mode: False if mode == os.W_OK else real_access(path, mode))
    with pytest.raises(UserError, match=f"cannot write {tmp_path / 'x.html'}: the directory {tmp_path} is not "
                                        "writable"):
        check_writable(tmp_path / "x.html")


def test_a_termination_says_which_signal():
    error = Terminated(15)
    assert error.signum == 15 and str(error) == "terminated by signal 15"


# --------------------------------------------------------------------------- the inspection's JSON and its making


def test_the_inspect_json_lists_every_heads_kept_positions_and_scores():
    inspection = hand_inspection(paged=True)
    inspection.scored[1] = False
    inspection.scores[0, 0, 2] = 1.23456789
    inspection.scores[0, 1, 0] = np.inf
    data = inspection.to_json()
    report = inspection.report.to_json(answer=False)
    assert list(data) == [key for key in report if key not in ("layers", "pages")] + [
        "token_ids", "tokens", "window", "question_span", "document_span", "pages", "layers"]
    assert data["schema_version"] == 1 and data["method"] == "snapkv" and "answer" not in data
    assert data["token_ids"] == list(range(500, 524)) and data["tokens"] == TOKENS
    assert (data["window"], data["question_span"], data["document_span"]) == ([18, 24], [17, 21], [1, 16])
    assert data["pages"] == [
        {"page": 1, "span": [1, 7], "document_tokens": 6, "kept_share": 0.25},
        {"page": 2, "span": [7, 13], "document_tokens": 6, "kept_share": 0.1667},
        {"page": 3, "span": [13, 16], "document_tokens": None, "kept_share": None}]  # no report row for page 3
    assert [layer["layer"] for layer in data["layers"]] == [0, 1, 2]
    for row, layer in enumerate(data["layers"]):
        assert layer == {"layer": row, "kept_tokens_min": 12, "kept_tokens_max": 12, "kept_tokens_mean": 12.0,
                         "capacity": 12, "compressed": True, "sliding_window": False, "scored": row != 1,
                         "heads": layer["heads"]}
        for head, entry in enumerate(layer["heads"]):
            kept = sorted(set(KEPT[(row, head)]) | set(range(18, 24)))
            assert entry["head"] == head and entry["kept"] == kept
            if row == 1:
                assert entry["scores"] is None
                continue
            expected = [float(f"{inspection.scores[row, head, p]:.6g}") for p in kept]
            if (row, head) == (0, 1):
                expected[0] = None  # not finite: null
            assert entry["scores"] == expected
    assert data["layers"][0]["heads"][0]["scores"][2] == 1.23457  # position 2: 6 significant digits
    inspection.answer, inspection.generated_tokens = "Hale", 2
    answered = inspection.to_json()
    assert list(answered)[-2:] == ["answer", "generated_tokens"]
    assert (answered["answer"], answered["generated_tokens"]) == ("Hale", 2)


def test_layers_without_a_report_row_still_list_their_heads():
    inspection = hand_inspection(layers=(0, 1, 5))
    layer = inspection.to_json()["layers"][2]
    assert layer["layer"] == 5 and set(layer) == {"layer", "scored", "heads"}


class ByteTokenizer:
    """Token i is byte i (ids 0-255): decoding joins the bytes, an incomplete character becomes U+FFFD; with
    ``drop_space`` a decoded text loses its leading space (as SentencePiece tokenizers do)."""

    def __init__(self, drop_space: bool = False):
        self.drop_space = drop_space
        self.calls = []

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids, skip_special_tokens=True, clean_up_tokenization_spaces=True):
        assert skip_special_tokens is False and clean_up_tokenization_spaces is False
        self.calls.append(list(ids))
        text = bytes(ids).decode("utf-8", errors="replace")
        return text[1:] if self.drop_space and text.startswith(" ") else text


@pytest.mark.parametrize("drop_space", [False, True])
def test_token_texts_give_back_the_text_token_by_token(drop_space):
    from snapkv_cli.answering.inspection import token_texts

    tokenizer = ByteTokenizer(drop_space)
    text = " a é 🌊 b"
    ids = tokenizer.encode(text)
    pieces = token_texts(tokenizer, ids)
    assert len(pieces) == len(ids) and "".join(pieces) == text.lstrip(" " if drop_space else "")
    # "é" is 2 bytes: the first token gets "", the second the character; "🌊" is 4 bytes: 3 empty, then it
    assert pieces[3:5] == ["", "é"] and pieces[6:10] == ["", "", "", "🌊"]
    assert pieces[-2:] == [" ", "b"]
    # each decode looks back 4 tokens before those still waiting for their text: the longest, at the wave's 4th byte
    assert max(len(call) for call in tokenizer.calls) == 8
    assert token_texts(tokenizer, []) == []


def test_token_texts_give_up_waiting_on_a_broken_character():
    from snapkv_cli.answering.inspection import token_texts

    ids = [0xE2, 0x82, 0x41, 0xF0, 0x9F, 0x8C]  # a 3-byte character cut after 2 bytes, then "A", then a cut one
    pieces = token_texts(ByteTokenizer(), ids)
    assert len(pieces) == 6
    assert "".join(pieces) == bytes(ids).decode("utf-8", errors="replace")
    assert pieces[-1] != ""  # the last token carries what is left, even broken
    # bytes that never make a character are not held back past the look-back: at most 3 tokens wait
    stray = token_texts(ByteTokenizer(), [0x80] * 6 + [0x41])
    assert "".join(stray) == "\ufffd" * 6 + "A"
    assert stray == ["", "", "", "\ufffd" * 4, "", "", "\ufffd\ufffdA"]


def test_inspect_answer_reads_each_layers_kept_positions_and_scores():
    import torch

    from snapkv_cli.answering.inspection import inspect_answer
    from snapkv_cli.engine.records import LayerRecord
    from snapkv_cli.errors import UserError

    prompt = Prompt(text="abcdefgh", input_ids=list(b"abcdefgh"), document_span=(1, 6), question_span=(6, 7),
                    token_pages=[None, 1, 1, 1, 1, 1, None, None], prefix_length=6)
    scores = torch.arange(2 * 8, dtype=torch.float16).reshape(1, 2, 8) / 4
    records = {
        3: LayerRecord(layer=3, prompt_length=8, capacity=4, scores=scores, bytes_before=1, bytes_after=1,
                       kept_positions=torch.tensor([[[0, 2, 6, 7], [1, 5, 6, 7]]])),
        1: LayerRecord(layer=1, prompt_length=8, capacity=8, kept_positions=torch.arange(8).expand(1, 2, 8),
                       scores=None, bytes_before=1, bytes_after=1),
    }
    result = type("Result", (), {"cache": type("Cache", (), {"records": records})(), "answer": "abc",
                                 "generated_ids": [1, 2, 3]})()
    answer = type("Answer", (), {"prompt": prompt, "result": result, "report": hand_report()})()
    inspection = inspect_answer(answer, ByteTokenizer())
    assert inspection.layers == [1, 3] and inspection.tokens == list("abcdefgh")
    assert inspection.kept.shape == (2, 2, 8) and inspection.kept.dtype == bool
    assert inspection.kept[0].all()
    assert [np.flatnonzero(inspection.kept[1, head]).tolist() for head in (0, 1)] == [[0, 2, 6, 7], [1, 5, 6, 7]]
    assert inspection.scored == [False, True]
    assert np.isnan(inspection.scores[0]).all() and inspection.scores.dtype == np.float32
    assert inspection.scores[1].tolist() == (np.arange(16).reshape(2, 8) / 4).tolist()
    assert inspection.answer is None and inspection.generated_tokens is None
    assert inspection.report is answer.report and inspection.prompt is prompt
    with_answer = inspect_answer(answer, ByteTokenizer(), with_answer=True)
    assert (with_answer.answer, with_answer.generated_tokens) == ("abc", 3)
    result.cache.records = {3: records[3]}  # a one-layer model
    one = inspect_answer(answer, ByteTokenizer())
    assert one.layers == [3] and one.kept.shape == (1, 2, 8)
    result.cache.records = {}
    with pytest.raises(UserError, match=r"^the model recorded no layers: nothing to inspect$"):
        inspect_answer(answer, ByteTokenizer())


# --------------------------------------------------------------------------- the terminal's emphasis and selections


def styled_lines(renderable, width: int = 200) -> dict[str, set[str]]:
    """Each printed line's text (stripped) and the styles of its non-blank segments, on a colour terminal."""
    console = Console(width=width, file=io.StringIO(), force_terminal=True, color_system="truecolor")
    lines: dict[str, set[str]] = {}
    text, styles = "", set()
    for segment in console.render(renderable):
        if segment.text == "\n":
            lines.setdefault(text.strip(), set()).update(styles)
            text, styles = "", set()
            continue
        text += segment.text
        if segment.text.strip():
            styles.add(str(segment.style) if segment.style else "none")
    return lines


def test_headings_are_bold_and_explanations_dim():
    inspection = hand_inspection(paged=True)
    many = [Occurrence("fog", 10, 11, np.zeros((3, 2), dtype=int))] * 11
    lines = styled_lines(terminal.build_view(inspection, found=(many,)))
    assert lines["Observation window (positions 18-24, always kept)"] == {"bold"}
    assert lines["Most-kept passages (60 tokens)"] == {"bold"}
    passage = next(line for line in lines if line.startswith("#1  positions 1-16"))
    assert lines[passage] == {"bold cyan"}
    found = next(line for line in lines if line.startswith("Found 'fog' at positions 10-11"))
    assert lines[found] == {"bold"}
    explanation = next(line for line in lines if line.startswith("Layer by layer: how many"))
    assert lines[explanation] == {"dim"}
    assert lines["... and 1 more occurrences of 'fog' (--json lists them all)"] == {"dim"}
    assert lines["Shading: share of 3 layers x 2 KV heads"] == {"dim"}
    ellipses = {segment.style for segment in Console(width=200, file=io.StringIO(), force_terminal=True).render(
        Group(*terminal.passages(inspection, inspection.kept_share()))) if segment.text == "…"}
    assert {str(style) for style in ellipses} == {"dim"}
    console = Console(width=200, file=io.StringIO(), force_terminal=True, color_system="truecolor")
    segments = list(console.render(terminal.legend(inspection, None, None)))
    assert str(next(segment for segment in segments if segment.text.startswith("Legend")).style) == "bold"
    header = list(console.render(terminal.header(inspection)))
    assert str(next(segment for segment in header if segment.text == "snapkv inspect").style) == "bold"
    assert not next(segment for segment in header if segment.text.startswith("  tiny/model")).style  # plain text


def test_the_found_table_as_printed():
    inspection = hand_inspection()
    occurrence = Occurrence("x", 2, 5, np.array([[3, 3], [3, 3], [3, 3]]))
    text = plain(terminal.found_table(inspection, occurrence))
    assert [line.rstrip() for line in text.splitlines()] == [
        "",
        " layers   all   some   none   tokens kept, head by head",
        " " + "─" * 54,
        " 0-2        2      0      0   3 3",
        "",
    ]
    narrow = plain(terminal.found_table(inspection, occurrence), width=30)  # the first four columns are never cut
    assert " layers   all   some   none" in narrow and " 0-2        2      0      0" in narrow
    mixed = Occurrence("x", 2, 5, np.array([[3, 10], [0, 0], [0, 0]]))  # 10: more than its tokens, still shown
    assert [line.rstrip() for line in plain(terminal.found_table(inspection, mixed)).splitlines()[3:5]] == [
        " 0          1      1      0   3 10",
        " 1-2        0      0      2   0 0",
    ]


def test_the_view_shades_the_selected_layer_and_head():
    inspection = hand_inspection()
    piped = Console(width=300, file=io.StringIO())
    terminal.render(inspection, piped, layer=1, head=0, full=True)
    text = piped.file.getvalue()
    assert "Shading: layer 1, KV head 0" in text and "⟦K text⟧ kept; unmarked text: not kept" in text
    kept = [position for position in KEPT[(1, 0)] if position < 18]
    marked = re.findall(r"⟦K ([^⟧]*)⟧", text.split("Shading:")[1].split("Kept share")[0])
    runs, previous = [], None
    for position in kept:  # consecutive kept positions are one run
        if previous is not None and position == previous + 1:
            runs[-1] += TOKENS[position]
        else:
            runs.append(TOKENS[position])
        previous = position
    assert marked == [run.strip() for run in runs]
    # one layer, all its heads: shares of 2
    layer_view = plain(terminal.build_view(inspection, layer=2, full=True, plain=True))
    assert "Shading: layer 2, share of its 2 KV heads" in layer_view and "⟦K" not in layer_view
    # layer 2's heads keep 0, 2, 5-8 and 0, 2-6: both (level 5) or one (level 3) of its 2
    assert re.findall(r"⟦(\d) ([^⟧]*)⟧", layer_view.split("Shading:")[1])[:5] == [
        ("5", "<s>user:"), ("5", "lamp"), ("3", "was lit"), ("5", "."), ("3", "Hale fixed")]
    head_view = plain(terminal.build_view(inspection, head=1, full=True, plain=True))
    assert "Shading: KV head 1, share of 3 layers" in head_view and "⟦K" not in head_view
    # the summary's shares are those of the selection too
    summary = summary_rows(plain(terminal.build_view(inspection, layer=1, head=0)))
    kept_share = sum(1 for p in range(1, 7) if p in KEPT[(1, 0)]) / 6
    assert summary[1][:4] == ["¶1", "1-7", "6", f"{round(kept_share * 100)}%"]
    found = plain(terminal.build_view(inspection, layer=1, head=0, found=(inspection.find("Coal"),)))
    assert "Found 'Coal' at positions 13-14" in found and "Kept share by paragraph" in found  # found adds, not replaces


def test_where_a_found_text_is_right_after_the_question():
    inspection = with_window(hand_inspection(), 2)  # window 22-24: the question (17-21) lies before it
    after = Occurrence("\n", 21, 22, np.zeros((3, 2), dtype=int))
    assert terminal._where(inspection, after) == " · template"
    assert terminal._where(inspection, Occurrence("?", 20, 21, np.zeros((3, 2), dtype=int))) == " · question"


def test_the_heatmap_marks_window_pages_and_document_in_their_colours():
    """Read back from the drawn image: the window's blue frame, the dashed green page boundaries and the dotted grey
    document edges run over every layer at their positions; the figure grows with the layers."""
    from matplotlib.colors import to_rgb

    inspection = hand_inspection(paged=True)
    figure = heatmap.draw(inspection)
    axes = figure.axes[0]
    pixels = figure_pixels(figure)
    height = pixels.shape[0]

    def column_colours(position: float) -> list[tuple[int, ...]]:
        x = round(float(axes.transData.transform((position, 0))[0]))
        top, bottom = (int(height - axes.transData.transform((position, y))[1]) for y in (-0.5, 2.5))
        return [tuple(pixels[y, x + dx]) for y in range(top + 2, bottom - 2) for dx in (-1, 0, 1)]

    def near(colours, hex_colour: str) -> int:
        target = np.array(to_rgb(hex_colour)) * 255
        return sum(1 for colour in colours if np.abs(np.array(colour) - target).max() <= 40)

    assert near(column_colours(18), "#2a4fd6") > 200 and near(column_colours(24), "#2a4fd6") > 200
    assert near(column_colours(7), "#1f6f43") > 100 and near(column_colours(13), "#1f6f43") > 100
    assert near(column_colours(1), "#444444") > 30 and near(column_colours(16), "#444444") > 30
    assert all(near(column_colours(10), colour) == 0 for colour in ("#2a4fd6", "#1f6f43", "#444444"))
    # the window's frame is hatched: blue inside it too, yet the cells (kept by all: YlOrRd's darkest) show through
    inside = column_colours(21.3)
    assert near(inside, "#2a4fd6") > 30 and near(inside, "#800026") > 300
    (label,) = [text for text in axes.texts if text.get_text() == "window"]
    assert label.xy == (18, -0.5) and label.get_ha() == "right" and label.get_va() == "bottom"
    assert to_rgb(label.get_color()) == to_rgb("#2a4fd6")
    assert axes.get_images()[0].get_extent() == [0, 24, 2.5, -0.5]
    assert tuple(figure.get_size_inches() * figure.dpi) == (13 * 110, 3.6 * 110)
    many = hand_inspection(paged=True, layers=tuple(range(3)))
    many.layers = list(range(40))
    many.kept = np.repeat(many.kept, 14, axis=0)[:40]
    many.scores = np.repeat(many.scores, 14, axis=0)[:40]
    many.scored = [True] * 40
    tall = heatmap.draw(many)
    assert tall.get_size_inches()[1] == pytest.approx(0.16 * 40 + 2.4)
    assert [tick.get_text() for tick in tall.axes[0].get_yticklabels()] == [str(n) for n in range(0, 40, 3)]


def with_window(inspection: Inspection, window_size: int) -> Inspection:
    inspection.report = dataclasses.replace(
        inspection.report, settings=SettingsInfo({**inspection.report.settings.values, "window_size": window_size}))
    return inspection


@pytest.mark.parametrize(("window_size", "size", "count"), [(6, 4, 3), (10, 4, 3), (10, 3, 5), (6, 1, 4), (10, 5, 9)])
def test_top_passages_are_the_best_runs_before_the_window_that_do_not_overlap(window_size, size, count):
    inspection = with_window(hand_inspection(), window_size)
    share = np.random.default_rng(window_size + size).random(24)
    share[5:8] += 1.0
    first, last = 1, min(16, 24 - window_size)  # the document, before the window
    taken: list[tuple[int, int]] = []
    expected = []
    while len(taken) < count:
        runs = [(share[start:start + size].mean(), start) for start in range(first, last - size + 1)
                if all(start + size <= a or b <= start for a, b in taken)]
        if not runs:
            break
        mean, start = max(runs, key=lambda run: (run[0], -run[1]))
        taken.append((start, start + size))
        expected.append((start, start + size, pytest.approx(mean)))
    found = inspection.top_passages(share, count, size)
    assert [(p.start, p.end, p.share) for p in found] == expected
    assert len(found) == min(count, len(expected))


def test_a_passage_is_at_most_the_document_before_the_window():
    share = np.linspace(0, 1, 24)
    inspection = with_window(hand_inspection(), 10)  # window 14-24: the document's tokens 1-13 come before it
    (passage,) = inspection.top_passages(share, 3, 60)
    assert (passage.start, passage.end) == (1, 14) and passage.share == pytest.approx(share[1:14].mean())
    assert with_window(hand_inspection(), 23).top_passages(share, 3, 4) == []  # the window covers the document
    equal = hand_inspection().top_passages(np.zeros(24), 2, 5)
    assert [(p.start, p.end, p.share) for p in equal] == [(1, 6, 0.0), (6, 11, 0.0)]  # ties: the first run first


def long_paged_inspection() -> Inspection:
    """A 630-token prompt: the template, 6 pages of 100 document tokens (1-600), the question and the template."""
    tokens = ["<s>", *[f" w{n}" for n in range(600)], "\nQ:", *[" q"] * 20, "\n", *["A"] * 8]
    inspection = hand_inspection(tokens=tokens)
    pages = [None] + [1 + n // 100 for n in range(600)] + [None] * 29
    inspection.prompt = dataclasses.replace(inspection.prompt, document_span=(1, 601), question_span=(602, 622),
                                            token_pages=pages)
    return inspection


def test_the_passages_of_a_long_document_are_the_five_best_with_their_pages():
    inspection = long_paged_inspection()
    share = np.random.default_rng(5).random(inspection.length) ** 3
    taken: list[tuple[int, int]] = []
    for _ in range(5):  # the best run of 60 document tokens overlapping none before it
        runs = [(share[start:start + 60].mean(), start) for start in range(1, 601 - 60 + 1)
                if all(start + 60 <= a or b <= start for a, b in taken)]
        best = max(runs, key=lambda run: (run[0], -run[1]))[1]
        taken.append((best, best + 60))
    text = plain(Group(*terminal.passages(inspection, share, plain=True)))
    heads = re.findall(r"^#(\d)  positions (\d+)-(\d+) · (pages?) (\d+)(?:-(\d+))? · (\d+)% kept$", text, re.M)
    assert [(int(start), int(end)) for _, start, end, *_ in heads] == taken
    assert [rank for rank, *_ in heads] == ["1", "2", "3", "4", "5"]
    for _, start, end, word, first, last, _ in heads:
        pages = (1 + (int(start) - 1) // 100, 1 + (int(end) - 2) // 100)  # the pages of its first and last token
        assert (word, int(first), int(last or first)) == ("page" if pages[0] == pages[1] else "pages", *pages)
    assert any(word == "pages" for _, _, _, word, *_ in heads) and any(word == "page" for _, _, _, word, *_ in heads)
    assert text.count("…") == 10
    by_default = inspection.top_passages(share)  # 5 runs of 60 tokens, as the view shows
    assert [(p.start, p.end) for p in by_default] == taken


def test_two_pages_make_a_table_by_page():
    inspection = hand_inspection(paged=True)
    inspection.prompt.token_pages[13:16] = [2, 2, 2]
    assert plain(terminal.summary_table(inspection, inspection.kept_share())).lstrip().startswith(
        "Kept share by page")
    assert "Kept share by page (all layers" in html_view.summary_html(inspection)


def test_the_summary_table_as_printed():
    inspection = hand_inspection()
    share = np.zeros(24)
    share[1:7] = 0.5
    share[16:24] = 1.0
    text = plain(terminal.summary_table(inspection, share))
    assert [line.rstrip() for line in text.splitlines()] == [
        "Kept share by paragraph",
        "",
        " part       positions   tokens   kept",
        " " + "─" * 55,
        " start      0-1              1     0%",
        " ¶1         1-7              6    50%   ████████",
        " ¶2         7-13             6     0%",
        " ¶3         13-16            3     0%",
        " question   16-24            8   100%   ████████████████",
        "",
    ]
    console = Console(width=200, file=io.StringIO(), force_terminal=True, color_system="truecolor")
    bars = {str(segment.style) for segment in console.render(terminal.summary_table(inspection, share))
            if segment.text.strip() and set(segment.text.strip()) <= set("█▏▎▍▌▋▊▉")}
    assert bars == {"#f57a2e"}  # the bars in the shading's orange
    narrow = plain(terminal.summary_table(inspection, share), width=30)
    assert len(narrow.splitlines()) == len(text.splitlines())  # a row never wraps: it is cut


def test_a_presenter_that_shows_only_messages_hears_each_phase_by_name():
    from snapkv_cli.answering.presenter import Presenter

    class Messages(Presenter):
        def __init__(self):
            self.messages = []

        def progress(self, message: str) -> None:
            self.messages.append(message)

    presenter = Messages()
    presenter.phase("Reading the document", 12, "layers")
    presenter.advance(3)
    presenter.phase("Answering", None, "tokens")
    assert presenter.messages == ["Reading the document", "Answering"]


def test_the_page_template_reads_the_same_under_an_ascii_locale():
    """The template holds non-ASCII text: it is read as UTF-8 whatever the locale (a C locale is ASCII)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    source = (Path(html_view.__file__).parent / "inspect.html").read_bytes().decode("utf-8")
    assert any(ord(character) > 127 for character in source)
    env = {**os.environ, "LC_ALL": "C", "LANG": "C", "PYTHONCOERCECLOCALE": "0", "PYTHONUTF8": "0",
           "PYTHONIOENCODING": "utf-8"}
    shown = subprocess.run([sys.executable, "-c", "import sys; from snapkv_cli.views.html import template; "
                            "sys.stdout.buffer.write(template().encode('utf-8'))"], env=env, capture_output=True,
                           cwd=Path(__file__).resolve().parent.parent, timeout=120)
    assert shown.returncode == 0, shown.stderr.decode()[-2000:]
    assert shown.stdout.decode("utf-8") == source


def test_document_edges_at_the_prompts_ends_draw_no_line():
    inspection = hand_inspection()
    inspection.prompt = dataclasses.replace(inspection.prompt, document_span=(0, 24), question_span=(24, 24),
                                            token_pages=[None] * 24)
    axes = heatmap.draw(inspection).axes[0]
    assert [line for line in axes.lines if line.get_linestyle() == ":"] == []
    inspection.prompt = dataclasses.replace(inspection.prompt, document_span=(0, 16))
    axes = heatmap.draw(inspection).axes[0]
    assert [float(line.get_xdata()[0]) for line in axes.lines if line.get_linestyle() == ":"] == [16.0]


def test_unscored_layers_and_empty_bins_raise_no_warning():
    import warnings

    inspection = hand_inspection()
    inspection.scores[1] = np.nan
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cells = heatmap.cell_values(inspection, scores=True)
        binned = heatmap.binned(np.array([[1.0, 2.0, np.nan, np.nan, 5.0]]), 3)
    assert np.isnan(cells[1]).all() and np.isfinite(cells[0]).all()
    assert binned[0, 0] == 1.5 and np.isnan(binned[0, 1]) and binned[0, 2] == 5.0


def test_with_one_position_before_the_window_it_alone_is_the_reference():
    inspection = with_window(hand_inspection(), 23)  # window 1-24
    inspection.scores[:] = 8.0
    inspection.scores[:, :, 0] = 2.0
    cells = heatmap.cell_values(inspection, scores=True)
    assert cells[:, 0] == pytest.approx([1.0, 1.0, 1.0]) and cells[:, 1:] == pytest.approx(np.ones((3, 23)))
    inspection.scores[:, :, 5] = 0.5
    assert heatmap.cell_values(inspection, scores=True)[0, 5] == pytest.approx(0.25)  # 0.5 / 2.0


def test_a_blank_line_split_over_tokens_ends_the_paragraph_at_its_last_token():
    tokens = ["<s>", "lit.\n", "\n", "Hale", " came", ".\n", "\n\n", "Coal", "?", *["A"] * 15]
    inspection = hand_inspection(tokens=tokens)
    inspection.prompt = dataclasses.replace(inspection.prompt, document_span=(1, 8), question_span=(8, 9),
                                            token_pages=[None] * len(tokens))
    assert inspection.paragraphs() == [(1, 3), (3, 7), (7, 8)]
    empty = hand_inspection()
    empty.prompt = dataclasses.replace(empty.prompt, document_span=(5, 5))
    assert empty.paragraphs() == []


def paragraph_inspection(sizes: list[int], template: int = 5) -> Inspection:
    """A document of paragraphs of ``sizes`` tokens (each paragraph's last token ends in a blank line), after
    ``template`` template tokens, then a question token and 12 more."""
    body = [f"w{n}." + ("\n\n" if index == size - 1 else " ") for n, size in enumerate(sizes) for index in range(size)]
    tokens = ["<t>"] * template + body + ["Q?"] + ["A"] * 12
    inspection = hand_inspection(tokens=tokens)
    end = template + len(body)
    inspection.prompt = dataclasses.replace(inspection.prompt, document_span=(template, end),
                                            question_span=(end, end + 1), token_pages=[None] * len(tokens))
    return inspection


def test_paragraphs_are_grouped_into_runs_of_about_equal_tokens():
    labels = lambda segments: [(s.label, s.start, s.end) for s in segments[1:-1]]
    thirty = paragraph_inspection([1] * 30)  # tokens 5-35, one paragraph each
    assert thirty.paragraphs() == [(5 + n, 6 + n) for n in range(30)]
    # 3 rows of 30 tokens: a group ends before a paragraph that would take it past 10 tokens
    assert labels(thirty.segments(max_rows=3)) == [("¶1-10", 5, 15), ("¶11-20", 15, 25), ("¶21-30", 25, 35)]
    assert labels(thirty.segments(max_rows=4)) == [("¶1-7", 5, 12), ("¶8-14", 12, 19), ("¶15-21", 19, 26),
                                                   ("¶22-30", 26, 35)]
    # at most 20 rows by default: 21 paragraphs are grouped, 20 are not
    assert [label for label, _, _ in labels(paragraph_inspection([1] * 21).segments())] == [
        *(f"¶{n}" for n in range(1, 20)), "¶20-21"]
    assert len(labels(paragraph_inspection([1] * 20).segments())) == 20
    # as many paragraphs as rows: each its own row, however unequal
    assert labels(paragraph_inspection([1, 1, 10]).segments(max_rows=3)) == [("¶1", 5, 6), ("¶2", 6, 7),
                                                                             ("¶3", 7, 17)]
    # a document at the very start of the prompt has no "start" row
    at_start = paragraph_inspection([3, 3], template=0)
    assert [s.label for s in at_start.segments()] == ["¶1", "¶2", "question"]
    two_pages = hand_inspection(paged=True)
    two_pages.prompt.token_pages[13:16] = [2, 2, 2]
    assert [s.label for s in two_pages.segments()] == ["start", "p1", "p2", "question"]
    to_the_end = hand_inspection()
    to_the_end.prompt = dataclasses.replace(to_the_end.prompt, document_span=(1, 24), question_span=(24, 24))
    assert [s.label for s in to_the_end.segments()][-1] != "question"  # nothing after the document: no row


def test_found_marks_frame_without_hiding_the_cells_and_point_from_above():
    from matplotlib.colors import to_hex

    inspection = hand_inspection()
    found = (inspection.find("fog"),)
    axes = heatmap.draw(inspection, found=found).axes[0]
    colour = heatmap.FOUND_COLOURS[0]
    frames = [patch for patch in axes.patches if to_hex(patch.get_edgecolor()) == colour]
    assert len(frames) == 2 and all(patch.get_facecolor()[3] == 0 for patch in frames)  # see-through
    triangles = [line for line in axes.lines if line.get_marker() == "v"]
    assert [float(line.get_ydata()[0]) for line in triangles] == [-0.5, -0.5]  # above the first layer's row
    assert all(line.get_clip_on() is False and line.get_linestyle() == "None" for line in triangles)
    legend = axes.get_legend()
    (handle,) = legend.legend_handles
    assert handle.get_marker() == "v" and to_hex(handle.get_color()) == colour and handle.get_linestyle() == "None"


def test_the_heatmap_file_follows_the_scores_head_and_found_options(tmp_path):
    """``inspect --heatmap`` with ``--scores``, ``--head`` or ``--find`` writes a different picture than without."""
    from PIL import Image

    inspection = hand_inspection()
    found = (inspection.find("fog"),)

    def pixels(name: str, **options) -> bytes:
        heatmap.write_heatmap(inspection, tmp_path / name, **options)
        with Image.open(tmp_path / name) as picture:
            return picture.convert("RGB").tobytes()

    default = pixels("default.png")
    assert pixels("again.png") == default  # the same options draw the same picture
    variants = [pixels("scores.png", scores=True), pixels("head.png", head=1), pixels("found.png", found=found)]
    assert all(variant != default for variant in variants)
    assert len(set(variants)) == 3
