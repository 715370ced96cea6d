"""Ask the README's quickstart question and keep the answer's report, from which the README's sample report is drawn
(``tools.docs.tables`` ``report-panel``), so the panel shown there is a real run's, with its machine and commit.

    .venv/bin/python -m tools.docs.quickstart_report          # -> docs/results/quickstart.json
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
from pathlib import Path

from tools import ROOT

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


if __name__ == "__main__":
    main()
