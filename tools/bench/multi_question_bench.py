"""Benchmark: five questions about one 8k-token document with the default model and method, three ways.

1. separate: five ``snapkv ask DOC QUESTION --json`` runs (each reads the whole document);
2. multi: one ``snapkv ask DOC --questions FILE --json`` run (the document's prefix is prefilled once);
3. cached: the same multi-question run with ``--cache-docs``, first on an empty document cache (it stores the
   prefix), then again (it loads the prefix from disk instead of prefilling it).

Every run is a fresh ``snapkv`` process with the command line's default method (no ``--method``), timed from start
to exit (model loading included), and every run's answers must be the same. Per-question times come from the JSON
reports: a cold question costs its whole prefill plus decoding; a cached question costs its share of loading the
prefix, the question's prefill and decoding.

``--dtype-check`` also measures, in this process, what storing the prefix in float16 instead of the model's float32
would change: file size, kept positions and answers.

Usage (from the repository root; writes nothing outside a temporary directory unless --out is given):

    .venv/bin/python -m tools.bench.multi_question_bench [--threads N] [--dtype-check] [--out results.json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tools import ROOT
from tools.docs import prose

QUESTIONS = [
    "What is the coastguard code of Skerrow Point Light?",
    "How many steps are there from the door of the tower to the lamp room?",
    "What is the name of the relief boat?",
    "Who is the skipper of the relief boat?",
    "How tall is the tower of Skerrow Point Light?",
]
EXPECTED = ["K-4417", "117", "Morven Lass", "Callum Fraser", "31"]
MAX_NEW_TOKENS = 32


def build_document(tokenizer, target_tokens: int) -> str:
    """The example field notes in the middle of Python-documentation prose, about ``target_tokens`` tokens."""
    from snapkv_cli.bench.haystack import haystack

    notes = (ROOT / "examples" / "field_notes.txt").read_text(encoding="utf-8")
    paragraphs = haystack(400, seed=7)
    before, after, used = [], [], len(tokenizer(notes)["input_ids"])
    for index, paragraph in enumerate(paragraphs):
        count = len(tokenizer(paragraph + "\n\n")["input_ids"])
        if used + count > target_tokens:
            break
        (before if index % 2 == 0 else after).append(paragraph)
        used += count
    return "\n\n".join(before + [notes.strip()] + after) + "\n"


def snapkv(*args: str, env: dict) -> tuple[float, list[dict]]:
    started = time.perf_counter()
    result = subprocess.run([sys.executable, "-m", "snapkv_cli", "ask", *args, "--json", "--quiet",
                             "--max-new-tokens", str(MAX_NEW_TOKENS)],
                            capture_output=True, text=True, env=env, cwd=ROOT)
    seconds = time.perf_counter() - started
    if result.returncode != 0:
        raise SystemExit(f"snapkv failed: {result.stderr}")
    return seconds, [json.loads(line) for line in result.stdout.splitlines()]


def compute_s(report: dict) -> float:
    timings = report["timings"]
    return timings.get("prefix_s", 0.0) + timings["prefill_s"] + timings["decode_s"]


def dtype_check(document_path: Path, cli_answers: list[str]) -> dict:
    """Answers and kept positions from the prefix as stored in float32 vs rounded through float16.

    The document is read by the CLI's own loader (which strips the file's trailing newline, as ``snapkv ask`` does),
    so the float32 answers here are the CLI's answers: the result says whether they are (``float32_matches_cli``).
    """
    import torch

    from snapkv_cli.answering import session as pipeline
    from snapkv_cli.answering.documents import load_document
    from snapkv_cli.answering.prompting import load_template
    from snapkv_cli.defaults import CLI_DEFAULTS, METHOD, METHOD_SETTINGS
    from snapkv_cli.engine import CompressionSettings
    from snapkv_cli.generation import GenerationOptions
    from snapkv_cli.models.loader import load_model

    loaded = load_model(device="cpu")
    document = load_document(str(document_path))
    settings = CompressionSettings(**CLI_DEFAULTS, method=METHOD, **METHOD_SETTINGS)  # what `snapkv ask` runs
    session = pipeline.DocumentSession(loaded, document, settings, load_template(),
                                       generation=GenerationOptions(max_new_tokens=MAX_NEW_TOKENS))
    exact = [session.ask(question) for question in QUESTIONS]
    prefix = session.prefix.cache
    bytes32 = sum(layer.keys.numel() * 4 * 2 for layer in prefix.layers)
    with torch.inference_mode():
        for index, layer in enumerate(prefix.layers):  # round the stored prefix through float16, in place
            layer.keys.copy_(layer.keys.half().float())
            layer.values.copy_(layer.values.half().float())
            pending = prefix.pending[index]
            pending.window_queries = pending.window_queries.half().float()
    rounded = [session.ask(question) for question in QUESTIONS]
    same_sets = total_sets = 0
    kept_overlap = []
    for first, second in zip(exact, rounded):
        for layer, record in first.result.cache.records.items():
            other = second.result.cache.records[layer].kept_positions
            for head in range(record.kept_positions.shape[1]):
                a, b = set(record.kept_positions[0, head].tolist()), set(other[0, head].tolist())
                same_sets += a == b
                total_sets += 1
                kept_overlap.append(len(a & b) / len(a))
    return {
        "prefix_tokens": session.prefix.ids.__len__(),
        "prefix_kv_bytes_float32": bytes32,
        "prefix_kv_bytes_float16": bytes32 // 2,
        "identical_kept_sets": f"{same_sets}/{total_sets}",
        "mean_kept_overlap": round(sum(kept_overlap) / len(kept_overlap), 5),
        "min_kept_overlap": round(min(kept_overlap), 5),
        "same_answers": sum(a.result.answer == b.result.answer for a, b in zip(exact, rounded)),
        "float32_matches_cli": [a.result.answer for a in exact] == cli_answers,
        "answers_float32": [a.result.answer for a in exact],
        "answers_float16": [b.result.answer for b in rounded],
        "max_abs_score_difference": max(
            float((r.scores - b.result.cache.records[layer].scores).abs().max())
            for a, b in zip(exact, rounded) for layer, r in a.result.cache.records.items() if r.scores is not None),
        "torch_threads": torch.get_num_threads(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=7900, help="document length in tokens (default 7900)")
    parser.add_argument("--threads", type=int, default=None, help="OMP_NUM_THREADS for every run")
    parser.add_argument("--dtype-check", action="store_true")
    parser.add_argument("--out", type=Path, default=None, help="also write the results as JSON here")
    options = parser.parse_args()

    from snapkv_cli.models.loader import load_model

    tokenizer = load_model(device="cpu").tokenizer
    env = dict(os.environ)
    for name in ("SNAPKV_CACHE_DOCS", "SNAPKV_DOC_CACHE_MB", "SNAPKV_MODEL", "SNAPKV_DEVICE"):
        env.pop(name, None)
    env["SNAPKV_DEVICE"] = "cpu"
    if options.threads:
        env["OMP_NUM_THREADS"] = str(options.threads)
        import torch

        torch.set_num_threads(options.threads)
    from snapkv_cli.bench.grid import default_label, parse_label
    from snapkv_cli.bench.provenance import run_start

    method, overrides = parse_label(default_label())
    results: dict = {**run_start(), "command": " ".join(["python", *sys.argv]), "method": default_label(),
                     "threads": options.threads or "default", "max_new_tokens": MAX_NEW_TOKENS}
    with tempfile.TemporaryDirectory() as folder:
        document_text = build_document(tokenizer, options.tokens)
        document = Path(folder) / "report.txt"
        document.write_text(document_text, encoding="utf-8")
        questions = Path(folder) / "questions.txt"
        questions.write_text("\n".join(QUESTIONS) + "\n", encoding="utf-8")
        env["SNAPKV_DOC_CACHE_DIR"] = str(Path(folder) / "doc-cache")

        separate = [snapkv(str(document), question, env=env) for question in QUESTIONS]
        multi = snapkv(str(document), "--questions", str(questions), "--no-cache-docs", env=env)
        store = snapkv(str(document), "--questions", str(questions), "--cache-docs", env=env)
        hit = snapkv(str(document), "--questions", str(questions), "--cache-docs", env=env)

        reports = {
            "separate": [lines[0] for _, lines in separate],
            "multi": multi[1], "cached_store": store[1], "cached_hit": hit[1],
        }
        assert all(r["method"] == method and all(r["settings"][key] == overrides[key] for key in overrides)
                   for rows in reports.values() for r in rows), "not the default method"
        answers = {name: [r["answer"] for r in rows] for name, rows in reports.items()}
        assert len({json.dumps(a) for a in answers.values()}) == 1, answers
        kept = {name: [r["layers"] for r in rows] for name, rows in reports.items()}
        assert len({json.dumps(k) for k in kept.values()}) == 1, "kept tokens per layer differ"
        assert [r["doc_cache"]["status"] for r in hit[1]] == ["hit"] * len(QUESTIONS)
        assert [r["doc_cache"]["status"] for r in store[1]] == ["stored"] * len(QUESTIONS)

        cold = [compute_s(r) for r in reports["separate"]]
        cached = [compute_s(r) for r in reports["cached_hit"]]
        separate_total = sum(seconds for seconds, _ in separate)
        results.update({
            "prompt_tokens": reports["separate"][0]["prompt_tokens"],
            "prefix_tokens": reports["multi"][0]["prefix"]["tokens"],
            "doc_cache_bytes": reports["cached_hit"][0]["doc_cache"]["bytes"],
            "answers": answers["separate"],
            "correct": [expected in answer for expected, answer in zip(EXPECTED, answers["separate"])],
            "wall_s": {"separate_total": round(separate_total, 2),
                       "separate_each": [round(seconds, 2) for seconds, _ in separate],
                       "multi": round(multi[0], 2), "cached_first_run": round(store[0], 2),
                       "cached_second_run": round(hit[0], 2)},
            "speedup_multi_vs_separate": round(separate_total / multi[0], 2),
            "speedup_cached_vs_separate": round(separate_total / hit[0], 2),
            "per_question_s": {
                "cold": [round(s, 2) for s in cold],
                "cached": [round(s, 2) for s in cached],
                "cached_prefix_load_s": reports["cached_hit"][0]["timings"]["prefix_s"],
                "multi_prefix_prefill_s": reports["multi"][0]["timings"]["prefix_s"],
                "cold_over_cached": [round(c / h, 1) for c, h in zip(cold, cached)],
            },
        })
        if options.dtype_check:
            results["dtype_check"] = dtype_check(document, answers["separate"])
    from snapkv_cli.bench.provenance import load_average, now

    results.update({"finished": now(), "load_average_after": load_average()})
    text = json.dumps(results, indent=2)
    print(text)
    if options.out:
        options.out.write_text(text + "\n", encoding="utf-8")


# -- the docs' tables and facts from this run's JSON (tools.docs.tables) -----------------------------------------------

def multi_question_runs(path: str) -> str:
    """multi_question.md's wall-time table."""
    report = prose.load(path)
    wall = report["wall_s"]
    separate = sum(wall["separate_each"])
    each = ", ".join(f"{seconds:.1f}" for seconds in wall["separate_each"])
    megabytes = report["doc_cache_bytes"] / 1e6
    rows = [
        [f"{len(wall['separate_each'])} separate `snapkv ask DOC QUESTION --json`", f"{separate:.1f} s ({each})", "1x"],
        ["1 `snapkv ask DOC --questions FILE --json`", f"{wall['multi']:.1f} s",
         f"**{separate / wall['multi']:.1f}x**"],
        [f"same with `--cache-docs`, empty cache (prefills and stores {megabytes:.0f} MB)",
         f"{wall['cached_first_run']:.1f} s", f"{separate / wall['cached_first_run']:.1f}x"],
        ["same with `--cache-docs` again (loads the prefix from disk)", f"{wall['cached_second_run']:.1f} s",
         f"**{separate / wall['cached_second_run']:.1f}x**"],
    ]
    return prose.table((["run", "wall time", "speed-up"], rows))


def multi_question_per_question(path: str) -> str:
    """multi_question.md's per-question table (cold separate run vs from the disk cache)."""
    report = prose.load(path)
    times = report["per_question_s"]
    rows = []
    for index, (cold, cached) in enumerate(zip(times["cold"], times["cached"]), start=1):
        label = f"{index} (loads the prefix: {times['cached_prefix_load_s']:.2f} s of it)" if index == 1 else str(index)
        rows.append([label, f"{cold:.1f} s", f"{cached:.1f} s", f"{cold / cached:.1f}x"])
    return prose.table((["question", "cold (separate run)", "from the disk cache", "ratio"], rows))


def multi_question_dtype(path: str) -> str:
    """multi_question.md's float32-vs-float16 table, from ``--dtype-check``."""
    check = prose.load(path)["dtype_check"]
    same, total = (int(part) for part in check["identical_kept_sets"].split("/"))
    answers = len(check["answers_float32"])
    rows = [
        ["prefix file", f"{check['prefix_kv_bytes_float32'] / 1e6:.0f} MB "
                        f"({check['prefix_kv_bytes_float32'] / check['prefix_tokens'] / 1e3:.0f} KB per token)",
         f"{check['prefix_kv_bytes_float16'] / 1e6:.0f} MB"],
        ["kept sets (layer x KV head x question) identical to float32", f"{total}/{total}", f"{same}/{total}"],
        ["kept positions shared with float32, mean / worst head", "100%",
         f"{100 * check['mean_kept_overlap']:.2f}% / {100 * check['min_kept_overlap']:.2f}%"],
        ["selection scores, largest absolute difference", "0", f"{check['max_abs_score_difference']:.4f}"],
        ["answers identical to float32", f"{answers}/{answers}", f"{check['same_answers']}/{answers}"],
        ["float32 answers identical to the CLI's (`snapkv ask`)",
         {True: "yes", False: "no"}.get(check.get("float32_matches_cli"), "not checked"), "-"],
    ]
    return prose.table((["", "float32 (stored as is)", "rounded through float16"], rows))


def multi_question_facts(path: str) -> dict[str, str]:
    """``py``: the run (commit, threads, load), the prompt and its prefix, the wall times of
    separate runs, one multi-question run and the document cache's two runs with their speed-ups, each question
    cold and cached, the answers, and the float16 check (``dtype-...``)."""
    report = prose.load(path)
    git = report.get("git") or {}
    wall, times = report["wall_s"], report["per_question_s"]
    separate = sum(wall["separate_each"])
    ratios = [cold / cached for cold, cached in zip(times["cold"], times["cached"])]
    check = report["dtype_check"]
    same, total = (int(part) for part in check["identical_kept_sets"].split("/"))
    answers = len(check["answers_float32"])
    return {
        "commit": f"`{git['commit'][:10]}`" if git.get("commit") else "a commit the JSON does not record",
        "threads": str(report["threads"]), "max-new-tokens": str(report["max_new_tokens"]),
        "load-before": f"{report['load_average_before'][0]:.1f}",
        "load-after": f"{report['load_average_after'][0]:.1f}",
        "method": prose.method_ran(report),
        "prompt-tokens": f"{report['prompt_tokens']:,}", "prefix-tokens": f"{report['prefix_tokens']:,}",
        "cache-entry": f"{report['doc_cache_bytes'] / 1e6:.0f} MB", "questions": str(len(times["cold"])),
        "separate": f"{separate:.0f} s", "multi": f"{wall['multi']:.0f} s",
        "multi-speedup": f"{separate / wall['multi']:.1f}x", "cached": f"{wall['cached_second_run']:.1f} s",
        "cached-speedup": f"{separate / wall['cached_second_run']:.1f}x",
        "cached-each": f"{min(times['cached']):.0f}-{max(times['cached']):.0f} s",
        "cold-each": f"{min(times['cold']):.0f}-{max(times['cold']):.0f} s",
        "cold-vs-cached": f"{min(ratios):.0f}x to {max(ratios):.0f}x",
        "prefix-prefill": f"{times['multi_prefix_prefill_s']:.1f} s",
        "prefix-load": f"{times['cached_prefix_load_s']:.2f} s",
        "storing": f"{wall['cached_first_run'] - wall['multi']:+.1f} s",
        "right": f"{sum(report['correct'])} of {len(report['correct'])}",
        "dtype-kept-sets-changed": f"{total - same} of {total}",
        "dtype-answers-changed": f"{answers - check['same_answers']} of {answers}",
    }


TABLES = {
    "multi-question-runs": multi_question_runs,
    "multi-question-per-question": multi_question_per_question,
    "multi-question-dtype": multi_question_dtype,
}
FACTS = {"multi-question": multi_question_facts}


if __name__ == "__main__":
    main()
