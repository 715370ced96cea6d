"""Benchmark: ``snapkv serve`` against a cold ``snapkv ask``, and many clients on one server.

1. cold: ``snapkv ask DOC QUESTION --json`` in a fresh process, timed from start to exit (model load included);
2. warm: the same document uploaded to a running ``snapkv serve`` and asked a first question; then, in each of
   ``--rounds`` paired rounds, a cold ask as in 1 and the same question through the documents API, streamed (its
   prefix held in memory): the ratio of their wall times per round, and the warm answer's time to its first text;
3. many clients: ``--clients`` threads, each asking ``--questions`` questions over ``--documents`` documents (each
   client starts at another document), every answer compared with a serial run of the same questions on the same
   server; per-request latency p50/p95, the server's peak resident memory, and the most prefix KV it held at once
   (polled each second) against its ``--keep-mb`` cap.

Every document is the example field notes inside prose (about ``--tokens`` tokens,
:mod:`tools.bench.multi_question_bench`), with the default model and method unless ``--model`` says otherwise.

Usage (from the repository root):

    .venv/bin/python -m tools.bench.serve_bench [--tokens 4096] [--rounds 3] [--clients 8] \
        [--out docs/results/serve/serve_bench.json]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

from snapkv_cli.bench.provenance import provenance, run_start, write_result
from snapkv_cli.doc_cache import DOC_CACHE_ENV
from tools import ROOT
from tools.bench.multi_question_bench import QUESTIONS, build_document
from tools.docs import prose

MAX_NEW_TOKENS = 32


def cold_ask(document: Path, question: str, model: list[str], env: dict) -> tuple[float, dict]:
    started = time.perf_counter()
    result = subprocess.run([sys.executable, "-m", "snapkv_cli", "ask", str(document), question, *model, "--json",
                             "--quiet", "--max-new-tokens", str(MAX_NEW_TOKENS)],
                            capture_output=True, text=True, env=env, cwd=ROOT)
    if result.returncode != 0:
        raise SystemExit(f"snapkv ask failed: {result.stderr}")
    return time.perf_counter() - started, json.loads(result.stdout)


def start_server(model: list[str], env: dict, keep_mb: float) -> tuple[subprocess.Popen, str, float]:
    started = time.perf_counter()
    process = subprocess.Popen([sys.executable, "-m", "snapkv_cli", "serve", "--port", "0", *model,
                                "--max-new-tokens", str(MAX_NEW_TOKENS), "--keep-mb", str(keep_mb),
                                "--queue", "64"], stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    for line in process.stderr:
        found = re.search(r"serves on (http://\S+)", line)
        if found:
            threading.Thread(target=process.stderr.read, daemon=True).start()  # keep its stderr drained
            return process, found.group(1), time.perf_counter() - started
    raise SystemExit(f"snapkv serve did not start (exit {process.wait()})")


def ask_streamed(http: httpx.Client, document_id: str, question: str) -> tuple[float, float, dict]:
    """(wall s, first text s, report) of one question through the documents API."""
    started, first = time.perf_counter(), None
    with http.stream("POST", f"/api/documents/{document_id}/ask", json={"question": question}) as response:
        name, report = None, None
        for line in response.iter_lines():
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: "):
                if name == "text" and first is None:
                    first = time.perf_counter() - started
                elif name == "report":
                    report = json.loads(line[6:])
                elif name == "error":
                    raise SystemExit(f"the server failed: {line[6:]}")
    return time.perf_counter() - started, first, report


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def spread(values: list[float]) -> dict:
    """Median, least and most of ``values`` (a paired round each)."""
    return {"median": round(percentile(values, 0.5), 2), "min": round(min(values), 2), "max": round(max(values), 2)}


class StatusPoller(threading.Thread):
    """``GET /api/status`` each second until stopped: the most prefix KV the server held at once."""

    def __init__(self, url: str):
        super().__init__(daemon=True)
        self.url, self.most_held_bytes, self.stopping = url, 0, threading.Event()

    def run(self) -> None:
        with httpx.Client(base_url=self.url, timeout=60) as http:
            while not self.stopping.wait(1.0):
                held = http.get("/api/status").json()["sessions"]["bytes"]
                self.most_held_bytes = max(self.most_held_bytes, held)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="A --model for snapkv (default: the default model).")
    parser.add_argument("--tokens", type=int, default=4096, help="Tokens per document.")
    parser.add_argument("--rounds", type=int, default=3, help="Paired rounds of a cold ask and a warm question.")
    parser.add_argument("--documents", type=int, default=3)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--questions", type=int, default=5, help="Questions per client.")
    parser.add_argument("--keep-mb", type=float, default=2048)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    start = run_start()
    model = ["--model", args.model] if args.model else []
    env = {name: value for name, value in os.environ.items() if name != DOC_CACHE_ENV}  # no document cache
    from snapkv_cli.models.loader import load_model

    tokenizer = load_model(args.model, device="cpu").tokenizer
    work = Path(tempfile.mkdtemp(prefix="snapkv-serve-bench-"))
    documents = []
    for index in range(args.documents):
        path = work / f"notes{index}.txt"
        text = build_document(tokenizer, args.tokens - 64 * index)  # documents of different lengths
        path.write_text(text, encoding="utf-8")
        documents.append(path)

    process, url, startup_s = start_server(model, env, args.keep_mb)
    try:
        with httpx.Client(base_url=url, timeout=3600) as http:
            model_rss = http.get("/api/status").json()["memory"]["peak_rss_bytes"]
            ids = [http.post(f"/api/documents?name={path.name}", content=path.read_bytes()).json()["id"]
                   for path in documents]
            first_s = ask_streamed(http, ids[0], QUESTIONS[0])[0]
            rounds = []
            for _ in range(args.rounds):
                cold_s, cold = cold_ask(documents[0], QUESTIONS[1], model, env)
                warm_s, ttft_s, warm = ask_streamed(http, ids[0], QUESTIONS[1])
                rounds.append({"cold_s": round(cold_s, 2), "warm_s": round(warm_s, 2),
                               "ratio": round(cold_s / warm_s, 2),
                               "warm_time_to_first_text_s": round(ttft_s, 3), "warm_prefix": warm["prefix"]["source"],
                               "same_answer": warm["answer"] == cold["answer"]})
            serial = {}
            for document in range(args.documents):
                for question in QUESTIONS[:args.questions]:
                    serial[document, question] = ask_streamed(http, ids[document], question)[2]["answer"]
            requests = [[((client + turn) % args.documents, QUESTIONS[turn % len(QUESTIONS)])
                         for turn in range(args.questions)] for client in range(args.clients)]
            latencies, answers = [], []

            def client(asked: list[tuple[int, str]]) -> None:
                with httpx.Client(base_url=url, timeout=3600) as own:
                    for document, question in asked:
                        wall, _, report = ask_streamed(own, ids[document], question)
                        latencies.append(wall)
                        answers.append(((document, question), report["answer"]))

            poller = StatusPoller(url)
            poller.start()
            began = time.perf_counter()
            threads = [threading.Thread(target=client, args=(asked,)) for asked in requests]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            concurrent_s = time.perf_counter() - began
            poller.stopping.set()
            poller.join()
            status = http.get("/api/status").json()
    finally:
        process.terminate()
        process.wait(60)
    result = {
        "document_tokens": cold["prompt"]["document"], "max_new_tokens": MAX_NEW_TOKENS,
        "server": {"startup_s": round(startup_s, 2), "first_question_s": round(first_s, 2),
                   "model_rss_bytes": model_rss},
        "cold_vs_warm": {"question": QUESTIONS[1], "answer": cold["answer"], "rounds": rounds,
                         "cold_s": spread([r["cold_s"] for r in rounds]),
                         "warm_s": spread([r["warm_s"] for r in rounds]),
                         "ratio": spread([r["ratio"] for r in rounds]),
                         "warm_time_to_first_text_s": spread([r["warm_time_to_first_text_s"] for r in rounds]),
                         "same_answers": sum(r["same_answer"] for r in rounds)},
        "concurrent": {"clients": args.clients, "questions_per_client": args.questions,
                       "documents": args.documents, "requests": len(latencies), "wall_s": round(concurrent_s, 2),
                       "p50_s": round(percentile(latencies, 0.5), 2), "p95_s": round(percentile(latencies, 0.95), 2),
                       "answers_as_serial": sum(serial[key] == answer for key, answer in answers),
                       "keep_mb": args.keep_mb, "most_held_prefix_bytes": poller.most_held_bytes,
                       "peak_rss_bytes": status["memory"]["peak_rss_bytes"],
                       "sessions": status["sessions"]},
    }
    print(json.dumps(result, indent=1))
    if args.out:
        write_result(args.out, "serve_bench", args, provenance(None, start), **result)


# -- the docs' tables and facts from this run's JSON (tools.docs.tables) -----------------------------------------------

def serve_table(path: str) -> str:
    """A cold ask against the same question to a running server, per paired round."""
    report = prose.load(path)["cold_vs_warm"]
    rows = [[str(index + 1), f"{run['cold_s']:.1f} s", f"{run['warm_s']:.2f} s", f"{run['ratio']:.1f}x",
             f"{run['warm_time_to_first_text_s']:.2f} s", "yes" if run["same_answer"] else "no"]
            for index, run in enumerate(report["rounds"])]
    return prose.table((["round", "cold `snapkv ask` (model load included)", "the server, prefix held",
                         "less wall time", "server: first text after", "same answer"], rows))


def serve_facts(path: str) -> dict[str, str]:
    """The paired rounds' median ratio and range, and the many-clients run."""
    report = prose.load(path)
    warm, many = report["cold_vs_warm"], report["concurrent"]
    return {
        "tokens": f"{report['document_tokens']:,}", "new-tokens": str(report["max_new_tokens"]),
        "rounds": str(len(warm["rounds"])), "ratio": f"{warm['ratio']['median']:.1f}x",
        "ratio-range": f"{warm['ratio']['min']:.1f}-{warm['ratio']['max']:.1f}x",
        "cold": f"{warm['cold_s']['median']:.1f} s", "warm": f"{warm['warm_s']['median']:.2f} s",
        "first-text": f"{warm['warm_time_to_first_text_s']['median']:.2f} s",
        "startup": f"{report['server']['startup_s']:.1f} s",
        "clients": str(many["clients"]), "questions": str(many["questions_per_client"]),
        "documents": str(many["documents"]), "requests": str(many["requests"]),
        "as-serial": f"{many['answers_as_serial']}/{many['requests']}", "wall": f"{many['wall_s']:.0f} s",
        "p50": f"{many['p50_s']:.1f} s", "p95": f"{many['p95_s']:.1f} s",
        "held": f"{many['most_held_prefix_bytes'] / 2**20:.0f} MiB", "cap": f"{many['keep_mb']:.0f} MiB",
        "rss": f"{many['peak_rss_bytes'] / 2**30:.2f} GiB",
        "model-rss": f"{report['server']['model_rss_bytes'] / 2**30:.2f} GiB",
        "host": prose.machine_facts(report["provenance"])["host"],
    }


TABLES = {"serve-table": serve_table}
FACTS = {"serve": serve_facts}


if __name__ == "__main__":
    main()
