"""The report of one answer (``snapkv_cli.answering.report``): every number it gives, checked against what a
hand-built cache and prompt hold, counted here; and its JSON object's keys, in the order docs/usage.md lists them.

The cache is a real :class:`~snapkv_cli.engine.SnapKVCache` whose per-layer records are written by hand (which
positions each KV head kept, its sizes from the tensor shapes and dtype), so each expected value is known exactly.
"""

from __future__ import annotations

import copy
import dataclasses
import pickle

import pytest
import torch

from snapkv_cli.answering import report as report_module
from snapkv_cli.answering.prompting import Prompt
from snapkv_cli.answering.report import (
    DocCacheInfo,
    PrefixInfo,
    Report,
    SettingsInfo,
    StopInfo,
    build_report,
    peak_rss_bytes,
)
from snapkv_cli.engine import CompressionSettings, SnapKVCache
from snapkv_cli.engine.records import LayerRecord
from snapkv_cli.generation import GenerationOptions, GenerationResult

LENGTH = 20  # prompt tokens: template 0-2, page 1 at 3-8, page 2 at 9-14, template 15, question 16-18, template 19
HEADS, HEAD_DIM, DTYPE_BYTES = 2, 4, 2  # float16 keys and values


def hand_prompt() -> Prompt:
    pages = [None] * 3 + [1] * 6 + [2] * 6 + [None] * 5
    return Prompt(text="x" * LENGTH, input_ids=list(range(100, 100 + LENGTH)), document_span=(3, 15),
                  question_span=(16, 19), token_pages=pages, prefix_length=16, truncated_document_tokens=5,
                  template="qa_base", style="completion")


def kv_bytes(tokens: int) -> int:
    """Keys and values of ``tokens`` positions in every KV head of one layer (batch 1), in float16."""
    return 2 * HEADS * tokens * HEAD_DIM * DTYPE_BYTES


# what each KV head of each layer keeps (ascending positions; the window 16-19 last)
KEPT = {
    0: [[0, 3, 4, 5, 9, 10, 16, 17, 18, 19], [1, 2, 3, 8, 13, 14, 16, 17, 18, 19]],
    # heads that keep different numbers (AdaKV): head 0 keeps 7, its last 3 slots repeat the last position
    1: [[3, 4, 5, 16, 17, 18, 19, 19, 19, 19], [6, 7, 9, 11, 12, 14, 16, 17, 18, 19]],
    # a sliding-window layer: its own last 8 tokens, nothing evicted by the policy
    2: [list(range(12, 20)), list(range(12, 20))],
}
REAL = {0: [10, 10], 1: [7, 10], 2: [8, 8]}  # real (not padding) tokens per head


def hand_cache(settings: CompressionSettings) -> SnapKVCache:
    cache = SnapKVCache(settings=settings)
    for layer in (2, 0, 1):  # recorded out of order: the report sorts them
        positions = torch.tensor([KEPT[layer]])
        slots = positions.shape[-1]
        cache.records[layer] = LayerRecord(
            layer=layer, prompt_length=LENGTH, capacity=8 if layer == 2 else 10, kept_positions=positions,
            scores=None, bytes_before=kv_bytes(8 if layer == 2 else LENGTH), bytes_after=kv_bytes(slots),
            sliding=layer == 2, kept_counts=torch.tensor([REAL[1]]) if layer == 1 else None)
    cache.selection_seconds = 0.0123456
    return cache


def hand_result(cache: SnapKVCache, **stop) -> GenerationResult:
    return GenerationResult(answer="Duncan Hale", generated_ids=[5, 6, 7, 8, 9, 10, 11, 12], prompt_tokens=LENGTH,
                            cache=cache, prefill_s=0.98765, decode_s=2.0504, decode_steps=7, **stop)


def hand_report(*, prefix_source: str = "memory", extended_tokens: int = 0, **stop) -> Report:
    """A report of :func:`hand_result`, generated with the stop strings and loop rule that ``stop`` gives it."""
    settings = CompressionSettings(method="snapkv", window_size=4, max_capacity_prompt=0.5, kernel_size=3,
                                   pooling="maxpool")
    generation = GenerationOptions(**{name: stop[name] for name in ("stop_strings", "stop_on_repeat") if name in stop})
    return build_report(
        model_name="tiny/model", device="cpu", dtype="float16", prompt=hand_prompt(),
        result=hand_result(hand_cache(settings), **stop), generation=generation, document="notes.txt",
        question="Who repaired it?",
        load_s=1.23456, question_index=3, prefix=PrefixInfo(tokens=16, source=prefix_source, seconds=0.33333,
                                                               extended_tokens=extended_tokens),
        doc_cache=DocCacheInfo(enabled=True, status="hit", path="/cache/entry", bytes=4321), wall_s=4.56789,
        dtype_reason="auto: no bfloat16", quantization="int8")


# the keys of ``ask --json``, in docs/usage.md's order
ANSWER_KEYS = ["schema_version", "answer", "question", "document", "model", "device", "dtype", "dtype_reason",
               "quantization", "method", "settings", "prompt_tokens", "prompt", "generated_tokens", "cache", "layers",
               "pages", "timings", "memory", "question_index", "reused_prefix_tokens", "prefix", "doc_cache", "stop",
               "decode_path"]


def test_the_json_object_has_the_documented_keys_in_order_and_the_run_as_given():
    data = hand_report().to_json()
    assert list(data) == ANSWER_KEYS
    assert data["schema_version"] == 1
    assert {key: data[key] for key in ANSWER_KEYS[1:10]} == {
        "answer": "Duncan Hale", "question": "Who repaired it?", "document": "notes.txt", "model": "tiny/model",
        "device": "cpu", "dtype": "float16", "dtype_reason": "auto: no bfloat16", "quantization": "int8",
        "method": "snapkv"}
    assert data["question_index"] == 3 and data["generated_tokens"] == 8
    assert data["doc_cache"] == {"enabled": True, "status": "hit", "reason": None, "path": "/cache/entry",
                                 "bytes": 4321}


def test_the_settings_are_those_applied_to_the_prompt_and_the_budget_as_given():
    data = hand_report().to_json()
    # a budget of half the prompt: 10 of its 20 tokens
    assert data["settings"] == {"window_size": 4, "max_capacity_prompt": 10, "budget": 0.5, "kernel_size": 3,
                                "pooling": "maxpool", "pooling_window": "centered", "gqa_aggregation": "mean",
                                "layer_budgets": "uniform", "head_budgets": "uniform", "whole_words": False}
    documented = ["window_size", "max_capacity_prompt", "budget", "kernel_size", "pooling", "pooling_window",
                  "gqa_aggregation", "layer_budgets", "head_budgets", "whole_words"]
    assert list(data["settings"]) == documented
    # the settings block: one entry per reported setting and its as-given twin, read as attributes, and frozen; the
    # declared types (the schema's) name the same keys in the same order
    block = hand_report().settings
    assert isinstance(block, SettingsInfo) and list(block.values) == documented
    types = SettingsInfo.declared_types()
    assert list(types) == documented and types["budget"] == types["max_capacity_prompt"] == int | float
    assert (types["window_size"], types["layer_budgets"], types["whole_words"]) == (int, str | None, bool)
    assert (block.window_size, block.max_capacity_prompt, block.budget, block.whole_words) == (4, 10, 0.5, False)
    with pytest.raises(AttributeError, match="no setting 'sink_tokens'"):  # declared, but not reported
        _ = block.sink_tokens
    with pytest.raises(dataclasses.FrozenInstanceError):
        block.budget = 1
    assert copy.deepcopy(block) == block and pickle.loads(pickle.dumps(block)) == block


def test_the_prompt_block_counts_its_parts_and_the_window():
    data = hand_report().to_json()
    assert data["prompt_tokens"] == LENGTH
    # window: the last 4 tokens, 16-19, of which the question's 16-18 are all inside
    assert data["prompt"] == {"document": 12, "question": 3, "template": 5, "window_size": 4,
                              "question_tokens_in_window": 3, "question_tokens": 3, "question_fits": True,
                              "truncated_document_tokens": 5, "template_name": "qa_base", "style": "completion"}


def test_each_layer_row_gives_the_fewest_most_and_mean_tokens_its_heads_keep():
    rows = hand_report().to_json()["layers"]
    assert rows == [
        {"layer": 0, "kept_tokens_min": 10, "kept_tokens_max": 10, "kept_tokens_mean": 10.0, "capacity": 10,
         "compressed": True, "sliding_window": False},
        {"layer": 1, "kept_tokens_min": 7, "kept_tokens_max": 10, "kept_tokens_mean": 8.5, "capacity": 10,
         "compressed": True, "sliding_window": False},
        {"layer": 2, "kept_tokens_min": 8, "kept_tokens_max": 8, "kept_tokens_mean": 8.0, "capacity": 8,
         "compressed": False, "sliding_window": True},
    ]
    for row in rows:
        assert type(row["kept_tokens_min"]) is int and type(row["kept_tokens_max"]) is int
        assert type(row["kept_tokens_mean"]) is float


def test_the_cache_block_sums_the_layers_sizes_from_their_shapes():
    cache = hand_report().to_json()["cache"]
    before = kv_bytes(LENGTH) * 2 + kv_bytes(8)  # two full layers of 20 tokens, the sliding layer's 8
    after = kv_bytes(10) * 2 + kv_bytes(8)  # 10 slots (padding included) in layers 0 and 1
    assert (before, after) == (1536, 896)
    assert cache == {"tokens_before": LENGTH, "tokens_after": round((10 + 8.5 + 8) / 3, 2),
                     "tokens_allocated": round((10 + 10 + 8) / 3, 2), "bytes_before": before, "bytes_after": after,
                     "compression_ratio": round(before / after, 4), "tokens_after_min": 7, "tokens_after_max": 10}


def test_each_page_gives_its_tokens_and_the_share_kept_over_all_pairs():
    pages = hand_report().to_json()["pages"]
    pairs = [head for layer in KEPT.values() for head in layer]
    assert len(pairs) == 6

    def share(first: int, last: int) -> float:
        kept = sum(1 for positions in pairs for position in positions if first <= position <= last)
        return round(kept / ((last - first + 1) * len(pairs)), 4)

    # page 1 (3-8): 3+2+3+2+0+0 kept positions of 6 tokens x 6 pairs; page 2 (9-14): 2+2+0+4+3+3
    assert share(3, 8) == round(10 / 36, 4) and share(9, 14) == round(14 / 36, 4)
    assert pages == [{"page": 1, "document_tokens": 6, "kept_share": share(3, 8)},
                     {"page": 2, "document_tokens": 6, "kept_share": share(9, 14)}]


def test_pages_share_differs_by_page_and_a_document_without_pages_has_none():
    settings = CompressionSettings(method="snapkv", window_size=4, max_capacity_prompt=10)
    cache = SnapKVCache(settings=settings)
    # one layer, one head: keeps all of page 1 (3-8) and one token of page 2 (9-14)
    cache.records[0] = LayerRecord(layer=0, prompt_length=LENGTH, capacity=10,
                                   kept_positions=torch.tensor([[[3, 4, 5, 6, 7, 8, 9, 17, 18, 19]]]), scores=None,
                                   bytes_before=1, bytes_after=1)
    prefix = PrefixInfo(tokens=0, source="prefill", seconds=0.0)
    report = build_report(model_name="m", device="cpu", dtype="float32", prompt=hand_prompt(),
                          result=hand_result(cache), generation=GenerationOptions(), document="d", question="q",
                          load_s=0.0, question_index=0, prefix=prefix, doc_cache=DocCacheInfo())
    assert [(row.page, row.document_tokens, row.kept_share) for row in report.pages] == [
        (1, 6, 1.0), (2, 6, round(1 / 6, 4))]
    unpaged = hand_prompt()
    unpaged.token_pages[:] = [None] * LENGTH
    report = build_report(model_name="m", device="cpu", dtype="float32", prompt=unpaged, result=hand_result(cache),
                          generation=GenerationOptions(), document="d", question="q", load_s=0.0, question_index=0,
                          prefix=prefix, doc_cache=DocCacheInfo())
    assert report.pages == [] and report.to_json()["pages"] == []


def test_timings_are_rounded_seconds_and_the_decode_rate():
    timings = hand_report().to_json()["timings"]
    # 7 decoding steps in 2.0504 s: 3.41397 tokens/s
    assert timings == {"load_s": 1.235, "prefill_s": 0.988, "decode_s": 2.05, "decode_tokens_per_s": 3.41,
                       "selection_s": 0.012, "prefix_s": 0.333, "wall_s": 4.568}


def _vm_hwm_bytes() -> int:
    """The process's peak resident set, as Linux's /proc reports it (kB)."""
    with open("/proc/self/status", encoding="ascii") as status:
        line = next(line for line in status if line.startswith("VmHWM:"))
    return int(line.split()[1]) * 1024


@pytest.mark.skipif(not __import__("os").path.exists("/proc/self/status"), reason="needs Linux's /proc")
def test_peak_memory_is_the_process_peak_resident_set_in_bytes():
    low = _vm_hwm_bytes()
    peak = peak_rss_bytes()
    high = _vm_hwm_bytes()
    assert type(peak) is int
    assert low * 0.9 <= peak <= high * 1.1  # ru_maxrss and VmHWM: the same high-water mark, kB both
    memory = hand_report().to_json()["memory"]
    assert memory["peak_rss_bytes"] >= low * 0.9
    if not torch.cuda.is_available():
        assert memory["cuda_peak_bytes"] is None


def test_a_reused_prefix_is_counted_and_a_prefilled_one_is_not():
    reused = hand_report(prefix_source="memory").to_json()
    assert reused["reused_prefix_tokens"] == 16
    assert reused["prefix"] == {"tokens": 16, "source": "memory", "seconds": 0.33333, "extended_tokens": 0}
    assert hand_report(prefix_source="disk").to_json()["reused_prefix_tokens"] == 16
    assert hand_report(prefix_source="prefill").to_json()["reused_prefix_tokens"] == 0
    extended = hand_report(prefix_source="prefill", extended_tokens=9).to_json()  # built on a held prefix's 9
    assert extended["reused_prefix_tokens"] == 9 and extended["prefix"]["extended_tokens"] == 9
    from snapkv_cli.views.report_panel import compact_line, time_text

    line = compact_line(hand_report(prefix_source="prefill", extended_tokens=9), "q1")
    assert "prefix 16 tokens, 9 of them from an earlier prefix prefilled in 0.33s" in line
    assert "document (16 tokens, 9 of them from an earlier prefix) prefill 0.33s" in time_text(
        hand_report(prefix_source="prefill", extended_tokens=9))


def test_the_stop_block_names_the_stop_string_that_ended_the_answer():
    stop = hand_report(stop_reason="stop_string", stop_string="\n\nQ:", stop_strings=("\n\nQ:", "Question:"),
                       stop_on_repeat=False).to_json()
    assert stop["stop"] == {"strings": ["\n\nQ:", "Question:"], "stopped_by": "\n\nQ:", "reason": "stop_string",
                            "stop_string": "\n\nQ:", "stop_on_repeat": False, "repeated": None}
    looped = hand_report(stop_reason="repetition", repeated="the the").to_json()["stop"]
    assert looped == {"strings": [], "stopped_by": "repetition", "reason": "repetition", "stop_string": None,
                      "stop_on_repeat": True, "repeated": "the the"}
    ended = hand_report().to_json()["stop"]
    assert (ended["stopped_by"], ended["reason"], ended["stop_string"]) == ("eos", "eos", None)
    cut = hand_report(stop_reason="max_new_tokens").to_json()["stop"]
    assert (cut["stopped_by"], cut["reason"], cut["stop_string"]) == ("max_new_tokens", "max_new_tokens", None)


@pytest.mark.parametrize(("reason", "cut"), [("eos", False), ("stop_string", False), ("max_new_tokens", True),
                                             ("repetition", True)])
def test_an_answer_is_cut_only_by_the_token_limit_or_a_loop(reason, cut):
    assert StopInfo(reason=reason).cut is cut


def test_without_the_answer_the_json_drops_what_describes_it():
    full = hand_report().to_json()
    data = hand_report().to_json(answer=False)
    assert list(data) == [key for key in ANSWER_KEYS if key not in ("answer", "generated_tokens")]
    assert data["timings"] == {"load_s": 1.235, "prefill_s": 0.988, "selection_s": 0.012, "prefix_s": 0.333,
                               "wall_s": 4.568}
    assert {key: value for key, value in full.items() if key not in ("answer", "generated_tokens", "timings",
                                                                      "memory")} == \
        {key: value for key, value in data.items() if key not in ("timings", "memory")}



def test_the_defaults_of_a_report_left_unsaid():
    """Without a wall time or a dtype reason the report gives 0 s and "asked for"; an empty cache gives zero
    bounds; with CUDA, the peak CUDA memory allocated is reported."""
    settings = CompressionSettings(method="full", window_size=4, max_capacity_prompt=10)
    unpaged = hand_prompt()
    unpaged.token_pages[:] = [None] * LENGTH
    report = build_report(model_name="m", device="cpu", dtype="float32", prompt=unpaged,
                          result=hand_result(SnapKVCache(settings=settings)), generation=GenerationOptions(),
                          document="d", question="q", load_s=0.0, question_index=0,
                          prefix=PrefixInfo(tokens=0, source="prefill", seconds=0.0),
                          doc_cache=DocCacheInfo())
    assert report.timings.wall_s == 0.0 and report.dtype_reason == "asked for" and report.quantization is None
    assert report.layers == [] and (report.cache.tokens_after_min, report.cache.tokens_after_max) == (0, 0)


def test_with_cuda_the_peak_cuda_memory_is_reported(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda *args, **kwargs: 123456789)
    assert hand_report().to_json()["memory"]["cuda_peak_bytes"] == 123456789


@pytest.mark.parametrize(("platform", "expected"), [("linux", 5000 * 1024), ("darwin", 5000)])
def test_peak_memory_reads_kib_on_linux_and_bytes_on_macos(monkeypatch, platform, expected):
    """getrusage's ru_maxrss is in KiB on Linux and in bytes on macOS: the report gives bytes on both."""
    import resource
    import sys
    from types import SimpleNamespace

    monkeypatch.setattr(sys, "platform", platform)
    monkeypatch.setattr(resource, "getrusage",
                        lambda who: SimpleNamespace(ru_maxrss=5000 if who == resource.RUSAGE_SELF else -1))
    assert peak_rss_bytes() == expected


def test_the_compact_line_gives_the_cache_prefix_times_and_a_cut_as_counted_here():
    from snapkv_cli.views.report_panel import compact_line

    # 20 prompt tokens; real tokens per head 10, 10, 7, 10, 8, 8: mean 53/6 = 8.83 -> 9, range 7-10;
    # bytes 2 * 640 + 256 = 1536 before, 2 * 320 + 256 = 896 after: 1536 / 896 = 1.71x
    times = "prefill 0.99s · decode 8 tokens in 2.05s · answer 4.57s"
    head = "20 → 9 (7-10) tokens (1.71x)"
    assert compact_line(hand_report(prefix_source="memory"), "q3") == f"q3 {head} · prefix 16 tokens reused · {times}"
    assert compact_line(hand_report(prefix_source="disk"), "q3") == \
        f"q3 {head} · prefix 16 tokens loaded from the document cache in 0.33s · {times}"
    assert compact_line(hand_report(prefix_source="prefill", stop_reason="max_new_tokens"), "q1") == \
        f"q1 {head} · prefix 16 tokens prefilled in 0.33s · {times} · cut: token limit"
    alone = dataclasses.replace(hand_report(prefix_source="prefill"),
                                prefix=PrefixInfo(tokens=0, source="prefill", seconds=0.0))
    assert compact_line(alone, "a") == f"a {head} · {times}"
    even = dataclasses.replace(alone, cache=dataclasses.replace(alone.cache, tokens_after_min=9, tokens_after_max=9))
    assert compact_line(even, "a") == f"a 20 → 9 tokens (1.71x) · {times}"
    assert compact_line(dataclasses.replace(alone, method="full"), "a") == f"a 20 tokens, not compressed · {times}"


def test_the_compact_line_adds_what_the_document_cache_did_unless_the_prefix_was_reused_in_memory():
    from snapkv_cli.views.report_panel import compact_line

    stored = DocCacheInfo(enabled=True, status="stored", path="/c/e", bytes=2048)
    for source in ("disk", "prefill"):
        line = compact_line(dataclasses.replace(hand_report(prefix_source=source), doc_cache=stored), "q1")
        assert line.startswith("q1 20 → 9 (7-10) tokens")
        assert line.split("\n")[1:] == ["document cache: stored (2.0 KB) in /c/e"]
    rebuilt = DocCacheInfo(enabled=True, status="rebuilt", path="/c/e", bytes=2048, reason="damaged")
    line = compact_line(dataclasses.replace(hand_report(prefix_source="prefill"), doc_cache=rebuilt), "q1")
    assert line.startswith("q1 20 → 9 (7-10) tokens")
    assert line.split("\n")[1:] == ["document cache: the entry was rebuilt (damaged) (2.0 KB)"]
    skipped = DocCacheInfo(enabled=True, status="not_stored", reason="no space")
    line = compact_line(dataclasses.replace(hand_report(prefix_source="prefill"), doc_cache=skipped), "q1")
    assert line.startswith("q1 20 → 9 (7-10) tokens")
    assert line.split("\n")[1:] == ["document cache: not stored: no space"]
    for status in ("hit", "off"):
        other = DocCacheInfo(enabled=True, status=status, path="/c/e", bytes=2048)
        assert "\n" not in compact_line(dataclasses.replace(hand_report(prefix_source="prefill"), doc_cache=other), "q")
    reused = compact_line(dataclasses.replace(hand_report(prefix_source="memory"), doc_cache=stored), "q1")
    assert "\n" not in reused and "document cache" not in reused


def _panel(report: Report, width: int) -> tuple[list[str], list[str]]:
    """The panel as a colour terminal of ``width`` columns shows it: its plain lines and its lines with ANSI codes."""
    import io

    from rich.console import Console

    from snapkv_cli.views.report_panel import render_report

    console = Console(file=io.StringIO(), width=width, force_terminal=True, color_system="standard", record=True)
    render_report(report, console)
    return (console.export_text(styles=False, clear=False).splitlines(),
            console.export_text(styles=True).splitlines())


def _rows(lines: list[str]) -> list[str]:
    """The panel's inner lines without its border and right padding."""
    return [line.removeprefix("│ ").rstrip("│").rstrip() for line in lines[1:-1]]


def test_the_full_report_panel_shows_each_row_under_its_bold_cyan_label():
    memory = report_module.Memory(peak_rss_bytes=3 * 1024 ** 2, cuda_peak_bytes=2 * 1024 ** 3)
    report = dataclasses.replace(hand_report(prefix_source="prefill"), memory=memory)
    plain, styled = _panel(report, 200)
    # 20 prompt tokens = 12 document (pages 1, 2) + 3 question + 5 template; layer 2 slides (8 tokens), layers 0, 1
    # keep means 10 and 8.5 (bars of 7 steps: 8.5/10 * 7 = 5.95 -> 6, 8/10 * 7 = 5.6 -> 6); page 2 keeps 14 of its
    # 6 tokens x 6 (layer, head) pairs, page 1 10
    assert _rows(plain) == [
        "model      tiny/model  (cpu)",
        "weights    float16, int8 Linear layers (auto: no bfloat16)",
        "prompt     20 tokens = 12 document + 5 template + 3 question",
        "window     4 tokens, 3 of them question",
        "template   qa_base (completion style for a base model)",
        "method     snapkv  budget 10, kernel 3, maxpool, centered window, uniform layers, uniform heads",
        "KV cache   20 → 9 tokens per head on average (7-10), 1.5 KB → 896 B (1.71x)",
        "per layer  █▇▇  min 7 / max 10 over 3 layers",
        "sliding    1 of 3 layers keep only their window (max 8 tokens); snapkv applies to the 2 global layers",
        "top pages  p2 39%, p1 28%",
        "stopped    end of answer after 8 tokens",
        "time       load 1.24s · document (16 tokens) prefill 0.33s · question prefill 0.99s · decode 8 tokens in "
        "2.05s (3.4 tok/s) · answer 4.57s",
        "memory     peak RSS 3.0 MB, CUDA peak 2.0 GB",
    ]
    assert " snapkv " in plain[0] and "\x1b[1m snapkv \x1b[0m" in styled[0]  # the title, in bold
    labels = [row[:9] for row in _rows(plain)]
    for label, line in zip(labels, styled[1:-1]):
        assert line.startswith(f"│ \x1b[1;36m{label}\x1b[0m"), line  # bold (1) cyan (36)
        assert "\x1b[" not in line.split("\x1b[0m", 2)[-1]  # the values in the default style


def test_on_a_narrow_terminal_the_labels_stay_whole_and_the_values_wrap():
    for width in (30, 22):  # 22: the values get 7 columns, less than "per layer" or "top pages" takes
        rows = _rows(_panel(hand_report(prefix_source="prefill"), width)[0])
        labels = [row[:9].strip() for row in rows if row[:9].strip()]
        assert labels == ["model", "weights", "prompt", "window", "template", "method", "KV cache", "per layer",
                          "sliding", "top pages", "stopped", "time", "memory"], width
        assert rows[1] == "           (cpu)"


def test_the_panel_says_when_the_question_does_not_fit_the_window_and_when_nothing_is_compressed():
    report = hand_report(prefix_source="prefill")
    report = dataclasses.replace(
        report, method="full",
        prompt=dataclasses.replace(report.prompt, question_tokens=9, question_tokens_in_window=4, question_fits=False,
                                   style="chat", template_name="qa"),
        layers=[dataclasses.replace(row, sliding_window=False) for row in report.layers])
    rows = _rows(_panel(report, 200)[0])
    assert "window     4 tokens, 4 of them question (question has 9 tokens: it does not fit)" in rows
    assert "KV cache   9 tokens per head on average (7-10), 896 B, not compressed (--method full)" in rows
    assert [row[:9].strip() for row in rows if row[:9].strip() in ("template", "sliding")] == []
    # the warning in yellow (33), the rest of the row in the default style
    window = next(line for line in _panel(report, 200)[1] if "window" in line)
    assert "4 tokens, 4 of them question \x1b[33m(question has 9 tokens: it does not fit)\x1b[0m" in window


def test_a_loop_is_quoted_on_one_line_and_shortened_past_60_characters():
    from snapkv_cli.views.report_panel import stop_text

    def said(repeated):
        return stop_text(StopInfo(reason="repetition", repeated=repeated), 40)

    def expected(quoted):
        return (f"[yellow]cut after 40 tokens: a loop, the same 8 tokens 4 times ({quoted}); "
                "--no-stop-on-repeat lets it run[/]")

    assert said("the  cat\n sat\t") == expected("'the cat sat'")  # whitespace collapsed to single spaces
    sixty = "abcdefghij" * 6
    assert said(sixty) == expected(repr(sixty))
    assert said(sixty + "k") == expected(repr("abcdefghij" * 5 + "abcdefg..."))  # 57 characters and "..."
    assert said("x " * 30 + "y") == expected(repr("x " * 28 + "x..."))  # 61 once collapsed
    assert said(None) == expected("''")


def test_an_answer_ended_by_a_stop_string_names_it_escaped_for_rich():
    from snapkv_cli.views.report_panel import stop_text

    stop = StopInfo(reason="stop_string", stop_string="[x]")
    assert stop_text(stop, 5) == "at the stop string '\\[x]' after 5 tokens (a base model's rule)"
    assert stop_text(StopInfo(), 5) == "end of answer after 5 tokens"


def test_the_time_row_says_where_the_shared_document_prefix_came_from():
    from snapkv_cli.views.report_panel import time_text

    # the load's 1.23456 s is kept as 1.235 (milliseconds), shown as 1.24
    tail = "question prefill 0.99s · decode 8 tokens in 2.05s (3.4 tok/s) · answer 4.57s"
    assert time_text(hand_report(prefix_source="memory")) == \
        f"load 1.24s · document (16 tokens) prefilled for an earlier question · {tail}"
    assert time_text(hand_report(prefix_source="prefill")) == \
        f"load 1.24s · document (16 tokens) prefill 0.33s · {tail}"
    assert time_text(hand_report(prefix_source="disk")) == \
        f"load 1.24s · document (16 tokens) loaded from the document cache in 0.33s · {tail}"


def test_a_sparkline_draws_one_bar_per_value_from_zero_to_the_largest():
    from snapkv_cli.views.report_panel import sparkline

    assert sparkline([]) == ""
    assert sparkline([0.0, 0.0, 0.0]) == "▁▁▁"
    assert sparkline([0.0, 3.5, 7.0, 1.0]) == "▁▅█▂"  # 3.5 of 7 -> bar 3.5 -> 4 (round half to even), 1 -> bar 1
