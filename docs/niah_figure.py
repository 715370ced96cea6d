"""The headline NIAH figure from a ``snapkv bench niah --json`` result: full, SnapKV 1024, SnapKV 256 and the best
other method (most exact answers over the grid, then the highest partial score), side by side.

    .venv/bin/python docs/niah_figure.py docs/results/niah/niah.json docs/results/niah/niah_headline.png
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from snapkv_cli.bench.niah import NiahOutcome, summarize_niah
from snapkv_cli.bench.niah_render import niah_heatmap


def _model(report: dict) -> str:
    """The model's name: in the provenance (schema 2), or in the machine record of a schema 1 report."""
    return report["provenance"]["model"]["name"] if "provenance" in report else report["machine"]["model"]


def main(source: str, target: str) -> int:
    report = json.loads(Path(source).read_text(encoding="utf-8"))
    outcomes = [NiahOutcome(**row) for row in report["outcomes"]]
    others = [cell for cell in summarize_niah(outcomes, pooled=True) if cell.method not in ("full", "snapkv")]
    best = max(others, key=lambda cell: (cell.exact, cell.partial_sum, -(cell.budget or 0)))
    panels = [("full", None), ("snapkv", 1024), ("snapkv", 256), (best.method, best.budget)]
    with open(target, "wb") as file:
        niah_heatmap(outcomes, file, panels=panels,
                     title=f"Needle In A Haystack, {_model(report)} (best other method: "
                           f"{best.method} {best.budget})")
    print(f"best other method: {best.method} {best.budget} ({best.exact}/{best.total} exact, "
          f"partial {best.partial:.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
