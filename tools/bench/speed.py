"""The tables and facts of ``snapkv bench speed`` runs (``tools/bench/run_benchmarks.sh speed`` and ``chunked``):
prefill and decode against plain transformers, paired per round."""

from __future__ import annotations

from tools.docs import prose


def speed_table(path: str) -> str:
    from snapkv_cli.bench.render import speed_rows

    return prose.table(speed_rows(prose.load(path)))


def speed_comparisons(path: str) -> str:
    from snapkv_cli.bench.render import comparison_rows

    return prose.table(comparison_rows(prose.load(path)))


def _speed_method(path: str) -> str:
    """The compressing method of a speed bench's JSON (runs from before the bench took ``--method`` ran SnapKV)."""
    return prose.load(path)["plan"].get("method", "snapkv")


def _speed(path: str) -> tuple[dict, dict]:
    """The speed bench's paired comparisons and its summary, each keyed by (length, method, budget)."""
    from snapkv_cli.bench.speed import compare, summarize

    samples = prose.load(path)["samples"]
    return ({(r["length"], r["method"], r["budget"]): r for r in compare(samples)},
            {(r["length"], r["method"], r["budget"]): r for r in summarize(samples)})


def chunked_prefill(plain_path: str, chunked_path: str, length: str, budget: str) -> str:
    """Peak RSS and prefill with and without prefill chunks, SnapKV at one length and budget (two runs). Seconds are
    compared only within a run (against that run's plain-transformers prefill, paired by round): the two runs may
    come from different machines or loads."""
    from snapkv_cli.bench.speed import compare, summarize

    rows = []
    for path in (plain_path, chunked_path):
        report = prose.load(path)
        key = (int(length), _speed_method(path), int(budget))
        row = {(r["length"], r["method"], r["budget"]): r for r in summarize(report["samples"])}[key]
        ratio = {(r["length"], r["method"], r["budget"]): r for r in compare(report["samples"])}[key]
        overhead = ratio["prefill_overhead_vs_transformers"]
        chunk = report["plan"]["chunk_size"]
        rows.append([f"`{path}`", prose.method_name(key[1]), "one pass" if chunk is None else f"chunks of {chunk}",
                     f"{row['peak_rss_bytes']['median'] / 2**20:.0f} [{row['peak_rss_bytes']['q1'] / 2**20:.0f}, "
                     f"{row['peak_rss_bytes']['q3'] / 2**20:.0f}]",
                     f"{row['prefill_s']['median']:.2f} [{row['prefill_s']['q1']:.2f}, {row['prefill_s']['q3']:.2f}]",
                     f"{100 * overhead['median']:+.1f}% [{100 * overhead['q1']:+.1f}%, {100 * overhead['q3']:+.1f}%]",
                     str(row["repeats"])])
    return prose.table((["run", "method", "prefill", f"peak RSS MiB (budget {budget}, {int(length):,} tokens)",
                         "prefill s", "prefill vs one-pass plain transformers, same run", "runs"], rows))


def speed_facts(path: str, length: str, budget: str) -> dict[str, str]:
    """The speed bench at one length and budget: the compressing method's decode rate beside plain transformers',
    this project's uncompressed cache's and the weights-only floor's (medians), the paired ratios (``decode-vs-plain``
    is this project's cache and compression together, ``decode-vs-full`` compression alone), prefill overheads, the
    same at budget 256 (``-256``), KV bytes and peak RSS."""
    prose.check_default_label()
    length_, budget_ = int(length), int(budget)
    comparisons, summary = _speed(path)
    method = _speed_method(path)
    snap, plain = comparisons[(length_, method, budget_)], comparisons[(length_, "transformers", None)]
    small = comparisons.get((length_, method, 256))

    def median(key: tuple, field: str) -> float:
        return summary[key][field]["median"] if isinstance(summary[key][field], dict) else summary[key][field]

    mine, theirs = (length_, method, budget_), (length_, "transformers", None)
    kv, kv_plain = summary[mine]["kv_bytes"], summary[theirs]["kv_bytes"]
    rss, rss_plain = median(mine, "peak_rss_bytes"), median(theirs, "peak_rss_bytes")
    mib = 2**20
    facts = {
        "method": prose.method_name(method), "rounds": str(snap["decode_vs_transformers"]["n"]),
        "decode": f"{median(mine, 'decode_tokens_per_s'):.1f}",
        "decode-plain": f"{median(theirs, 'decode_tokens_per_s'):.1f}",
        "decode-full": f"{median((length_, 'full', None), 'decode_tokens_per_s'):.1f}",
        "decode-floor": f"{median((1, 'weights-only', None), 'decode_tokens_per_s'):.1f}",
        "ceiling": prose.times(1 / plain["decode_vs_weights_only"]["median"]),
        "kv": f"{kv / mib:.1f} MiB", "kv-plain": f"{kv_plain / mib:.1f} MiB", "kv-smaller": f"{kv_plain / kv:.1f}x",
        "rss": f"{rss / mib:.0f} MiB", "rss-plain": f"{rss_plain / mib:.0f} MiB",
        "rss-lower": f"{(rss_plain - rss) / mib:.0f} MiB", "kv-saved": f"{(kv_plain - kv) / mib:.0f} MiB",
        "rss-share": f"{(rss_plain - rss) / (kv_plain - kv):.0%}",
        "commit": prose.commits((path,)),
    }
    facts |= prose.ratio_facts("decode-vs-plain", snap["decode_vs_transformers"])
    facts |= prose.ratio_facts("decode-vs-full", snap["decode_vs_full"])
    facts |= prose.ratio_facts("decode-vs-floor", snap["decode_vs_weights_only"])
    facts |= prose.ratio_facts("plain-vs-floor", plain["decode_vs_weights_only"])
    facts |= prose.ratio_facts("prefill-vs-plain", snap["prefill_overhead_vs_transformers"], percent=True)
    facts |= prose.ratio_facts("prefill-vs-full", snap["prefill_overhead_vs_full"], percent=True)
    if small is not None:
        facts |= prose.ratio_facts("decode-vs-plain-256", small["decode_vs_transformers"])
        facts |= prose.ratio_facts("decode-vs-full-256", small["decode_vs_full"])
    return facts


TABLES = {"chunked-prefill": chunked_prefill, "speed-table": speed_table, "speed-comparisons": speed_comparisons}
FACTS = {"speed": speed_facts}


def stored_summary(report: dict) -> str | None:
    """A speed JSON's stored summary and comparisons against their recomputation from its samples."""
    from snapkv_cli.bench.speed import compare, summarize

    if report["summary"] != summarize(report["samples"]) or report["comparisons"] != compare(report["samples"]):
        return "stored summary differs from the samples"
    return None


CHECKS = {"speed": stored_summary}
