"""Benchmark: 20 documents x 3 questions with the default model and the default method, three ways.

1. loop: a shell loop of ``snapkv ask DOC -Q q1 -Q q2 -Q q3 --json``, one process per document (each pays Python
   start-up, imports and the model load, then prefills its document once for its three questions);
2. batch: one ``snapkv batch FOLDER -Q q1 -Q q2 -Q q3 --output FILE`` process (the model loads once);
3. ray: the same with ``--ray --workers 2`` (a local Ray started by the command, two actors with one model each).

Each way is timed from start to exit. Every document is about ``--tokens`` prompt tokens of Python-documentation
prose with three facts of its own (a depot's shipment code, its manager, its delivery day) at 20%, 50% and 80% of
its depth; the questions ask for them. Per-question times: wall time / 60, and from the JSON reports the time a
worker spent on each answer (its share of the document's prefill, its own prefill, decoding).

Usage (from the repository root; writes nothing outside a temporary directory unless --out is given):

    flock /tmp/snapkv-heavy.lock .venv/bin/python -m tools.bench.batch_bench [--documents 20] [--tokens 1500]
        [--threads N] [--out docs/batch_bench.json]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tools import ROOT
from tools.docs import prose

SNAPKV = Path(sys.executable).parent / "snapkv"
QUESTIONS = ["What is the shipment code of the depot?", "Who is the manager of the depot?",
             "On which day of the week do deliveries arrive at the depot?"]
DEPOTS = ("Harrow Quay", "Saltmarsh Gate", "Ferncliff", "Bramble Yard", "Otterburn", "Kestrel Point", "Marlow End",
          "Ashby Wharf", "Linton Cross", "Wexcombe", "Dunmore Basin", "Carrick Hythe", "Thornfield", "Elder Reach",
          "Pennock Mill", "Rowan Sidings", "Hallam Steps", "Garth Ferry", "Iverley", "Norcott Pier")
MANAGERS = ("Marta Lindqvist", "Duncan Hale", "Agnes Tolland", "Priya Raman", "Tomas Kral", "Ines Duarte",
            "Owen Pryce", "Leila Haddad", "Henrik Sand", "Aoife Byrne", "Kenji Mori", "Sofia Berg", "Ruth Okafor",
            "Pavel Novak", "Clara Vidal", "Emeka Obi", "Nora Fitz", "Yusuf Aydin", "Greta Holm", "Samir Nasser")
DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
MAX_NEW_TOKENS = 32


def build_documents(tokenizer, count: int, tokens: int) -> list[tuple[str, list[str]]]:
    """``count`` documents (text, expected answers) of about ``tokens`` tokens each."""
    from snapkv_cli.bench.haystack import haystack

    documents = []
    for number in range(count):
        rng = random.Random(1000 + number)
        depot, manager, day = DEPOTS[number % len(DEPOTS)], MANAGERS[number % len(MANAGERS)], rng.choice(DAYS)
        code = f"{rng.randrange(10, 100)}-{rng.randrange(1000, 10000)}"
        facts = [f"The shipment code of the {depot} depot is {code}.",
                 f"The manager of the {depot} depot is {manager}.",
                 f"Deliveries arrive at the {depot} depot every {day}."]
        used = sum(len(tokenizer(fact)["input_ids"]) for fact in facts) + 120  # the template and a question
        paragraphs = []
        for paragraph in haystack(200, seed=number):
            count_tokens = len(tokenizer(paragraph + "\n\n")["input_ids"])
            if used + count_tokens > tokens:
                break
            paragraphs.append(paragraph)
            used += count_tokens
        for fact, depth in zip(reversed(facts), (0.8, 0.5, 0.2)):
            paragraphs.insert(round(len(paragraphs) * depth), fact)
        documents.append(("\n\n".join(paragraphs) + "\n", [code, manager.split()[-1], day]))
    return documents


def timed(command: str, env: dict) -> tuple[float, str]:
    started = time.perf_counter()
    result = subprocess.run(["bash", "-c", command], capture_output=True, text=True, env=env, cwd=ROOT)
    seconds = time.perf_counter() - started
    if result.returncode != 0:
        raise SystemExit(f"failed ({result.returncode}): {command}\n{result.stderr[-3000:]}")
    return seconds, result.stderr


def answer_s(line: dict) -> float:
    timings = line["timings"]
    return timings["prefix_s"] + timings["prefill_s"] + timings["decode_s"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--documents", type=int, default=20)
    parser.add_argument("--tokens", type=int, default=1500, help="document length in prompt tokens (default 1500)")
    parser.add_argument("--threads", type=int, default=None,
                        help="OMP_NUM_THREADS for the loop and the one-process batch (default: torch's own choice; "
                             "Ray gives each actor its share of the CPUs)")
    parser.add_argument("--out", type=Path, default=None, help="also write the results as JSON here")
    options = parser.parse_args()

    from snapkv_cli.bench.grid import default_label, parse_label
    from snapkv_cli.bench.provenance import provenance, run_start
    from snapkv_cli.models.loader import load_model

    start = run_start()
    loaded = load_model(device="cpu")
    method, overrides = parse_label(default_label())
    tokenizer = loaded.tokenizer
    env = {name: value for name, value in os.environ.items() if not name.startswith(("SNAPKV_", "RAY_"))}
    env["SNAPKV_DEVICE"] = "cpu"
    if options.threads:
        env["OMP_NUM_THREADS"] = str(options.threads)
    results: dict = {"load_average_before": os.getloadavg(), "method": default_label(), "documents": options.documents,
                     "threads": options.threads or "default",
                     "questions": QUESTIONS, "max_new_tokens": MAX_NEW_TOKENS, "cpus": os.cpu_count()}
    with tempfile.TemporaryDirectory() as folder:
        corpus = Path(folder) / "corpus"
        corpus.mkdir()
        expected = {}
        for number, (text, answers) in enumerate(build_documents(tokenizer, options.documents, options.tokens)):
            path = corpus / f"depot{number:02d}.txt"
            path.write_text(text, encoding="utf-8")
            expected[str(path)] = answers
        asked = " ".join(f"-Q {shlex.quote(question)}" for question in QUESTIONS)
        common = f"--max-new-tokens {MAX_NEW_TOKENS}"  # no --method: the command line's default, as users run it
        out = {name: Path(folder) / f"{name}.jsonl" for name in ("loop", "batch", "ray")}
        commands = {
            "loop": f"for doc in {corpus}/*.txt; do {SNAPKV} ask \"$doc\" {asked} {common} --json --quiet; done "
                    f"> {out['loop']}",
            "batch": f"{SNAPKV} batch {corpus} {asked} {common} --output {out['batch']}",
            "ray": f"env -u OMP_NUM_THREADS {SNAPKV} batch {corpus} {asked} {common} --ray --workers 2 "
                   f"--output {out['ray']}",
        }
        lines, walls, summaries = {}, {}, {}
        for name, command in commands.items():
            walls[name], stderr = timed(command, env)
            summaries[name] = stderr[stderr.find("snapkv batch"):].strip() if name != "loop" else ""
            rows = [json.loads(line) for line in out[name].read_text().splitlines()]
            assert len(rows) == 3 * options.documents and not any("error" in row for row in rows), name
            assert all(row["method"] == method and all(row["settings"][key] == overrides[key] for key in overrides)
                       for row in rows), name  # the default method ran, with the settings it comes with
            lines[name] = {(row["document"], row["question"]): row for row in rows}
            print(f"{name}: {walls[name]:.1f} s", file=sys.stderr, flush=True)

        keys = sorted(lines["loop"])
        questions = len(keys)
        answers = {name: [lines[name][key]["answer"] for key in keys] for name in commands}
        correct = {name: sum(expected[key[0]][QUESTIONS.index(key[1])].lower() in answer.lower()
                             for key, answer in zip(keys, answers[name])) for name in commands}
        results.update({
            "commands": {name: command.replace(folder, "$TMP") for name, command in commands.items()},
            "prompt_tokens_mean": round(sum(row["prompt_tokens"] for row in lines["loop"].values()) / questions, 1),
            "wall_s": {name: round(seconds, 1) for name, seconds in walls.items()},
            "wall_per_question_s": {name: round(seconds / questions, 2) for name, seconds in walls.items()},
            "answer_s_mean": {name: round(sum(answer_s(row) for row in lines[name].values()) / questions, 2)
                              for name in commands},
            "speedup_vs_loop": {name: round(walls["loop"] / seconds, 2) for name, seconds in walls.items()},
            "same_answers_as_loop": {name: sum(a == b for a, b in zip(answers["loop"], answers[name]))
                                     for name in ("batch", "ray")},
            "correct": correct,
            "summaries": summaries,
        })
    results["load_average_after"] = os.getloadavg()
    results["provenance"] = provenance(loaded, start)
    text = json.dumps(results, indent=2, ensure_ascii=False)
    print(text)
    if options.out:
        options.out.write_text(text + "\n", encoding="utf-8")


# -- the docs' tables and facts from this run's JSON (tools.docs.tables) -----------------------------------------------

def batch_table(path: str) -> str:
    """docs/batch.md's table: the three ways' wall times, per question, a worker's time per answer, the speed-ups."""
    report = prose.load(path)
    wall, answer = report["wall_s"], report["answer_s_mean"]
    questions = report["documents"] * len(report["questions"])
    labels = {"loop": f"shell loop of `snapkv ask -Q x{len(report['questions'])}`, {report['documents']} processes",
              "batch": "`snapkv batch`, one process", "ray": "`snapkv batch --ray --workers 2`"}
    rows = []
    for name, label in labels.items():
        speedup = f"{wall['loop'] / wall[name]:.2f}x"
        if name == "ray":
            speedup += f" ({wall['batch'] / wall['ray']:.2f}x over one process)"
        rows.append([label, f"{wall[name]:.1f} s", f"{wall[name] / questions:.2f} s", f"{answer[name]:.2f} s",
                     "1x" if name == "loop" else f"**{speedup}**"])
    return prose.table((["way", "wall time", f"per question (wall / {questions})", "a worker's time per answer",
                         "speed-up"], rows))


def batch_facts(path: str) -> dict[str, str]:
    """``py``: the three ways' wall times and speed-ups, and how many answers agree with the loop's."""
    report = prose.load(path)
    wall, same, correct = report["wall_s"], report["same_answers_as_loop"], report["correct"]
    questions = report["documents"] * len(report["questions"])
    return {
        "questions-per-document": str(len(report["questions"])), "documents": str(report["documents"]),
        "questions": str(questions), "method": prose.method_ran(report),
        "loop": f"{wall['loop']:.0f} s", "batch": f"{wall['batch']:.0f} s", "ray": f"{wall['ray']:.0f} s",
        "batch-speedup": f"{wall['loop'] / wall['batch']:.1f}x", "ray-speedup": f"{wall['loop'] / wall['ray']:.1f}x",
        "same-batch": f"{same['batch']}/{questions}", "same-ray": f"{same['ray']}/{questions}",
        "right-loop": str(correct["loop"]), "right-batch": str(correct["batch"]), "right-ray": str(correct["ray"]),
    }


TABLES = {"batch-table": batch_table}
FACTS = {"batch": batch_facts}


if __name__ == "__main__":
    main()
