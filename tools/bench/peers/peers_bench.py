"""snapkv-cli against NVIDIA kvpress's SnapKVPress, side by side in one run, on the same prompts (token ids).

    flock /tmp/snapkv-heavy.lock .venv/bin/python -m tools.bench.peers.peers_bench \
        --json docs/results/peers/peers.json --markdown docs/results/peers/peers.md

The prompts are Needle In A Haystack cells (``snapkv bench niah``'s documents and prompt) and ``snapkv bench
accuracy`` samples (its test split's first samples, its template, prompt limit and answer room), built once here
with the model's tokenizer. For each
prompt this process runs snapkv-cli (a fresh prefill per configuration, as ``snapkv ask`` does, so its seconds
compare with kvpress's), then hands the same token ids to ``tools/bench/peers/kvpress_runner.py`` running in kvpress's
own virtual environment (``tools/bench/peers/kvpress_venv.sh``), which returns kvpress's generated token ids. Both are
decoded with the same tokenizer and scored by the bench's own scorers (the NIAH exact/partial score; the task's
exact-set rule, which rejects distractors).

Each row says what it runs (:data:`OURS`, and the runner's labels): ``snapkv-cli snapkv`` is SnapKV at the CLI's
window, kernel and pooling (the one to compare with ``kvpress-ours``, kvpress's SnapKVPress at the same settings),
``snapkv-cli default`` the CLI's default method with the settings it comes with
(:func:`snapkv_cli.bench.grid.default_label`), and ``kvpress-nearest`` kvpress's press nearest to that default (it
has none of the same method). ``--rows`` runs some of them:

    flock /tmp/snapkv-heavy.lock .venv/bin/python -m tools.bench.peers.peers_bench --rows full,default,kvpress-nearest \
        --json docs/results/peers/peers_default.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tools import ROOT
from tools.docs import prose

HERE = Path(__file__).resolve().parent

DEFAULT = None  # in OURS: the CLI's default method (snapkv_cli.bench.grid.default_label()), whatever it is
OURS = (  # --rows key, label, grid method label, overrides of the grid's shared settings (the CLI's otherwise)
    ("snapkv", "snapkv-cli snapkv", "snapkv", {}),
    # kvpress-ours' settings: window 32, kernel 15, average pooling
    ("snapkv-avgpool", "snapkv-cli snapkv avgpool", "snapkv", {"pooling": "avgpool"}),
    ("default", "snapkv-cli default", DEFAULT, {}),
)
FULL = ("full", "snapkv-cli full")
# --rows key -> label of the kvpress runner's rows (its own labels, kvpress_runner.PRESSES, and plain transformers)
PEERS = {"transformers": "transformers (kvpress venv)", "kvpress-default": "kvpress-default",
         "kvpress-ours": "kvpress-ours", "kvpress-nearest": "kvpress-nearest"}
ROWS = (FULL[0], *(key for key, *_ in OURS), *PEERS)
# The rows of the committed SnapKV run (peers.json): the two implementations of SnapKV side by side.
SNAPKV_ROWS = ("full", "snapkv", "snapkv-avgpool", "transformers", "kvpress-default", "kvpress-ours")
# Reports of schema 2 named the SnapKV rows after the tool alone ("snapkv-cli", "snapkv-cli avgpool"): they ran
# method "snapkv" at the CLI's window, kernel and pooling (the driver set it), when SnapKV was the CLI's default.
SCHEMA2_LABELS = {"snapkv-cli": "snapkv-cli snapkv", "snapkv-cli avgpool": "snapkv-cli snapkv avgpool"}


def row_label(report: dict, label: str) -> str:
    """A row's label as this version names it (older reports' SnapKV rows renamed to say they ran SnapKV)."""
    return SCHEMA2_LABELS.get(label, label) if report.get("schema_version", 2) <= 2 else label


def rows_of(report: dict) -> list[dict]:
    """The report's rows, labelled as :func:`row_label` names them."""
    return [{**row, "label": row_label(report, row["label"])} for row in report["rows"]]


def parse_rows(text: str) -> tuple[str, ...]:
    """``--rows``: keys of :data:`ROWS`, comma-separated, in :data:`ROWS`' order."""
    chosen = {part.strip() for part in text.split(",") if part.strip()}
    unknown = chosen - set(ROWS)
    if unknown or not chosen:
        raise argparse.ArgumentTypeError(f"unknown rows {', '.join(sorted(unknown)) or '(none)'}: choose from "
                                         f"{', '.join(ROWS)}")
    return tuple(key for key in ROWS if key in chosen)


def our_settings(key: str, budget: int):
    """(grid method label, CompressionSettings) of one of :data:`OURS` at ``budget``: the bench grid's settings
    (the CLI's window, kernel, pooling and GQA aggregation) for its method label, with the row's overrides."""
    from snapkv_cli.bench.grid import MethodGrid, default_label

    _, _, method, overrides = next(entry for entry in OURS if entry[0] == key)
    method = default_label() if method is DEFAULT else method
    return method, MethodGrid(**overrides).settings(method, budget)


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(",") if part.strip())


def build_prompts(tokenizer, args, context_tokens: int) -> list[dict]:
    """The NIAH cells and the ``bench accuracy`` samples (its test split, seeds, prompt limit and answer room).

    An accuracy prompt carries its ``Task`` (key ``task_object``) so that it is scored by the bench's own scorer.
    """
    from snapkv_cli.answering.documents import Document, Page
    from snapkv_cli.answering.prompting import build_prompt, load_template
    from snapkv_cli.bench.needle import haystack_text, load_haystack, needle_context
    from snapkv_cli.bench.niah import NIAH_QUESTION, NIAH_TEMPLATE
    from snapkv_cli.bench.tasks import NEW_TOKENS, make_tasks

    prompts = []
    niah_lengths = _ints(args.niah_lengths)
    if niah_lengths:
        text = haystack_text(tokenizer, load_haystack(), max(niah_lengths))
        for length in niah_lengths:
            for depth in _ints(args.niah_depths):
                context = needle_context(tokenizer, text, length, depth)
                prompt = build_prompt(tokenizer, Document(f"niah-{length}-{depth}", "text", (Page(1, context.text),)),
                                      NIAH_QUESTION, NIAH_TEMPLATE)
                prompts.append({"id": f"niah-{length}-{depth}", "kind": "niah", "length": length, "depth": depth,
                                "input_ids": prompt.input_ids, "prefix_length": prompt.prefix_length,
                                "max_new_tokens": args.niah_new_tokens})
    template = load_template()
    for length in _ints(args.accuracy_lengths):
        for task_kind in args.accuracy_tasks.split(","):
            new_tokens = args.accuracy_new_tokens or NEW_TOKENS[task_kind]
            tasks = make_tasks(tokenizer, task_kind, length, args.accuracy_samples, template,
                               max_prompt_tokens=context_tokens - new_tokens, split="test")
            for sample, task in enumerate(tasks):
                document = Document(task.seed, "text", (Page(1, task.document),))
                prompt = build_prompt(tokenizer, document, task.question, template)
                prompts.append({"id": f"{task_kind}-{length}-{sample}", "kind": "accuracy", "task": task_kind,
                                "length": length, "sample": sample, "task_object": task,
                                "input_ids": prompt.input_ids, "prefix_length": prompt.prefix_length,
                                "max_new_tokens": new_tokens})
    return prompts


def score(prompt: dict, answer: str) -> dict:
    """The same scorers as ``snapkv bench niah`` and ``snapkv bench accuracy``."""
    if prompt["kind"] == "niah":
        from snapkv_cli.bench.niah import score_answer

        exact, partial = score_answer(answer)
        return {"correct": exact, "partial": round(partial, 4)}
    return {"correct": prompt["task_object"].is_correct(answer), "partial": None}


def start_kvpress(args, model_dir: str) -> subprocess.Popen:
    python = Path(args.kvpress_venv).absolute() / "bin" / "python"  # not resolved: the venv's link is the venv
    if not python.exists():
        sys.exit(f"no kvpress environment at {args.kvpress_venv}: run bash tools/bench/peers/kvpress_venv.sh first")
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.Popen([str(python), str(HERE / "kvpress_runner.py"), model_dir], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, env=env, cwd=tempfile.gettempdir())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=parse_rows, default=SNAPKV_ROWS,
                        help=f"which rows to run, comma-separated, of {', '.join(ROWS)} "
                             f"[{','.join(SNAPKV_ROWS)}: SnapKV's, both implementations]")
    parser.add_argument("--budgets", default="256,1024")
    parser.add_argument("--niah-lengths", default="2048,4096")
    parser.add_argument("--niah-depths", default="0,25,50,75,100")
    parser.add_argument("--niah-new-tokens", type=int, default=48)
    parser.add_argument("--accuracy-lengths", default="2048")
    parser.add_argument("--accuracy-tasks", default="single_needle,multi_key,multi_value,variable_tracking,"
                                                    "question_first")
    parser.add_argument("--accuracy-samples", type=int, default=2)
    parser.add_argument("--accuracy-new-tokens", type=int, default=None,
                        help="answer room of the accuracy samples [each task's own, as bench accuracy]")
    parser.add_argument("--kvpress-venv", default=str(ROOT / ".venv-kvpress"))
    parser.add_argument("--model", default=None, help="snapkv-cli's model argument [the default model]")
    parser.add_argument("--json", dest="json_path", type=Path, required=True)
    parser.add_argument("--markdown", type=Path)
    args = parser.parse_args()

    from snapkv_cli.generation.allocator import return_freed_memory_to_os

    return_freed_memory_to_os()  # as the snapkv command does
    import torch

    from snapkv_cli.answering.session import context_length
    from snapkv_cli.bench.grid import default_label, parse_label
    from snapkv_cli.bench.provenance import provenance, run_start
    from snapkv_cli.engine import CompressionSettings
    from snapkv_cli.generation import GenerationOptions, generate_answer, stop_token_ids
    from snapkv_cli.models.loader import load_model
    from tools.bench.peers.kvpress_runner import NEAREST_TO

    if "kvpress-nearest" in args.rows and parse_label(default_label())[0] != NEAREST_TO:
        sys.exit(f"kvpress-nearest is kvpress's press nearest to {NEAREST_TO}, but the CLI's default is now "
                 f"{default_label()}: choose the press nearest to it in tools/bench/peers/kvpress_runner.py")
    start = run_start()
    loaded = load_model(args.model, device="cpu", dtype="auto")
    model, tokenizer = loaded.model, loaded.tokenizer
    budgets = _ints(args.budgets)
    stops = sorted(stop_token_ids(model, tokenizer))
    prompts = build_prompts(tokenizer, args, context_length(loaded))
    peers = [key for key in args.rows if key in PEERS]
    kvpress = start_kvpress(args, loaded.source) if peers else None
    rows, versions = [], None

    def record(prompt, label, budget, generated_ids, seconds, kept, press=None, method=None, settings=None):
        answer = tokenizer.decode(generated_ids, skip_special_tokens=True).strip()
        rows.append({"prompt": prompt["id"], "kind": prompt["kind"], "task": prompt.get("task", "niah"),
                     "length": prompt["length"], "depth": prompt.get("depth"),
                     "prompt_tokens": len(prompt["input_ids"]), "label": label, "budget": budget, "answer": answer,
                     **score(prompt, answer), "seconds": seconds, "kept_tokens": kept, "press": press,
                     "method": method, "settings": settings})

    for index, prompt in enumerate(prompts):
        ids = prompt["input_ids"]
        configurations = []  # label, grid method label, budget, settings
        if FULL[0] in args.rows:
            configurations.append((FULL[1], "full", None, CompressionSettings(method="full", window_size=32,
                                                                               max_capacity_prompt=33)))
        for budget in budgets:
            for key, label, *_ in OURS:
                if key in args.rows:
                    method, settings = our_settings(key, budget)
                    configurations.append((label, method, budget, settings))
        for label, method, budget, settings in configurations:
            started = time.perf_counter()
            result = generate_answer(model, tokenizer, ids, settings,
                                     GenerationOptions(max_new_tokens=prompt["max_new_tokens"]))
            seconds = round(time.perf_counter() - started, 3)
            kept = result.cache.summary()["tokens_after"] if budget else len(ids)
            record(prompt, label, budget, result.generated_ids, seconds, kept, method=method,
                   settings=dataclasses.asdict(settings) if budget else None)
        if kvpress is None:
            _progress(index, prompts, prompt, rows)
            continue
        request = {"id": prompt["id"], "input_ids": ids, "prefix_length": prompt["prefix_length"],
                   "budgets": [b for b in budgets], "max_new_tokens": prompt["max_new_tokens"], "stop_ids": stops,
                   "labels": peers}
        kvpress.stdin.write(json.dumps(request) + "\n")
        kvpress.stdin.flush()
        reply = kvpress.stdout.readline()
        if not reply:
            sys.exit(f"the kvpress runner stopped (exit code {kvpress.wait()})")
        reply = json.loads(reply)
        if reply["snapkv_cli_loaded"]:
            sys.exit("the kvpress runner had snapkv_cli loaded: its rows would not be kvpress alone")
        versions = reply["versions"]
        for row in reply["rows"]:
            kept = row["kept_max"] if row["kept_min"] == row["kept_max"] else [row["kept_min"], row["kept_max"]]
            record(prompt, PEERS[row["label"]], row["budget"], row["generated_ids"], row["seconds"], kept,
                   row["press"])
        _progress(index, prompts, prompt, rows)
    if kvpress is not None:
        kvpress.stdin.close()
        kvpress.wait()

    arguments = vars(args) | {"json_path": str(args.json_path),
                              "markdown": str(args.markdown) if args.markdown else None}
    report = {"schema_version": 3, "kind": "peers", "command": " ".join(sys.argv), "args": arguments,
              "provenance": provenance(loaded, start),
              "snapkv_cli": {"torch": torch.__version__, "transformers": _version("transformers")},
              "kvpress_environment": versions, "default_label": default_label(), "rows": rows}
    args.json_path.parent.mkdir(parents=True, exist_ok=True)
    args.json_path.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    table = markdown_summary(rows)
    if args.markdown:
        args.markdown.write_text(table, encoding="utf-8")
    print(table)
    return 0


def _progress(index: int, prompts: list[dict], prompt: dict, rows: list[dict]) -> None:
    print(f"[{index + 1}/{len(prompts)}] {prompt['id']}: " + ", ".join(
        f"{r['label']} {r['budget'] or ''} {'ok' if r['correct'] else '-'}" for r in rows
        if r["prompt"] == prompt["id"]), file=sys.stderr, flush=True)


def _version(name: str) -> str:
    from importlib.metadata import version

    return version(name)


def markdown_summary(rows: list[dict]) -> str:
    """One line per (label, budget): NIAH exact and partial, accuracy samples correct, mean seconds per cell."""
    keys = list(dict.fromkeys((r["label"], r["budget"]) for r in rows))
    lines = ["| system | budget | NIAH exact | NIAH partial | accuracy samples | s per NIAH cell | "
             "s per accuracy cell |", "|---|---|---|---|---|---|---|"]
    for label, budget in keys:
        mine = [r for r in rows if (r["label"], r["budget"]) == (label, budget)]
        niah = [r for r in mine if r["kind"] == "niah"]
        accuracy = [r for r in mine if r["kind"] == "accuracy"]

        def mean(values):
            return sum(values) / len(values) if values else float("nan")

        lines.append(f"| {label} | {budget or '-'} | {sum(r['correct'] for r in niah)}/{len(niah)} | "
                     f"{mean([r['partial'] for r in niah]):.2f} | {sum(r['correct'] for r in accuracy)}/{len(accuracy)}"
                     f" | {mean([r['seconds'] for r in niah]):.1f} | {mean([r['seconds'] for r in accuracy]):.1f} |")
    return "\n".join(lines) + "\n"


# -- the docs' tables and facts from this run's JSON (tools.docs.tables) -----------------------------------------------

def _same(rows: list[dict], mine: tuple[str, int | None], theirs: tuple[str, int | None]) -> tuple[int, int, int]:
    """Two configurations (label, budget) on the same prompts: (identical answers, same verdicts, prompts)."""
    by_key = {(row["prompt"], row["label"], row["budget"]): row for row in rows}
    prompts = list(dict.fromkeys(row["prompt"] for row in rows))
    pairs = [(by_key[(p, *mine)], by_key[(p, *theirs)]) for p in prompts]
    return (sum(a["answer"] == b["answer"] for a, b in pairs), sum(a["correct"] == b["correct"] for a, b in pairs),
            len(prompts))


def _peers_agreement(report: dict) -> list[tuple[str, str, int | None, int, int, int]]:
    """snapkv-cli's configurations against their peers on the same prompts: (mine, theirs, budget, identical answers,
    same verdicts, prompts)."""
    rows = rows_of(report)
    budgets = sorted({row["budget"] for row in rows if row["budget"]})
    pairs = [("snapkv-cli full", "transformers (kvpress venv)", None)]
    pairs += [(ours_label, "kvpress-ours", budget) for budget in budgets
              for ours_label in ("snapkv-cli snapkv avgpool", "snapkv-cli snapkv")]
    return [(mine, theirs, budget, *_same(rows, (mine, budget), (theirs, budget))) for mine, theirs, budget in pairs]


def _agreement_table(rows: list[dict], pairs, sides: bool = False) -> str:
    """(mine, theirs) configurations, each (label, budget), compared prompt by prompt (``sides``: also how many
    prompts only one of them answered right)."""
    def name(label: str, budget: int | None) -> str:
        return label + (f" {budget}" if budget else "")

    def right(label: str, budget: int | None) -> set[str]:
        return {row["prompt"] for row in rows if (row["label"], row["budget"]) == (label, budget) and row["correct"]}

    cells = []
    for mine, theirs in pairs:
        answers, verdicts, prompts = _same(rows, mine, theirs)
        cells.append([name(*mine), name(*theirs), f"{answers}/{prompts}", f"{verdicts}/{prompts}"]
                     + ([str(len(right(*mine) - right(*theirs))), str(len(right(*theirs) - right(*mine)))]
                        if sides else []))
    return prose.table((["snapkv-cli", "peer", "identical answers", "same verdict"]
                        + (["right only with snapkv-cli", "right only with the peer"] if sides else []), cells))


def peers_table(path: str) -> str:
    """snapkv-cli against kvpress and plain transformers on the same prompts, per system and budget, recomputed from
    every answer."""
    return markdown_summary(rows_of(prose.load(path)))


def peers_agreement(path: str) -> str:
    """snapkv-cli's configurations against their peers on the same prompts, answer by answer."""
    report = prose.load(path)
    return _agreement_table(rows_of(report), [((mine, budget), (theirs, budget))
                                              for mine, theirs, budget, *_ in _peers_agreement(report)])


def _press_text(press: dict) -> str:
    """A kvpress press as it was built: class(parameters), a wrapped press inside."""
    inner = press.get("press")
    parameters = [f"{name}={value}" for name, value in press.items()
                  if name in ("window_size", "kernel_size", "first_stage_ratio", "epsilon", "alpha_safeguard")]
    return f"`{press['class']}({', '.join(parameters)})`" + (f" around {_press_text(inner)}" if inner else "")


def _held(rows: list[dict], label: str, budget: int, prompts: list[str]) -> int:
    """How many of ``prompts`` (those the full cache answered) ``label`` at ``budget`` answered too."""
    correct = {row["prompt"] for row in rows if (row["label"], row["budget"]) == (label, budget) and row["correct"]}
    return len(correct & set(prompts))


def peers_default_held(path: str) -> str:
    """How many of the full cache's right answers (exact NIAH cells, right accuracy samples) the CLI's default method
    and kvpress's nearest press each kept, per budget."""
    rows = rows_of(prose.load(path))
    budgets = sorted({row["budget"] for row in rows if row["budget"]})
    full_right = [row["prompt"] for row in rows if row["label"] == "snapkv-cli full" and row["correct"]]
    kinds = {row["prompt"]: row["kind"] for row in rows}
    full_niah = [p for p in full_right if kinds[p] == "niah"]
    full_accuracy = [p for p in full_right if kinds[p] == "accuracy"]
    return prose.table((["system", "budget", f"of the full cache's {len(full_niah)} exact NIAH cells",
                         f"of its {len(full_accuracy)} right accuracy samples"],
                        [[label, str(budget), str(_held(rows, label, budget, full_niah)),
                          str(_held(rows, label, budget, full_accuracy))]
                         for budget in budgets for label in ("snapkv-cli default", "kvpress-nearest")]))


def peers_default_agreement(path: str) -> str:
    """The CLI's default method against kvpress's nearest press and the full cache, answer by answer, with the
    prompts only one side answered right."""
    rows = rows_of(prose.load(path))
    budgets = sorted({row["budget"] for row in rows if row["budget"]})
    pairs = [(("snapkv-cli default", budget), (theirs, budget if theirs != "snapkv-cli full" else None))
             for budget in budgets for theirs in ("kvpress-nearest", "snapkv-cli full")]
    return _agreement_table(rows, pairs, sides=True)


def peers_facts(path: str) -> dict[str, str]:
    """The peers bench: both sides' libraries (``torch``, ``kvpress-torch`` ...); snapkv-cli's SnapKV with average
    pooling against kvpress's ``SnapKVPress``, identical answers per budget (``avgpool-256``); where the run has
    them, the CLI's default method's settings (``default``, ``default-settings``) and kvpress's nearest press
    (``nearest``, ``nearest-note``)."""
    report = prose.load(path)
    theirs, ours = report["kvpress_environment"], report["snapkv_cli"]
    facts = {"torch": ours["torch"], "transformers": ours["transformers"], "kvpress": theirs["kvpress"],
             "kvpress-torch": theirs["torch"], "kvpress-transformers": theirs["transformers"],
             "commit": prose.commits((path,))}
    rows = rows_of(report)
    if any(row["label"] == "snapkv-cli snapkv avgpool" for row in rows):
        for mine, _, budget, answers, _, prompts in _peers_agreement(report):
            if mine == "snapkv-cli snapkv avgpool":
                facts[f"avgpool-{budget}"] = f"{answers} / {prompts}"
    default = next((row for row in rows if row["label"] == "snapkv-cli default"), None)
    if default is not None:
        settings = default["settings"]
        facts |= {"default": f"`{default['method']}`",
                  "default-settings": f"{settings['method']}, window {settings['window_size']}, kernel "
                                      f"{settings['kernel_size']}, {settings['pooling']}, {settings['pooling_window']} "
                                      f"pooling window, {settings['head_budgets']} heads"}
    nearest = next((row["press"] for row in rows if row["label"] == "kvpress-nearest"), None)
    if nearest is not None:
        facts |= {"nearest": _press_text(nearest), "nearest-note": nearest["nearest_to_note"]}
    return facts


TABLES = {
    "peers-table": peers_table,
    "peers-agreement": peers_agreement,
    "peers-default-held": peers_default_held,
    "peers-default-agreement": peers_default_agreement,
}
FACTS = {"peers": peers_facts}


if __name__ == "__main__":
    sys.exit(main())
