"""The table of ``snapkv inspect --find`` runs (``tools/bench/run_benchmarks.sh wordsample``): which (layer, KV head)
pairs kept a searched text's tokens."""

from __future__ import annotations

from tools.docs import prose


def inspect_found(*paths: str) -> str:
    """``snapkv inspect --find --answer --json`` runs (cut to a few keys by ``jq``): per run, its settings, answer and
    how many (layer, KV head) pairs kept all, some or none of each searched text's tokens."""
    rows = []
    for path in paths:
        run = prose.load(path)
        settings = run["settings"]
        label = (f"{run['method']}, budget {settings['budget']}, {settings['pooling_window']} pooling"
                 + (", whole words" if settings["whole_words"] else ""))
        for found in run["found"]:
            pairs = found["heads_whole"] + found["heads_part"] + found["heads_none"]
            rows.append([label, f"`{run['answer'].strip()}`", found["text"],
                         f"{found['heads_whole']} / {found['heads_part']} / {found['heads_none']} (of {pairs})"])
    return prose.table((["run", "answer", "text", "KV heads keeping its tokens: all / some / none"], rows))


TABLES = {"inspect-found": inspect_found}
