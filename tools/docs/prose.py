"""How the docs' generated parts write what the JSON holds: a table, a ratio with its spread, an interval, a
commit, a machine, a method's name; and the provenance table of any run."""

from __future__ import annotations

import json

from tools import ROOT

DOCS = ROOT / "docs"


def load(name: str) -> dict:
    return json.loads((DOCS / name).read_text(encoding="utf-8"))


def table(rows) -> str:
    from snapkv_cli.bench.render import markdown_table

    return markdown_table(*rows)


def method_name(label: str) -> str:
    """A bench label as the docs' prose names it."""
    return {DEFAULT_METHOD: "the default method", "snapkv": "SnapKV"}.get(label, label)


def provenance(*paths: str) -> str:
    """Per JSON: the command that wrote it, its commit, when it ran, the machine and libraries, the load around it."""
    rows = []
    for path in paths:
        source = load(path)["provenance"]
        machine = source["machine"]
        rows.append([f"`{path}`", f"`{source['command']}`", commit(source),
                     f"{source['started'][:16].replace('T', ' ')} to {source['finished'][11:16]}",
                     f"{machine['cpus']} ({machine['cpu']})", f"{machine['torch']} ({machine['torch_threads']})",
                     machine["transformers"],
                     f"{source['load_average_before'][0]:.1f} / {source['load_average_after'][0]:.1f}"])
    return table((["JSON", "command", "commit", "ran (UTC)", "CPUs", "torch (threads)", "transformers",
                    "load average before / after"], rows))


def report_label(report: dict) -> str:
    """A benchmark's method as its JSON records it (a bench label; none recorded: SnapKV, which those runs used)."""
    return report.get("method") or "snapkv"


def method_ran(report: dict) -> str:
    """A benchmark's method (:func:`report_label`), said as the CLI's default method where it still is."""
    from snapkv_cli.bench.grid import default_label

    label = report_label(report)
    return (f"the CLI's default method, `{label}`" if label == default_label() else
            "SnapKV (`--method snapkv`)" if label == "snapkv" else f"`{label}`")


DEFAULT_METHOD = "defensivekv+uniformheads+causalpool"  # the CLI's default method, as the bench labels it


def check_default_label() -> None:
    """The facts that speak of "the default method" read its bench label: it must still be what the CLI runs."""
    from snapkv_cli import defaults
    from snapkv_cli.bench.grid import parse_label

    assert parse_label(DEFAULT_METHOD) == (defaults.METHOD, defaults.METHOD_SETTINGS), \
        f"{DEFAULT_METHOD} is no longer the CLI's default method: rerun its benchmarks or relabel these rows"


def times(value: float) -> str:
    return f"{value:.2f}x"


def change(value: float) -> str:
    """A ratio as the percentage it adds or takes away (1.196 -> +19.6%)."""
    return f"{100 * (value - 1):+.1f}%"


def iqr(spread: dict, percent: bool = False) -> str:
    """The interquartile range of a paired ratio (``percent``: of an overhead, already a fraction)."""
    if percent:
        return f"{100 * spread['q1']:+.1f}% to {100 * spread['q3']:+.1f}%"
    return f"{spread['q1']:.2f}-{spread['q3']:.2f}x"


def median_text(spread: dict, percent: bool = False) -> str:
    """The median of a paired ratio (``percent``: of an overhead, already a fraction)."""
    return f"{100 * spread['median']:+.1f}%" if percent else times(spread["median"])


def ratio(spread: dict, percent: bool = False) -> str:
    """A paired ratio's median with its interquartile range: ``2.22x (interquartile range 2.14-2.85x)``."""
    return f"{median_text(spread, percent)} (interquartile range {iqr(spread, percent)})"


def ratio_facts(name: str, spread: dict, percent: bool = False) -> dict[str, str]:
    """A ratio's facts: the median with its range (``name``), the median alone and the range alone."""
    return {name: ratio(spread, percent), f"{name}-median": median_text(spread, percent),
            f"{name}-range": iqr(spread, percent)}


def interval(interval: tuple[float, float] | None) -> str:
    """A Wilson 95% interval of a share: ``95% CI 77-97%``."""
    return "-" if interval is None else f"95% CI {100 * interval[0]:.0f}-{100 * interval[1]:.0f}%"


def commit(source: dict) -> str:
    """The commit a JSON's provenance records (marked where the tree had uncommitted changes)."""
    git = source["git"]
    return f"`{(git.get('commit') or 'unknown')[:10]}`" + (" (uncommitted changes)" if git.get("dirty") else "")


def commits(paths: tuple[str, ...]) -> str:
    """The commits the JSONs ran at, in the order of their runs (marked where the tree had uncommitted changes)."""
    runs = sorted((load(path)["provenance"] for path in paths), key=lambda source: source["started"])
    commits = list(dict.fromkeys(commit(source) for source in runs))
    if len(commits) <= 2:
        return ", ".join(commits)
    return f"{len(commits)} commits, {commits[0]} to {commits[-1]}"


def native_bf16(features: list[str]) -> list[str]:
    """The vector features, of those a run lists, with which its CPU computes bfloat16 natively."""
    return [name for name in features if name.lower() in ("avx512_bf16", "amx_bf16")]


def bf16_text(features: list[str]) -> str:
    """Whether a run's CPU computes bfloat16 natively, from the vector features it lists."""
    native = native_bf16(features)
    return f"native bfloat16 ({', '.join(native)})" if native else "no native bfloat16"


def machine_facts(source: dict, features: list[str] | None = None) -> dict[str, str]:
    """Where a run ran, as the user docs say it: its CPUs, vector features, bfloat16, torch and threads, the load
    average before and after, the commit, and all of the CPU in words (``host``: ``2-core AMD EPYC (AVX2 and FMA; no
    native bfloat16)``). ``features``: the vector features where the provenance predates listing them (as a peer
    reported them)."""
    machine = source["machine"]
    listed = machine["cpu_features"] if features is None else features
    names = [name.upper() for name in listed]
    named = " and ".join([", ".join(names[:-1]), names[-1]] if len(names) > 1 else names) or "no AVX2"
    return {"cpus": str(machine["cpus"]), "features": named, "bf16": bf16_text(listed),
            "host": f"{machine['cpus']}-core {machine['cpu']} ({named}; "
                    f"{'native' if native_bf16(listed) else 'no native'} bfloat16)",
            "torch": machine["torch"], "threads": str(machine["torch_threads"]),
            "load-before": f"{source['load_average_before'][0]:.1f}",
            "load-after": f"{source['load_average_after'][0]:.1f}", "commit": commit(source)}


def span(low: float, high: float) -> str:
    """A range of ratios: ``1.08-4.04x``, or one value where both ends round alike."""
    return times(low) if f"{low:.2f}" == f"{high:.2f}" else f"{low:.2f}-{high:.2f}x"


TABLES = {"provenance": provenance}
