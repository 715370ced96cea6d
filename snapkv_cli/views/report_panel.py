"""Views of a :class:`~snapkv_cli.answering.report.Report` for stderr: the full Rich panel, and one line per answer."""

from __future__ import annotations

from rich.console import Console, Group
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from ..answering.report import CacheInfo, DocCacheInfo, Report, StopInfo
from ..engine.methods import METHODS
from ..engine.settings import settings_declarations
from ..generation.options import generation_flag
from ..generation.stopping import LOOP_RULE, STOP_REASONS
from .units import human_bytes

_BARS = "▁▂▃▄▅▆▇█"


def sparkline(values: list[float]) -> str:
    """One bar per value (each zero or more: kept-token means), scaled from zero to the largest value."""
    high = max(values, default=0) or 1.0
    return "".join(_BARS[round(value / high * (len(_BARS) - 1))] for value in values)


def kept_per_head(cache: CacheInfo) -> str:
    """The prompt tokens a (layer, KV head) keeps, in whole tokens: ``1024 tokens per head``, or where they differ
    the mean and the range (``597 tokens per head on average (412-1024)``)."""
    low, high = cache.tokens_after_min, cache.tokens_after_max
    if low == high:
        return f"{high} tokens per head"
    return f"{round(cache.tokens_after)} tokens per head on average ({low}-{high})"


def stop_text(stop: StopInfo, tokens: int) -> str:
    """Why the answer ended, in words (Rich markup: a cut answer in yellow)."""
    if stop.reason == "max_new_tokens":
        return (f"[yellow]cut at the token limit ({tokens} tokens): raise {generation_flag('max_new_tokens')} "
                "for more[/]")
    if stop.reason == "repetition":
        loop = " ".join((stop.repeated or "").split())
        loop = loop if len(loop) <= 60 else loop[:57] + "..."
        said = escape(f"a loop, the same {LOOP_RULE.ngram} tokens {LOOP_RULE.earlier + 1} times ({loop!r})")
        return (f"[yellow]cut after {tokens} tokens: {said}; {generation_flag('stop_on_repeat', off=True)} "
                "lets it run[/]")
    if stop.reason == "stop_string":
        return escape(f"at the stop string {stop.stop_string!r} after {tokens} tokens (a base model's rule)")
    return f"end of answer after {tokens} tokens"


def _shares_a_prefix(report: Report) -> bool:
    """The prompt's prefix was prefilled (or loaded) apart from the question, as with several questions."""
    return bool(report.reused_prefix_tokens or report.prefix.seconds)


def weights_text(report: Report) -> str:
    """The weights' dtype (and quantization), read back from the model, and why: ``bfloat16 (auto: this CPU computes
    bfloat16 natively (AVX512_BF16))``, ``float32, int8 Linear layers (asked for)``; then, where ``--decode-weights``
    asked for other weights, what the decoding steps ran and why (``; decode steps: bfloat16 Linear weights, ...``).
    A report stored before these keys existed (the docs' examples) shows the dtype alone."""
    quantization, reason = getattr(report, "quantization", None), getattr(report, "dtype_reason", None)
    quantized = f", {quantization} Linear layers" if quantization else ""
    decode = getattr(report, "decode_path", None)
    return f"{report.dtype}{quantized}" + (f" ({reason})" if reason else "") + (f"; {decode}" if decode else "")


def time_text(report: Report) -> str:
    """The panel's times: the model's load, the document's prefill where it was shared (or where it came from), the
    question's prefill, the decoding, and the answer's wall time."""
    timings, prefix = report.timings, report.prefix
    parts = [f"load {timings.load_s:.2f}s"]
    if _shares_a_prefix(report):
        if prefix.source == "memory":
            parts.append(f"document ({prefix.tokens} tokens) prefilled for an earlier question")
        else:
            how = "prefill" if prefix.source == "prefill" else "loaded from the document cache in"
            parts.append(f"document ({prefix.tokens} tokens{_extended(prefix)}) {how} {prefix.seconds:.2f}s")
        parts.append(f"question prefill {timings.prefill_s:.2f}s")
    else:
        parts.append(f"prefill {timings.prefill_s:.2f}s")
    parts.append(f"decode {report.generated_tokens} tokens in {timings.decode_s:.2f}s "
                 f"({timings.decode_tokens_per_s:.1f} tok/s)")
    parts.append(f"answer {timings.wall_s:.2f}s")
    return " · ".join(parts)


def render_report(report: Report, console: Console) -> None:
    """The full report as a panel: model, prompt, window, method, cache, layers, pages, times, memory."""
    prompt, cache = report.prompt, report.cache
    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold cyan", no_wrap=True)
    table.add_column()
    table.add_row("model", Text(f"{report.model}  ({report.device})"))
    table.add_row("weights", Text(weights_text(report)))
    table.add_row("prompt", f"{report.prompt_tokens} tokens = {prompt.document} document + "
                            f"{prompt.template} template + {prompt.question} question")
    window = f"{prompt.window_size} tokens, {prompt.question_tokens_in_window} of them question"
    if not prompt.question_fits:
        window += f" [yellow](question has {prompt.question_tokens} tokens: it does not fit)[/]"
    table.add_row("window", window)
    if prompt.style == "completion":  # a base model: plain-text prompt, answer ended by the stop rule
        table.add_row("template", escape(f"{prompt.template_name} (completion style for a base model)"))
    table.add_row("method", method_line(report))
    if report.method == "full":  # nothing compressed: no ratio to show
        table.add_row("KV cache", f"{kept_per_head(cache)}, {human_bytes(cache.bytes_after)}, "
                                  "not compressed (--method full)")
    else:
        table.add_row("KV cache", f"{cache.tokens_before} → {kept_per_head(cache)}, "
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
    table.add_row("stopped", stop_text(report.stop, report.generated_tokens))
    table.add_row("time", time_text(report))
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


def _extended(prefix) -> str:
    """The share of a prefix taken from an earlier one it extends (a conversation's next turn), or nothing."""
    return f", {prefix.extended_tokens} of them from an earlier prefix" if prefix.extended_tokens else ""


def compact_line(report: Report, label: str) -> str:
    """One line of an answer's report: cache, prefix reuse, times, a cut answer (and what the document cache did)."""
    cache, timings, prefix = report.cache, report.timings, report.prefix
    if report.method == "full":
        parts = [f"{label} {cache.tokens_before} tokens, not compressed"]
    else:
        kept = round(cache.tokens_after)
        spread = f" ({cache.tokens_after_min}-{cache.tokens_after_max})" \
            if cache.tokens_after_min != cache.tokens_after_max else ""
        parts = [f"{label} {cache.tokens_before} → {kept}{spread} tokens ({cache.compression_ratio:.2f}x)"]
    if _shares_a_prefix(report):
        text = f"prefix {prefix.tokens} tokens{_extended(prefix)} {_SOURCES[prefix.source]}"
        if prefix.source != "memory":
            text += f" in {prefix.seconds:.2f}s"
        parts.append(text)
    parts.append(f"prefill {timings.prefill_s:.2f}s")
    parts.append(f"decode {report.generated_tokens} tokens in {timings.decode_s:.2f}s")
    parts.append(f"answer {timings.wall_s:.2f}s")
    if report.stop.cut:
        parts.append(f"cut: {STOP_REASONS[report.stop.reason]}")
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
