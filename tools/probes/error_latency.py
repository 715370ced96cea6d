"""Time from ``snapkv ask`` with a bad input to its ``Error:`` line, in fresh processes.

    .venv/bin/python -m tools.probes.error_latency --rounds 7

Bad inputs a user makes (a missing file, a directory, two bad option values, a page range the PDF does not have,
a model name that is no model), plus ``snapkv --help`` as the floor (the interpreter, typer and rich, no command
run). Each runs in a new process (``python -m snapkv_cli``, as the console script does), with its stdout and stderr
captured; the wall time is from the start of the process to its exit, which comes right after the ``Error:`` line
(``PYTHONPATH=<another checkout>`` times that checkout instead). The inputs take
turns round after round, so a busy machine slows them alike; the median and the spread (min-max) of the rounds are
printed, and whether the run imported torch (``-X importtime`` in one extra run of each).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tools import ROOT

REPORT = ROOT / "examples" / "annual_report.pdf"
NOTES = ROOT / "examples" / "field_notes.txt"


def cases(scratch: Path) -> dict[str, list[str]]:
    """Name -> the arguments of ``snapkv``."""
    return {
        "--help (floor)": ["--help"],
        "missing file": ["ask", str(scratch / "no-such-report.pdf"), "Who audits it?"],
        "a directory": ["ask", str(scratch), "Who audits it?"],
        "--budget abc": ["ask", str(NOTES), "Who repaired the fog signal?", "--budget", "abc"],
        "--truncate sideways": ["ask", str(NOTES), "Who repaired the fog signal?", "--truncate", "sideways"],
        "--pages 40-50 (PDF)": ["ask", str(REPORT), "Who audits it?", "--pages", "40-50"],
        "--model smollm2x-typo": ["ask", str(NOTES), "Who repaired the fog signal?", "--model", "smollm2x-typo"],
    }


def run_once(arguments: list[str], folder: Path) -> tuple[float, str]:
    """Seconds to exit, and the first line of stderr (stdout for --help); run in ``folder`` (so that ``-m`` finds the
    installed package, not one in the current directory)."""
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "snapkv_cli", *arguments], capture_output=True, text=True,
                          cwd=folder)
    seconds = time.perf_counter() - started
    text = done.stderr if done.stderr.strip() else done.stdout
    first = next((line for line in text.splitlines() if line.strip()), "")
    return seconds, first


def imports_torch(arguments: list[str], folder: Path) -> bool:
    """Whether the run imports torch (checked in a separate, untimed run)."""
    command = [sys.executable, "-X", "importtime", "-m", "snapkv_cli", *arguments]
    done = subprocess.run(command, capture_output=True, text=True, cwd=folder)
    return any(line.split("|")[-1].strip() == "torch" for line in done.stderr.splitlines()
               if line.startswith("import time:"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7, help="Runs of each input (default 7).")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        scratch = Path(folder)
        named = cases(scratch)
        times: dict[str, list[float]] = {name: [] for name in named}
        lines: dict[str, str] = {}
        run_once(["--version"], scratch)  # a first run warms the file cache; not counted
        for _ in range(args.rounds):
            for name, arguments in named.items():
                seconds, lines[name] = run_once(arguments, scratch)
                times[name].append(seconds)
        torch = {name: imports_torch(arguments, scratch) for name, arguments in named.items()}
    width = max(map(len, named))
    print(f"{'input':<{width}}  median   min-max        torch  first line of output ({args.rounds} rounds)")
    for name in named:
        values = times[name]
        print(f"{name:<{width}}  {statistics.median(values):5.2f} s  {min(values):.2f}-{max(values):.2f} s"
              f"   {'yes' if torch[name] else 'no ':<5}  {lines[name][:100]}")


if __name__ == "__main__":
    main()
