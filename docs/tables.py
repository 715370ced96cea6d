"""Regenerate, or check, every benchmark table and numeric sentence in the docs from the committed raw JSON.

Blocks in the Markdown files look like::

    <!-- generated: speed-table results/speed.json -->
    ...whatever this script wrote...
    <!-- end generated -->

The first word names a generator below, the rest its arguments (paths relative to ``docs/``). Each generator
recomputes its numbers from the raw records of the JSON (accuracy ``outcomes``, speed ``samples``), never from the
summaries stored beside them; ``--check`` also checks those stored summaries against the recomputation.

    .venv/bin/python docs/tables.py --write   # after a new run: rewrite the blocks
    .venv/bin/python docs/tables.py --check   # exit 1 and list every block or summary that differs

``tests/test_docs_tables.py`` runs the check, so a table that no longer follows from its JSON fails the tests.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
FILES = (DOCS / "benchmarks.md", ROOT / "README.md")
BLOCK = re.compile(r"(<!-- generated: (?P<spec>[^>]*?) -->\n)(?P<body>.*?)(<!-- end generated -->)", re.S)


def _load(name: str) -> dict:
    return json.loads((DOCS / name).read_text(encoding="utf-8"))


def _table(rows) -> str:
    from snapkv_cli.bench.render import markdown_table

    return markdown_table(*rows)


def _ratio(spread: dict, percent: bool = False) -> str:
    if percent:
        return (f"{100 * spread['median']:+.1f}% (interquartile range {100 * spread['q1']:+.1f}% to "
                f"{100 * spread['q3']:+.1f}%)")
    return f"{spread['median']:.2f}x (interquartile range {spread['q1']:.2f}-{spread['q3']:.2f}x)"


# -- generators: each returns the Markdown of one block -------------------------------------------------------------

def _accuracy(paths: tuple[str, ...]) -> dict:
    from snapkv_cli.bench.accuracy import merge_reports

    return merge_reports([_load(path) for path in paths])


def accuracy_table(*paths: str) -> str:
    """Per task, method and budget; per length accuracy and retention (several JSONs: one run per length)."""
    from snapkv_cli.bench.render import accuracy_rows

    return _table(accuracy_rows(_accuracy(paths)))


def accuracy_by_length(*paths: str) -> str:
    """The tasks pooled at each length (never the lengths)."""
    from snapkv_cli.bench.render import accuracy_rows

    header, rows = accuracy_rows(_accuracy(paths), pool_tasks=True)
    return _table((header[1:], [row[1:] for row in rows]))


def prompt_ranges(*paths: str) -> str:
    from snapkv_cli.bench.render import prompt_ranges as ranges

    return _table(ranges(_accuracy(paths)))


def _retention_text(counts) -> str:
    low, high = counts.retention_interval
    return (f"{counts.kept}/{counts.full_correct} = {100 * counts.retention:.0f}% (95% CI {100 * low:.0f}-"
            f"{100 * high:.0f}%; gained {counts.gained}, lost {counts.lost})")


def accuracy_headline(*arguments: str) -> str:
    """Sentences per length: the full cache's accuracy, then each budget's retention with its interval.

    Arguments: the JSON paths, then ``budgets=128,1024`` (which budgets to state).
    """
    from snapkv_cli.bench.accuracy import outcomes_from_json, tally

    paths = [a for a in arguments if not a.startswith("budgets=")]
    budgets = [int(b) for a in arguments if a.startswith("budgets=") for b in a.split("=", 1)[1].split(",")]
    tallies = tally(outcomes_from_json(_accuracy(tuple(paths))), pool_tasks=True)
    lines = []
    for length in sorted({key[1] for key in tallies}):
        full = tallies[("all", length, "full", None)]
        low, high = full.accuracy_interval
        parts = [f"the full cache answers {full.correct}/{full.samples} ({100 * full.accuracy:.0f}%, 95% CI "
                 f"{100 * low:.0f}-{100 * high:.0f}%)"]
        for budget in budgets:
            counts = tallies.get(("all", length, "snapkv", budget))
            if counts is not None and counts.retention is not None:
                parts.append(f"SnapKV at {budget} keeps {_retention_text(counts)}")
        lines.append(f"- {length:,}-token prompts: " + "; ".join(parts) + ".")
    return "\n".join(lines) + "\n"


def seed_comparison(speed_path: str, *accuracy_paths: str) -> str:
    """The seed description's claims beside this project's measurements (retention per length, decode ratio)."""
    from snapkv_cli.bench.accuracy import outcomes_from_json, tally
    from snapkv_cli.bench.speed import compare

    tallies = tally(outcomes_from_json(_accuracy(accuracy_paths)), pool_tasks=True)
    lengths = sorted({key[1] for key in tallies})

    def retention(budget: int) -> str:
        parts = []
        for length in lengths:
            counts = tallies.get(("all", length, "snapkv", budget))
            if counts is not None and counts.retention is not None:
                low, high = counts.retention_interval
                parts.append(f"{length // 1024}k: {100 * counts.retention:.0f}% [{100 * low:.0f}-{100 * high:.0f}]")
        return ", ".join(parts) or "-"

    speed = {(r["length"], r["method"], r["budget"]): r for r in compare(_load(speed_path)["samples"])}
    longest = max(length for length, method, _ in speed if method == "snapkv")
    decode = speed[(longest, "snapkv", 1024)]["decode_vs_transformers"]
    decode_256 = speed[(longest, "snapkv", 256)]["decode_vs_transformers"]
    prefill = speed[(longest, "snapkv", 1024)]["prefill_overhead_vs_transformers"]
    rows = [
        ["budget 4096: 99.8%, 1024: 98.9%, 256: 94.2% retention (LongBench, Llama-3-8B)",
         f"1024: {retention(1024)}; 256: {retention(256)} (single needle, kept / full-correct, 95% CI)"],
        ["up to 10x compression at 99.6% retention",
         f"{longest // 1024}k prompts at budget 1024 ({longest / 1024:.0f}x): {retention(1024)}"],
        ["1.5-2x decode throughput at 10x compression",
         f"{decode['median']:.2f}x [{decode['q1']:.2f}-{decode['q3']:.2f}] plain transformers at {longest:,} tokens, "
         f"budget 1024; {decode_256['median']:.2f}x at budget 256"],
        ["no prefill overhead", f"{100 * prefill['median']:+.1f}% [{100 * prefill['q1']:+.1f}, "
                                f"{100 * prefill['q3']:+.1f}] against plain transformers at {longest:,} tokens"],
    ]
    return _table((["claim (seed)", "measured here (SmolLM2-135M, CPU; median [IQR] or value [95% CI])"], rows))


def speed_table(path: str) -> str:
    from snapkv_cli.bench.render import speed_rows

    return _table(speed_rows(_load(path)))


def speed_comparisons(path: str) -> str:
    from snapkv_cli.bench.render import comparison_rows

    return _table(comparison_rows(_load(path)))


def speed_headline(path: str, length: str, budget: str) -> str:
    """Sentences: decode ratios and prefill overhead of SnapKV at one length and budget, from one run."""
    from snapkv_cli.bench.speed import compare, summarize

    report = _load(path)
    length_, budget_ = int(length), int(budget)
    comparisons = {(r["length"], r["method"], r["budget"]): r for r in compare(report["samples"])}
    summary = {(r["length"], r["method"], r["budget"]): r for r in summarize(report["samples"])}
    snap = comparisons[(length_, "snapkv", budget_)]
    plain = comparisons[(length_, "transformers", None)]
    rate = summary[(length_, "snapkv", budget_)]["decode_tokens_per_s"]["median"]
    plain_rate = summary[(length_, "transformers", None)]["decode_tokens_per_s"]["median"]
    floor_rate = summary[(1, "weights-only", None)]["decode_tokens_per_s"]["median"]
    kv = summary[(length_, "snapkv", budget_)]["kv_bytes"]
    kv_plain = summary[(length_, "transformers", None)]["kv_bytes"]
    rss = summary[(length_, "snapkv", budget_)]["peak_rss_bytes"]["median"]
    rss_plain = summary[(length_, "transformers", None)]["peak_rss_bytes"]["median"]
    repeats = snap["decode_vs_transformers"]["n"]
    lines = [
        f"- Decode at {length_:,} prompt tokens, budget {budget_:,}: {rate:.1f} tok/s against {plain_rate:.1f} for "
        f"plain transformers and {floor_rate:.1f} for the weights-only floor (medians of {repeats} rounds). Paired "
        f"within rounds: **{_ratio(snap['decode_vs_transformers'])} plain transformers** and "
        f"**{_ratio(snap['decode_vs_weights_only'])} the weights-only rate**. Plain transformers itself decodes at "
        f"{_ratio(plain['decode_vs_weights_only'])} the weights-only rate at this length, so no cache could be more "
        f"than about {1 / plain['decode_vs_weights_only']['median']:.2f}x faster than it here.",
        f"- Prefill at {length_:,} tokens, budget {budget_:,}: {_ratio(snap['prefill_overhead_vs_transformers'], True)}"
        f" against plain transformers, {_ratio(snap['prefill_overhead_vs_full'], True)} against the project's own "
        f"cache without compression.",
        f"- KV cache: {kv / 2**20:.1f} MiB against {kv_plain / 2**20:.1f} MiB "
        f"({kv_plain / kv:.1f}x smaller); peak RSS (medians) {rss / 2**20:.0f} MiB against {rss_plain / 2**20:.0f} "
        f"MiB: {(rss_plain - rss) / 2**20:.0f} MiB lower for {(kv_plain - kv) / 2**20:.0f} MiB of KV saved "
        f"({(rss_plain - rss) / (kv_plain - kv):.0%}).",
    ]
    return "\n".join(lines) + "\n"


def provenance(*paths: str) -> str:
    """One line per JSON: the command's commit, machine, libraries, times and the load around it."""
    lines = []
    for path in paths:
        source = _load(path)["provenance"]
        git, machine = source["git"], source["machine"]
        dirty = " (with uncommitted changes)" if git.get("dirty") else ""
        lines.append(f"- `{path}`: `{source['command']}` at commit `{(git.get('commit') or 'unknown')[:10]}`{dirty}, "
                     f"{source['started'][:16].replace('T', ' ')} to {source['finished'][11:16]} UTC; "
                     f"{machine['cpus']} CPUs ({machine['cpu']}), torch {machine['torch']} "
                     f"({machine['torch_threads']} threads), transformers {machine['transformers']}; load average "
                     f"{source['load_average_before'][0]:.1f} before, {source['load_average_after'][0]:.1f} after.")
    return "\n".join(lines) + "\n"


def defaults_table(folder: str, *budgets: str) -> str:
    """The defaults sweep (tune split): per setting, full and SnapKV accuracy at each budget, pooled over lengths
    only when the sweep ran a single length (it does)."""
    from snapkv_cli.bench.accuracy import outcomes_from_json, tally

    header = ["settings", "full"] + [f"snapkv {budget}" for budget in budgets]
    rows = []
    for path in sorted((DOCS / folder).glob("*.json")):
        report = json.loads(path.read_text(encoding="utf-8"))
        tallies = tally(outcomes_from_json(report), pool_tasks=True)
        lengths = {key[1] for key in tallies}
        assert len(lengths) == 1, f"{path.name}: the defaults table expects one length"
        (length,) = lengths

        def cell(method, budget):
            counts = tallies[("all", length, method, budget)]
            return f"{counts.correct}/{counts.samples}"

        rows.append([path.stem, cell("full", None)] + [cell("snapkv", int(budget)) for budget in budgets])
    return _table((header, rows))


GENERATORS = {
    "accuracy-table": accuracy_table,
    "accuracy-by-length": accuracy_by_length,
    "prompt-ranges": prompt_ranges,
    "speed-table": speed_table,
    "speed-comparisons": speed_comparisons,
    "speed-headline": speed_headline,
    "provenance": provenance,
    "accuracy-headline": accuracy_headline,
    "seed-comparison": seed_comparison,
    "defaults-table": defaults_table,
}


def render_block(spec: str) -> str:
    name, *arguments = spec.split()
    return GENERATORS[name](*arguments)


def stored_summaries_mismatches() -> list[str]:
    """Every JSON's stored summaries against a recomputation from its raw records."""
    from snapkv_cli.bench.accuracy import outcomes_from_json, summary_rows
    from snapkv_cli.bench.speed import compare, summarize

    problems = []
    for path in sorted(DOCS.glob("results/**/*.json")):
        report = json.loads(path.read_text(encoding="utf-8"))
        if report.get("schema_version") != 2:
            problems.append(f"{path.relative_to(ROOT)}: schema_version {report.get('schema_version')}, not 2")
            continue
        if report["kind"] == "accuracy":
            outcomes = outcomes_from_json(report)
            if report["cells"] != summary_rows(outcomes) or report["by_length"] != summary_rows(outcomes,
                                                                                                  pool_tasks=True):
                problems.append(f"{path.relative_to(ROOT)}: stored cells differ from the outcomes")
        elif report["kind"] == "speed":
            if report["summary"] != summarize(report["samples"]) or report["comparisons"] != compare(
                    report["samples"]):
                problems.append(f"{path.relative_to(ROOT)}: stored summary differs from the samples")
    return problems


def process(write: bool) -> list[str]:
    """Rewrite (``write``) or compare every generated block; returns the blocks that differed."""
    differing = []
    for file in FILES:
        text = file.read_text(encoding="utf-8")

        def replace(match: re.Match) -> str:
            expected = render_block(match["spec"])
            if match["body"] != expected:
                differing.append(f"{file.relative_to(ROOT)}: {match['spec']}")
            return match.group(1) + expected + match.group(4)

        updated = BLOCK.sub(replace, text)
        if write and updated != text:
            file.write_text(updated, encoding="utf-8")
    return differing


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--check", action="store_true", help="exit 1 if any block or stored summary differs")
    mode.add_argument("--write", action="store_true", help="rewrite the blocks from the JSON")
    options = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    differing = process(write=options.write)
    problems = stored_summaries_mismatches()
    for line in problems + ([] if options.write else [f"{line}: differs from its JSON" for line in differing]):
        print(line, file=sys.stderr)
    if options.write:
        print(f"rewrote {len(differing)} block(s)", file=sys.stderr)
    return 1 if problems or (differing and not options.write) else 0


if __name__ == "__main__":
    sys.exit(main())
