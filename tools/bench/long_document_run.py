"""One question about a long PDF (20-30k tokens) with the 32k built-in model, as a user runs it: `snapkv ask`.

Writes the PDF (``tools/bench/make_long_document.py``: real prose, one planted fact in the middle), runs
``snapkv ask ... --json`` on it in a fresh process with the command line's default method (no ``--method``) and stores
that report (answer, timings, KV sizes, peak memory) and the default's bench label with where it ran, for
``docs/benchmarks.md``::

    .venv/bin/python -m tools.bench.long_document_run --pages 44 --out docs/results/long_document.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
from pathlib import Path

from tools.bench import make_long_document
from tools.docs import prose


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


# -- the docs' tables and facts from this run's JSON (tools.docs.tables) -----------------------------------------------

def long_document_facts(path: str) -> dict[str, str]:
    """One ``snapkv ask`` about a long PDF, where it ran, its prompt, answer
    (and whether it holds the planted fact), times, cache and memory."""
    result = prose.load(path)
    report, where = result["report"], result["provenance"]
    timings, cache, prompt = report["timings"], report["cache"], report["prompt"]
    found = result["fact"].rstrip(".").split()[-2:]  # "smoked juniper"
    return {
        "command": f"`{result['ask_command']}`", "commit": f"`{where['git']['commit'][:10]}`",
        "started": where["started"][:16], "cpus": str(where["machine"]["cpus"]), "torch": where["machine"]["torch"],
        "load-before": str(where["load_average_before"][0]), "load-after": str(where["load_average_after"][0]),
        "method": prose.method_ran(result), "budget": str(report["settings"]["budget"]),
        "prompt-tokens": f"{report['prompt_tokens']:,}", "document-tokens": f"{prompt['document']:,}",
        "pages": str(len(report["pages"])), "template": f"`{prompt['template_name']}`", "style": prompt["style"],
        "stopped-by": f"`{json.dumps(report['stop']['stopped_by'])}`", "answer": report["answer"].strip(),
        "verdict": "right" if all(word.lower() in report["answer"].lower() for word in found) else "wrong",
        "fact": result["fact"], "load": f"{timings['load_s']:.0f} s", "prefill": f"{timings['prefill_s']:.0f} s",
        "selection": f"{timings['selection_s']:.2f} s", "decode": f"{timings['decode_tokens_per_s']:.1f} tokens/s",
        "kv-before": f"{cache['bytes_before'] / 1e6:.0f} MB", "kv-after": f"{cache['bytes_after'] / 1e6:.1f} MB",
        "sliding": str(sum(layer["sliding_window"] for layer in report["layers"])),
        "layers": str(len(report["layers"])),
        "peak-rss": f"{report['memory']['peak_rss_bytes'] / 2**30:.2f} GiB",
    }

FACTS = {"long-document": long_document_facts}


if __name__ == "__main__":
    main()
