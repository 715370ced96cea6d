"""Ask the README's quickstart question and keep the answer's report, from which the README's sample report is drawn
(``tools.docs.tables`` ``report-panel``), so the panel shown there is a real run's, with its machine and commit.

    .venv/bin/python -m tools.docs.quickstart_report          # -> docs/results/quickstart.json
"""

from __future__ import annotations

import argparse
import io
import json
import shlex
import subprocess
import sys
from pathlib import Path

from tools import ROOT
from tools.docs import prose

DOCUMENT = "examples/annual_report.pdf"
QUESTION = "Who is the chief executive of Northwind Harbor Logistics?"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "results" / "quickstart.json")
    args = parser.parse_args()
    from snapkv_cli.bench.provenance import provenance, run_start, write_result

    start = run_start()
    command = [str(Path(sys.executable).parent / "snapkv"), "ask", DOCUMENT, QUESTION, "--json", "--quiet"]
    done = subprocess.run(command, capture_output=True, text=True, check=True, cwd=ROOT)
    write_result(args.out, "quickstart", args, provenance(None, start),
                 run=shlex.join(["snapkv", *command[1:]]), report=json.loads(done.stdout))


# -- the docs' tables and facts from this run's JSON (tools.docs.tables) -----------------------------------------------

def report_panel(path: str) -> str:
    """The report panel of a committed answer's JSON (``tools.docs.quickstart_report``), drawn by the CLI's own view
    at 88 columns without colour."""
    from types import SimpleNamespace

    from rich.console import Console

    from snapkv_cli.views.report_panel import render_report

    def namespace(value):
        if isinstance(value, dict):
            return SimpleNamespace(**{key: namespace(item) for key, item in value.items()})
        return [namespace(item) for item in value] if isinstance(value, list) else value

    stored = prose.load(path)
    console = Console(width=88, record=True, color_system=None, force_terminal=False, file=io.StringIO())
    render_report(namespace(stored["report"]), console)
    return f"```\n{console.export_text().rstrip()}\n```\n"


def quickstart_facts(path: str) -> dict[str, str]:
    """The committed answer the README's panel shows: the command, the machine (``host``, ``torch``, ``threads``,
    the load) and the commit it ran at."""
    stored = prose.load(path)
    return {"run": f"`{stored['run']}`", **prose.machine_facts(stored["provenance"])}


TABLES = {"report-panel": report_panel}
FACTS = {"quickstart": quickstart_facts}


if __name__ == "__main__":
    main()
