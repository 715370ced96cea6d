"""Views of a :class:`~snapkv_cli.report.Report` for stderr: the full Rich panel, and one line per answer."""

from __future__ import annotations

from rich.console import Console, Group
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from ..engine.methods import METHODS
from ..engine.settings import settings_declarations
from ..report import DocCacheInfo, Report
from ..views.units import human_bytes

_BARS = "▁▂▃▄▅▆▇█"


def sparkline(values: list[float]) -> str:
    """One bar per value, scaled from zero to the largest value."""
    high = max(values, default=0) or 1.0
    return "".join(_BARS[round(value / high * (len(_BARS) - 1))] for value in values)


def render_report(report: Report, console: Console) -> None:
    """The full report as a panel: model, prompt, window, method, cache, layers, pages, times, memory."""
    prompt, cache, timings = report.prompt, report.cache, report.timings
    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold cyan", no_wrap=True)
    table.add_column()
    table.add_row("model", Text(f"{report.model}  ({report.device}, {report.dtype})"))
    table.add_row("prompt", f"{report.prompt_tokens} tokens = {prompt.document} document + "
                            f"{prompt.template} template + {prompt.question} question")
    window = f"{prompt.window_size} tokens, {prompt.question_tokens_in_window} of them question"
    if not prompt.question_fits:
        window += f" [yellow](question has {prompt.question_tokens} tokens: it does not fit)[/]"
    table.add_row("window", window)
    if prompt.style == "completion":  # a base model: plain-text prompt, answer ended by the stop rule
        stop = "end of text" if report.stop.stopped_by == "eos" else repr(report.stop.stopped_by)
        table.add_row("template", escape(f"{prompt.template_name} (completion style for a base model; "
                                         f"the answer stopped at {stop})"))
    table.add_row("method", method_line(report))
    table.add_row("KV cache", f"{cache.tokens_before} → {cache.tokens_after:g} tokens per head, "
                              f"{human_bytes(cache.bytes_before)} → {human_bytes(cache.bytes_after)} "
                              f"({cache.compression_ratio:.2f}x)")
    if report.layers:
        kept = [row.kept_tokens_mean for row in report.layers]
        table.add_row("per layer", f"{sparkline(kept)}  min {min(r.kept_tokens_min for r in report.layers)} / "
                                   f"max {max(r.kept_tokens_max for r in report.layers)} over "
                                   f"{len(report.layers)} layers")
        sliding = [row for row in report.layers if row.sliding_window]
        if sliding:
            table.add_row("sliding", f"{len(sliding)} of {len(report.layers)} layers keep only their window "
                                     f"(max {max(r.kept_tokens_max for r in sliding)} tokens); {report.method} "
                                     f"applies to the {len(report.layers) - len(sliding)} global layers")
    pages = sorted(report.pages, key=lambda row: row.kept_share, reverse=True)
    if len(pages) > 1:
        table.add_row("top pages", ", ".join(f"p{row.page} {row.kept_share:.0%}" for row in pages[:5]))
    table.add_row("time", f"load {timings.load_s:.2f}s · prefill {timings.prefill_s:.2f}s · "
                          f"decode {report.generated_tokens} tokens in {timings.decode_s:.2f}s "
                          f"({timings.decode_tokens_per_s:.1f} tok/s)")
    memory = f"peak RSS {human_bytes(report.memory.peak_rss_bytes)}"
    if report.memory.cuda_peak_bytes:
        memory += f", CUDA peak {human_bytes(report.memory.cuda_peak_bytes)}"
    table.add_row("memory", memory)
    console.print(Panel(Group(table), title=Text("snapkv", style="bold"), expand=False))


def method_line(report: Report) -> str:
    """The method and, in its settings' declared labels, those that apply to it: ``defensivekv  budget 64, kernel 15,
    maxpool, causal window, uniform layers, uniform heads``."""
    method = METHODS[report.method]
    shown = []
    for name, declared in settings_declarations().items():
        if declared.reported and declared.label is not None and declared.applies(method):
            value = getattr(report.settings, name)
            if not isinstance(value, bool):
                shown.append(declared.label.format(value))
            elif value:
                shown.append(declared.label)
    return escape(report.method + ("  " + ", ".join(shown) if shown else ""))


_SOURCES = {"prefill": "prefilled", "disk": "loaded from the document cache", "memory": "reused"}


def compact_line(report: Report, label: str) -> str:
    """One line of an answer's report: cache, prefix reuse, times (and what the document cache did)."""
    cache, timings, prefix = report.cache, report.timings, report.prefix
    parts = [f"{label} {cache.tokens_before} → {cache.tokens_after:g} tokens ({cache.compression_ratio:.2f}x)"]
    if report.reused_prefix_tokens or prefix.seconds:
        text = f"prefix {prefix.tokens} tokens {_SOURCES[prefix.source]}"
        if prefix.source != "memory":
            text += f" in {prefix.seconds:.2f}s"
        parts.append(text)
    parts.append(f"prefill {timings.prefill_s:.2f}s")
    parts.append(f"decode {report.generated_tokens} tokens in {timings.decode_s:.2f}s")
    line = " · ".join(parts)
    if prefix.source != "memory" and report.doc_cache.status in ("stored", "rebuilt", "not_stored"):
        line += "\n" + doc_cache_line(report.doc_cache)
    return line


def doc_cache_line(doc_cache: DocCacheInfo) -> str:
    """What the document cache did, in words (stored, rebuilt, not stored and why)."""
    size = f" ({human_bytes(doc_cache.bytes)})" if doc_cache.bytes else ""
    if doc_cache.status == "stored":
        return f"document cache: stored{size} in {doc_cache.path}"
    if doc_cache.status == "rebuilt":
        return f"document cache: the entry was rebuilt ({doc_cache.reason}){size}"
    return f"document cache: not stored: {doc_cache.reason}"
