"""``snapkv ask --json`` and ``snapkv inspect --json`` over combinations of options on a tiny model, written to a file
and compared later: a change that should only move code must leave every answer and every report as it was.

    .venv/bin/python -m tools.cli_snapshot --write /tmp/cli_before.json   # on the code before the change
    .venv/bin/python -m tools.cli_snapshot --compare /tmp/cli_before.json  # on the code after it

The commands run in this process through Typer's ``CliRunner`` on the tiny Llama of ``tests/tiny_models.py`` (saved
as a model directory), on a text file, a Markdown file, an HTML file, a PDF and stdin. What varies from run to run
(timings, memory, paths of temporary files) is left out; everything else, stdout as parsed JSON and the exit code
and first stderr line of a refused command, must be equal.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VARYING = ("timings", "memory", "seconds")  # what differs from run to run (a prefix's build time is "seconds")
PROSE = ("The harbour office opened in 1987 and moved twice. Its first director was Ines Marlowe, who kept the "
         "ledgers by hand. The code of the north gate is 4471. Ships from Bergen arrive on Tuesdays. ")

OPTIONS = [
    [],
    ["--method", "snapkv", "--budget", "48"],
    ["--method", "snapkv", "--budget", "48", "--kernel", "7", "--pooling", "avgpool", "--gqa", "max"],
    ["--method", "adakv", "--budget", "40"],
    ["--method", "pyramidkv", "--budget", "64"],
    ["--method", "criticalkv", "--budget", "48"],
    ["--method", "streamingllm", "--budget", "40"],
    ["--method", "defensivekv", "--budget", "56"],
    ["--method", "h2o", "--budget", "48"],
    ["--method", "tova", "--budget", "48"],
    ["--method", "chunkkv", "--budget", "48"],
    ["--method", "random", "--budget", "48", "--seed", "3"],
    ["--method", "full"],
    ["--budget", "40", "--window", "8"],
    ["--max-new-tokens", "3"],
    ["--temperature", "0.7", "--seed", "5"],
    ["--prefill-chunk", "50"],
    ["--no-stop-on-repeat", "--max-new-tokens", "12"],
    ["--truncate", "start", "--max-new-tokens", "4"],
]
REFUSED = [
    ["--budget", "0"],
    ["--method", "nosuch"],
    ["--max-new-tokens", "-1"],
    ["--pages", "9"],
]


def scrub(value):
    """``value`` without what varies between runs."""
    if isinstance(value, dict):
        return {key: scrub(item) for key, item in value.items() if key not in VARYING}
    if isinstance(value, list):
        return [scrub(item) for item in value]
    return value


def documents(folder: Path) -> dict[str, Path]:
    from tests.example_writer import make_examples

    text = PROSE * 6
    files = {"txt": folder / "notes.txt", "md": folder / "notes.md", "html": folder / "notes.html",
             "pdf": folder / "notes.pdf"}
    files["txt"].write_text(text, encoding="utf-8")
    files["md"].write_text("# Harbour\n\n" + text.replace(". ", ".\n\n", 3), encoding="utf-8")
    files["html"].write_text(f"<html><body><h1>Harbour</h1><p>{text}</p><script>x=1</script></body></html>",
                             encoding="utf-8")
    files["pdf"].write_bytes(make_examples.pdf_bytes([PROSE * 2, PROSE * 2, PROSE * 2]))
    return files


def run(runner, app, args: list[str], folder: Path, stdin: str | None = None) -> dict:
    result = runner.invoke(app, args, input=stdin)
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    outcome = {"exit_code": result.exit_code, "stdout": scrub(lines) if lines else result.stdout,
               "error": result.stderr if result.exit_code else None}
    return json.loads(json.dumps(outcome).replace(str(folder), "SCRATCH"))


def snapshot() -> dict:
    import torch
    from typer.testing import CliRunner

    sys.path.insert(0, str(ROOT))
    from snapkv_cli.cli import app
    from tests.tiny_models import save_tiny_model_dir

    torch.set_num_threads(1)
    runner = CliRunner()
    result = {}
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        model = str(save_tiny_model_dir(folder / "model"))
        files = documents(folder)
        base = ["--model", model, "--json", "--quiet", "--max-new-tokens", "6"]
        question = "What is the code of the north gate?"
        txt = str(files["txt"])

        def cli(*args: str, stdin: str | None = None) -> dict:
            return run(runner, app, [*args, *base], folder, stdin)

        for options in OPTIONS:
            key = " ".join(options) or "(defaults)"
            result[f"ask txt {key}"] = cli("ask", txt, question, *options)
            result[f"inspect txt {key}"] = cli("inspect", txt, question, *options)
        for kind in ("md", "html", "pdf"):
            result[f"ask {kind}"] = cli("ask", str(files[kind]), question)
        result["ask pdf pages"] = cli("ask", str(files["pdf"]), question, "--pages", "2-3")
        result["ask stdin"] = cli("ask", "-", question, stdin=PROSE * 4)
        result["ask two questions"] = cli("ask", txt, "-Q", question, "-Q", "Who was the first director?")
        result["inspect find"] = cli("inspect", txt, question, "--find", "4471")
        for options in REFUSED:
            result[f"refused {' '.join(options)}"] = cli("ask", txt, question, *options)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--write", type=Path)
    group.add_argument("--compare", type=Path)
    args = parser.parse_args()
    result = snapshot()
    if args.write:
        args.write.write_text(json.dumps(result, indent=1, sort_keys=True))
        print(f"{len(result)} commands written to {args.write}")
        return 0
    before = json.loads(args.compare.read_text())
    after = json.loads(json.dumps(result))
    differences = [key for key in sorted(set(before) | set(after)) if before.get(key) != after.get(key)]
    print(f"{len(after)} commands, {len(differences)} differ")
    for key in differences[:50]:
        print(f"{key}:\n  before {json.dumps(before.get(key))[:400]}\n  after  {json.dumps(after.get(key))[:400]}")
    return 1 if differences else 0


if __name__ == "__main__":
    sys.exit(main())
