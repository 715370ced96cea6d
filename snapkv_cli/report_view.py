"""Render an ``ask`` report (see :mod:`snapkv_cli.report`) as a compact Rich panel for stderr."""

from __future__ import annotations

from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

_BARS = "▁▂▃▄▅▆▇█"


def sparkline(values: list[float]) -> str:
    """One bar per value, scaled from zero to the largest value."""
    high = max(values, default=0) or 1.0
    return "".join(_BARS[round(value / high * (len(_BARS) - 1))] for value in values)


def human_bytes(count: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if abs(count) < 1024 or unit == "GB":
            return f"{count:.1f} {unit}" if unit != "B" else f"{int(count)} B"
        count /= 1024
    return f"{count:.1f} GB"


def render_report(report: dict, console: Console) -> None:
    settings, prompt, cache, timings = report["settings"], report["prompt"], report["cache"], report["timings"]
    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold cyan", no_wrap=True)
    table.add_column()
    table.add_row("model", Text(f"{report['model']}  ({report['device']}, {report['dtype']})"))  # no markup
    table.add_row("prompt", f"{report['prompt_tokens']} tokens = {prompt['document']} document + "
                            f"{prompt['template']} template + {prompt['question']} question")
    window = f"{prompt['window_size']} tokens, {prompt['question_tokens_in_window']} of them question"
    if not prompt["question_fits"]:
        window += f" [yellow](question has {prompt['question_tokens']} tokens: it does not fit)[/]"
    table.add_row("window", window)
    method = report["method"]
    if method in ("snapkv", "pyramidkv"):
        method += f"  budget {settings['max_capacity_prompt']}, kernel {settings['kernel_size']} {settings['pooling']}"
    elif method != "full":
        method += f"  budget {settings['max_capacity_prompt']}"
    table.add_row("method", method)
    table.add_row("KV cache", f"{cache['tokens_before']} → {cache['tokens_after']:g} tokens per head, "
                              f"{human_bytes(cache['bytes_before'])} → {human_bytes(cache['bytes_after'])} "
                              f"({cache['compression_ratio']:.2f}x)")
    layers = report["layers"]
    if layers:
        kept = [row["kept_tokens_mean"] for row in layers]
        table.add_row("per layer", f"{sparkline(kept)}  min {min(r['kept_tokens_min'] for r in layers)} / "
                                   f"max {max(r['kept_tokens_max'] for r in layers)} over {len(layers)} layers")
    pages = sorted(report["pages"], key=lambda row: row["kept_share"], reverse=True)
    if len(pages) > 1:
        table.add_row("top pages", ", ".join(f"p{row['page']} {row['kept_share']:.0%}" for row in pages[:5]))
    table.add_row("time", f"load {timings['load_s']:.2f}s · prefill {timings['prefill_s']:.2f}s · "
                          f"decode {report['generated_tokens']} tokens in {timings['decode_s']:.2f}s "
                          f"({timings['decode_tokens_per_s']:.1f} tok/s)")
    memory = f"peak RSS {human_bytes(report['memory']['peak_rss_bytes'])}"
    if report["memory"].get("cuda_peak_bytes"):
        memory += f", CUDA peak {human_bytes(report['memory']['cuda_peak_bytes'])}"
    table.add_row("memory", memory)
    console.print(Panel(Group(table), title=Text("snapkv", style="bold"), expand=False))
