"""Regenerate, or check, every benchmark table and every number in the docs' sentences from the committed raw JSON:
the registry of every run's tables and facts, and the substitution of the docs' markers.

The tables and facts live beside the run that writes their JSON: each module of ``OWNERS`` (a bench, a probe, the
usage doc, the table of methods) declares ``TABLES`` (generators) and ``FACTS`` (facts functions) by the name the
markers use, and ``CHECKS`` (its kind of JSON's stored summaries against their recomputation); a name is declared by
one owner only. How they write numbers is :mod:`tools.docs.prose`.

Tables are blocks in the Markdown files::

    <!-- generated: speed-table results/speed.json -->
    ...whatever this script wrote...
    <!-- end generated -->

The first word names a generator of ``GENERATORS``, the rest its arguments (paths relative to ``docs/``).

The sentences are written in the Markdown; a number in one is an inline value, on one line::

    decode is <!-- value: speed.decode-vs-plain results/speed.json 8192 1024 -->2.22x (...)<!-- end --> that of ...

``speed.decode-vs-plain`` names a facts function of ``FACTS`` (``speed``) and the fact it returns
(``decode-vs-plain``); the rest are the function's arguments. ``--write`` rewrites the text between the markers,
``--check`` fails where it differs, as for blocks.

Each generator and facts function recomputes its numbers from the raw records of the JSON (accuracy ``outcomes``,
speed ``samples``), never from the summaries stored beside them; ``--check`` also checks those stored summaries
against the recomputation. A block or value whose JSON is not committed yet says so in words (:func:`not_run`),
never with numbers from an older run.

    .venv/bin/python -m tools.docs.tables --write   # after a new run: rewrite the blocks
    .venv/bin/python -m tools.docs.tables --check   # exit 1 and list every block or summary that differs

``tests/test_docs_tables.py`` runs the check, so a table that no longer follows from its JSON fails the tests.
"""

from __future__ import annotations

import argparse
import json
import re
import sys

from tools import ROOT
from tools.bench import (
    accuracy,
    batch_bench,
    default_rule,
    dtype_accuracy,
    inspect_find,
    long_cost_bench,
    long_document_run,
    long_memory_bench,
    methods_timing,
    multi_question_bench,
    mutation,
    niah,
    prefill_bench,
    selection_cost,
    serve_bench,
    speed,
)
from tools.bench.peers import llamacpp_bench, peers_bench
from tools.docs import inspect_example, methods_table, prose, quickstart_report, usage_doc
from tools.probes import selection_threads
from tools.probes.decode import compiled_step, kernels, lm_head, step_profile, step_variants, weight_dtypes
from tools.probes.decode import speed as decode_speed

FILES = (prose.DOCS / "benchmarks.md", ROOT / "README.md",
         *(prose.DOCS / name for name in ("guide.md", "usage.md", "methods.md", "multi_question.md", "peers.md",
                                          "batch.md", "testing.md")),
         *sorted((prose.DOCS / "decisions").glob("*.md")))
BLOCK = re.compile(r"^(?P<start>(?P<indent>[ \t]*)<!-- generated: (?P<spec>[^>]*?) -->\n)(?P<body>.*?)"
                   r"^(?P<end>(?P=indent)<!-- end generated -->)", re.S | re.M)
VALUE = re.compile(r"(?P<start><!-- value: (?P<spec>[^>]*?) -->)(?P<body>[^<\n]*)(?P<end><!-- end -->)")






# -- the registry: every run's module owns its tables and facts (``TABLES``, ``FACTS``), and the stored summaries of
# its kind of JSON (``CHECKS``), and a file written by a run that its sources can leave behind (``drift()``); a name is
# declared once across them -----------------------------------------------

OWNERS = (prose, methods_table, quickstart_report, usage_doc, inspect_example,
          accuracy, speed, niah, inspect_find, multi_question_bench, batch_bench, serve_bench, long_memory_bench,
          long_cost_bench, long_document_run, methods_timing, selection_cost, prefill_bench, default_rule,
          dtype_accuracy, mutation, peers_bench, llamacpp_bench,
          decode_speed, weight_dtypes, kernels, step_profile, step_variants, compiled_step, selection_threads,
          lm_head)


def _registry(attribute: str) -> dict:
    """One of the owners' dictionaries merged, refusing a name that two owners declare."""
    merged: dict = {}
    for owner in OWNERS:
        for name, function in getattr(owner, attribute, {}).items():
            if name in merged:
                raise ValueError(f"{attribute} {name!r}: declared by {owner.__name__} and another owner")
            merged[name] = function
    return merged


GENERATORS = _registry("TABLES")
FACTS = _registry("FACTS")
CHECKS = _registry("CHECKS")
DRIFTS = tuple(owner.drift for owner in OWNERS if hasattr(owner, "drift"))


def specs(text: str) -> list[str]:
    """Every block's and every inline value's spec in a Markdown text."""
    return [match["spec"] for pattern in (BLOCK, VALUE) for match in pattern.finditer(text)]


# Generators that take several JSONs and can show the ones committed so far (the missing ones named below them).
PARTIAL = {"accuracy-table", "accuracy-by-length", "prompt-ranges", "provenance"}


def _is_data(argument: str) -> bool:
    """A JSON file or a folder of them (relative to ``docs/``), not a length, budget or option."""
    return argument.endswith(".json") or argument.startswith("results/")


def _committed(argument: str) -> bool:
    path = prose.DOCS / argument
    return path.is_file() if argument.endswith(".json") else any(path.glob("*.json"))


def not_run(missing: list[str], partial: bool = False) -> str:
    """What a block says while its run has not been done: no numbers, the JSON it waits for (``partial``: the numbers
    above it come from the JSONs that are committed)."""
    names = ", ".join(f"`{name}`" for name in missing)
    one = len(missing) == 1
    what = "the numbers above come only from the JSON that is" if partial else "so there are no numbers here"
    return (f"*Not run yet: {names} {'is' if one else 'are'} not committed, {what}. The commands above (all in "
            f"`tools/bench/run_benchmarks.sh`) write {'it' if one else 'them'}; `python -m tools.docs.tables "
            f"--write` then fills this in.*\n")


def render_block(spec: str) -> str:
    """The block's Markdown from the committed JSON; where a JSON is missing, :func:`not_run` says so (a generator
    of several JSONs shows those committed, then names the missing ones)."""
    name, *arguments = spec.split()
    missing = [argument for argument in arguments if _is_data(argument) and not _committed(argument)]
    if not missing:
        return GENERATORS[name](*arguments)
    present = [argument for argument in arguments if argument not in missing]
    if name in PARTIAL and any(_is_data(argument) for argument in present):
        return GENERATORS[name](*present) + "\n" + not_run(missing, partial=True)
    return not_run(missing)


def render_value(spec: str, computed: dict) -> str:
    """An inline value's text from the committed JSON (``computed``: the facts already computed, by function and
    arguments); where a JSON is missing, says so."""
    name, *arguments = spec.split()
    function, fact = name.split(".", 1)
    if not all(_committed(argument) for argument in arguments if _is_data(argument)):
        return "*not run yet*"
    key = (function, *arguments)
    if key not in computed:
        computed[key] = FACTS[function](*arguments)
    if fact not in computed[key]:
        raise KeyError(f"{spec}: {function} has no fact {fact!r} (it has {', '.join(computed[key])})")
    return computed[key][fact]


# The schema versions a results JSON of each kind may have (2 for any kind not named): the peers bench's rows record
# their method and settings from version 3 on, and its readers still take version 2's rows (as the SnapKV they ran).
SCHEMA_VERSIONS = {"peers": (2, 3)}


def stored_summaries_mismatches() -> list[str]:
    """Every JSON's stored summaries against a recomputation from its raw records (its kind's owner's ``CHECKS``)."""
    problems = []
    for path in sorted(prose.DOCS.glob("results/**/*.json")):
        if path.parent.name == "mutation":  # tools/bench/mutation.py's results: counts of mutants, no bench summaries
            continue
        report = json.loads(path.read_text(encoding="utf-8"))
        if path.parent.name == "inspect":  # `snapkv inspect --json` (its own schema, version 1), no bench summaries
            if report.get("schema_version") != 1:
                problems.append(f"{path.relative_to(ROOT)}: inspect schema_version {report.get('schema_version')}")
            continue
        versions = SCHEMA_VERSIONS.get(report.get("kind"), (2,))
        if report.get("schema_version") not in versions:
            problems.append(f"{path.relative_to(ROOT)}: schema_version {report.get('schema_version')}, not "
                            f"{' or '.join(map(str, versions))}")
            continue
        check = CHECKS.get(report["kind"])
        problem = check(report) if check else None
        if problem:
            problems.append(f"{path.relative_to(ROOT)}: {problem}")
    return problems


def drifted() -> list[str]:
    """Every file written by a run that no longer matches the sources that drew it (each owner's ``drift()``)."""
    return [problem for drift in DRIFTS for problem in drift()]


def process(write: bool) -> list[str]:
    """Rewrite (``write``) or compare every generated block and inline value; returns those that differed."""
    differing = []
    computed: dict = {}
    for file in FILES:
        text = file.read_text(encoding="utf-8")

        def replace(match: re.Match, render, label: str, name: str = str(file.relative_to(ROOT))) -> str:
            expected = render(match["spec"])
            if match["body"] != expected:
                differing.append(f"{name}: {label}{match['spec']}")
            return match["start"] + expected + match["end"]

        updated = BLOCK.sub(lambda match: replace(match, render_block, ""), text)
        updated = VALUE.sub(lambda match: replace(match, lambda spec: render_value(spec, computed), "value "), updated)
        if write and updated != text:
            file.write_text(updated, encoding="utf-8")
    return differing


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--check", action="store_true",
                      help="exit 1 if any block, stored summary or file written by a run differs")
    mode.add_argument("--write", action="store_true", help="rewrite the blocks from the JSON")
    options = parser.parse_args()
    differing = process(write=options.write)
    problems = stored_summaries_mismatches() + drifted()  # a drifted file needs its run again: --write cannot fix it
    for line in problems + ([] if options.write else [f"{line}: differs from its JSON" for line in differing]):
        print(line, file=sys.stderr)
    if options.write:
        print(f"rewrote {len(differing)} block(s)", file=sys.stderr)
    return 1 if problems or (differing and not options.write) else 0


if __name__ == "__main__":
    sys.exit(main())
