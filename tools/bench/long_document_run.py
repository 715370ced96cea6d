"""One question about a long PDF (20-30k tokens) with the 32k built-in model, as a user runs it: `snapkv ask`.

Writes the PDF (``tools/bench/make_long_document.py``: real prose, one planted fact in the middle), runs
``snapkv ask ... --json`` on it in a fresh process with the command line's default method (no ``--method``) and stores that report
(answer, timings, KV sizes, peak memory) and the default's bench label with where it ran, for ``docs/benchmarks.md``::

    .venv/bin/python -m tools.bench.long_document_run --pages 44 --out docs/results/long_document.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
from pathlib import Path

from tools.bench import make_long_document


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pages", type=int, default=44, help="logical pages (44: about 24k tokens for gemma3-270m)")
    parser.add_argument("--model", default="gemma3-270m")
    parser.add_argument("--budget", type=int, default=1024)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    from snapkv_cli.bench.grid import default_label
    from snapkv_cli.bench.provenance import provenance, run_start, write_result

    document = make_long_document
    with tempfile.TemporaryDirectory() as folder:
        pdf = Path(folder) / f"long-{args.pages}.pdf"
        document.write_long_pdf(pdf, args.pages)
        command = ["snapkv", "ask", str(pdf), document.QUESTION, "--model", args.model,
                   "--budget", str(args.budget), "--json"]
        start = run_start()
        finished = subprocess.run(command, capture_output=True, text=True, check=True)
    report = json.loads(finished.stdout)
    shown = " ".join(command[:2] + [f"long-{args.pages}.pdf", json.dumps(document.QUESTION)] + command[4:])
    write_result(args.out, "long_document", args, provenance(None, start), ask_command=shown, method=default_label(),
                 fact=document.FACT,
                 report=report)
    print(report["answer"])


if __name__ == "__main__":
    main()
