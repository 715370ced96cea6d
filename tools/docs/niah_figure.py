"""The headline NIAH figure from a ``snapkv bench niah --json`` result: full, SnapKV 1024, SnapKV 256 and the best
other method (:func:`snapkv_cli.bench.niah.best_other`), side by side.

    .venv/bin/python -m tools.docs.niah_figure docs/results/niah/niah.json docs/results/niah/niah_headline.png
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from snapkv_cli.bench.niah import best_other, outcomes_from_json
from snapkv_cli.bench.niah_render import niah_heatmap


def main(source: str, target: str) -> int:
    report = json.loads(Path(source).read_text(encoding="utf-8"))
    outcomes = outcomes_from_json(report)
    best = best_other(outcomes)
    panels = [("full", None), ("snapkv", 1024), ("snapkv", 256), (best.method, best.budget)]
    with open(target, "wb") as file:
        niah_heatmap(outcomes, file, panels=panels,
                     title=f"Needle In A Haystack, {report['provenance']['model']['name']} (best other method: "
                           f"{best.method} {best.budget})")
    print(f"best other method: {best.method} {best.budget} ({best.exact}/{best.total} exact, "
          f"partial {best.partial:.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
