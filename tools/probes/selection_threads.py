"""The selection step's thread choice, checked on the default model's captured layers: on an idle CPU and with
one-thread jobs busy beside it.

    .venv/bin/python -m tools.probes.selection_threads --length 8192 --threads 2 --rounds 3 \\
        --out docs/results/selection_threads.json

One process loads the default model, prefills ``--length`` tokens of prose with the full cache and keeps what each
layer's compression step receives (``tools.bench.selection_cost.capturing_prefill``). Then, ``--rounds`` times, with the
CPU idle and then with ``--busy`` one-thread busy loops beside it (started before the replay, stopped after), it
replays the default method's selection over every layer (``tools.bench.selection_cost.replay_selection``: the code the
cache times as ``selection_s``) three ways: forced onto one thread, forced onto the caller's threads, and as the
cache chooses (:class:`snapkv_cli.engine.threads.SelectionThreads`: a trial on the first layers, then the faster).
Every replay must keep the positions the first one kept.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

from tools.docs import prose

MODES = {"one thread": False, "caller's threads": True, "chosen": None}  # the choice forced (None: the cache's own)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--length", type=int, default=8192)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--busy", type=int, default=2, help="one-thread busy loops beside the loaded replays")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    from snapkv_cli.bench.provenance import provenance, run_start, write_result

    start = run_start()
    import torch

    from snapkv_cli.bench.grid import MethodGrid, default_label
    from snapkv_cli.bench.speed import prose_ids
    from snapkv_cli.engine import prepare
    from snapkv_cli.engine.threads import SelectionThreads

    from .selection_cost import _load, capturing_prefill, replay_selection

    loaded = _load("float32", args.threads)
    prepare(loaded.model)
    ids = prose_ids(loaded.tokenizer, args.length)
    grid = MethodGrid()
    runs, first = [], None
    with torch.inference_mode():
        full, _ = capturing_prefill(loaded.model, ids, grid.settings("full", None), capture=True)
        settings = grid.settings(default_label(), 1024)
        for round_index in range(args.rounds):
            for busy in (0, args.busy):
                loops = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(busy)]
                try:
                    time.sleep(0.5)
                    for mode, use_caller in MODES.items():
                        chooser = SelectionThreads()
                        chooser.use_caller = use_caller  # decided beforehand, or (None) by its own trial
                        seconds, kept = replay_selection(full.captured, settings, chooser)
                        first = first or kept
                        runs.append({"round": round_index, "busy_jobs": busy, "mode": mode,
                                     "selection_s": round(seconds, 3),
                                     "ran_on": "caller's threads" if chooser.use_caller else "one thread",
                                     "trial_s": {"one thread": round(chooser.seconds[False], 3),
                                                 "caller's threads": round(chooser.seconds[True], 3)},
                                     "same_kept": all(torch.equal(a, b) for a, b in zip(first, kept, strict=True))})
                        print(f"round {round_index + 1}, {busy} busy: {mode} {seconds:.2f} s "
                              f"(ran on {runs[-1]['ran_on']})", flush=True)
                finally:
                    for loop in loops:
                        loop.kill()
                        loop.wait()
    if args.out:
        write_result(args.out, "selection_threads", args, provenance(loaded, start), runs=runs)


# -- the docs' tables and facts from this run's JSON (tools.docs.tables) -----------------------------------------------

def selection_threads_table(path: str) -> str:
    """The default method's whole selection step per way of choosing its threads,
    idle and with busy jobs beside it: seconds per round, what it ran on, and whether it kept the same positions."""
    report = prose.load(path)
    cells: dict[tuple[int, str], list[dict]] = {}
    for run in report["runs"]:
        cells.setdefault((run["busy_jobs"], run["mode"]), []).append(run)
    rows = [[f"{busy} busy one-thread jobs" if busy else "idle", mode,
             ", ".join(f"{run['selection_s']:.2f}" for run in runs),
             ", ".join(sorted({run["ran_on"] for run in runs})),
             "yes" if all(run["same_kept"] for run in runs) else "no"]
            for (busy, mode), runs in cells.items()]
    return prose.table((["CPU", "threads", "seconds, each round", "ran on", "same kept positions"], rows))


TABLES = {"selection-threads": selection_threads_table}


if __name__ == "__main__":
    main()
