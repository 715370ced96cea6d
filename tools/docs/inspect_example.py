"""The guide's example of ``snapkv inspect``: its HTML page and PNG heatmap, written by a real run of the command on
the quickstart's document and question, and the page's screenshot (Debian's ``chromium``, headless), kept in step
with the views that draw them.

    .venv/bin/python -m tools.docs.inspect_example          # docs/inspect_example.html, its PNGs and its record
    .venv/bin/python -m tools.docs.inspect_example --check  # exit 1 if the views changed since the files were written

A run's timings differ from the last one's, so the files cannot be compared with a new run byte for byte. What the
check compares instead is the source of everything that draws them (``VIEWS``): its digest is recorded with the run
(``docs/inspect_example.json``), and a change to any of those files makes the check fail until the example is
written again. ``python -m tools.docs.tables --check`` runs this check with the docs' others.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shlex
import subprocess
import sys
from pathlib import Path

from tools import ROOT
from tools.docs.quickstart_report import DOCUMENT, QUESTION

PAGE = ROOT / "docs" / "inspect_example.html"
HEATMAP = ROOT / "docs" / "inspect_heatmap.png"
SCREENSHOT = ROOT / "docs" / "inspect_html.png"
RECORD = ROOT / "docs" / "inspect_example.json"
# What the page and the heatmap are drawn from: the views, the inspection they show and the report in the page.
VIEWS = tuple(ROOT / "snapkv_cli" / name for name in (
    "views/html.py", "views/inspect.html", "views/heatmap.py", "views/units.py", "answering/inspection.py",
    "answering/report.py"))
FIND = "Lindqvist"  # the chief executive's name in the example document (examples/make_examples.py)


def views_digest(files=VIEWS, root: Path = ROOT) -> str:
    """SHA-256 over the files that draw the example, each named by its path in the repository (``root``)."""
    digest = hashlib.sha256()
    for file in files:
        digest.update(file.relative_to(root).as_posix().encode() + b"\0" + file.read_bytes() + b"\0")
    return digest.hexdigest()


def drift(files=VIEWS, root: Path = ROOT, record: Path = RECORD) -> list[str]:
    """Why the committed example no longer shows what the views draw (nothing: it does)."""
    if not record.is_file():
        return [f"{record.relative_to(ROOT)}: missing (run python -m tools.docs.inspect_example)"]
    written = json.loads(record.read_text(encoding="utf-8"))["views_sha256"]
    if written != views_digest(files, root):
        return [f"{PAGE.relative_to(ROOT)}: the views changed since it was written "
                f"(run python -m tools.docs.inspect_example)"]
    return []


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the views changed since the last run")
    args = parser.parse_args()
    if args.check:
        problems = drift()
        for line in problems:
            print(line, file=sys.stderr)
        return 1 if problems else 0
    from snapkv_cli.bench.provenance import provenance, run_start

    start = run_start()
    snapkv = str(Path(sys.executable).parent / "snapkv")
    command = [snapkv, "inspect", DOCUMENT, QUESTION, "--find", FIND,
               "--html", str(PAGE.relative_to(ROOT)), "--png", str(HEATMAP.relative_to(ROOT)), "--quiet", "--json"]
    subprocess.run(command, capture_output=True, text=True, check=True, cwd=ROOT)
    subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                    "--disable-background-networking", "--disable-component-update", "--disable-sync",
                    "--hide-scrollbars", "--window-size=1200,900", "--virtual-time-budget=3000",
                    f"--screenshot={SCREENSHOT}", PAGE.as_uri()], capture_output=True, check=True)
    record = {"command": shlex.join(["snapkv", *command[1:-1]]), "views_sha256": views_digest(),
              "provenance": provenance(None, start)}
    RECORD.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    written = ", ".join(str(path.relative_to(ROOT)) for path in (PAGE, HEATMAP, SCREENSHOT, RECORD))
    print(f"wrote {written}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
