"""The tables and facts of ``snapkv bench niah`` runs (``tools/bench/run_benchmarks.sh niah``): exact answers per
method, budget, length and depth, and the needles each budget kept."""

from __future__ import annotations

from tools.docs import prose


def niah_table(path: str) -> str:
    """The exact answers per method, budget and length, recomputed from the outcomes (the headline figure beside it
    is drawn from the same JSON by ``tools/docs/niah_figure.py``)."""
    from snapkv_cli.bench.niah import outcomes_from_json
    from snapkv_cli.bench.niah_render import niah_rows

    return prose.table(niah_rows(outcomes_from_json(prose.load(path))))


def niah_kept(path: str) -> str:
    """Exact answers per method, budget and length (as :func:`niah_table`), with the cells the full cache answered
    exactly that each method kept (the needle grid's retention), recomputed from the outcomes."""
    from snapkv_cli.bench.niah import outcomes_from_json
    from snapkv_cli.bench.niah_render import niah_rows

    outcomes = outcomes_from_json(prose.load(path))
    kept, full_exact = _niah_kept(outcomes)
    header, rows = niah_rows(outcomes)
    for row in rows:
        method, budget = row[0], None if row[1] == "-" else int(row[1])
        row.append("-" if budget is None else _kept_text(kept[(method, budget)], full_exact))
    return prose.table(([*header, "full cache's exact cells kept, of those compressed"], rows))


def _niah_kept(outcomes) -> tuple[dict, int]:
    """Per compressed (method, budget): (how many of the cells the full cache answered exactly it answered exactly
    too, how many of those cells it compressed: a prompt no longer than the budget is kept whole, so it cannot lose
    them); and how many cells the full cache answered exactly."""
    full_exact = {(o.length, o.depth) for o in outcomes if o.method == "full" and o.exact}
    kept: dict = {}
    for o in outcomes:
        if o.budget is not None and o.prompt_tokens > o.budget and (o.length, o.depth) in full_exact:
            done, cells = kept.get((o.method, o.budget), (0, 0))
            kept[(o.method, o.budget)] = (done + o.exact, cells + 1)
        elif o.budget is not None:
            kept.setdefault((o.method, o.budget), (0, 0))
    return kept, len(full_exact)


def _kept_text(kept: tuple[int, int], full_exact: int, separator: str = "/") -> str:
    """``13/14`` compressed cells kept, with how many of the full cache's exact cells the budget left whole."""
    done, cells = kept
    whole = full_exact - cells
    return f"{done}{separator}{cells}" + (f" (+{whole} not compressed)" if whole else "")


def niah_answers(*paths: str) -> str:
    """Every Needle In A Haystack cell's answer side by side, per method (where the answers matter more than the
    scores: a model that fails at some lengths), with the prompt's tokens and the seconds of the shared prefill;
    the cells of several runs (each JSON one run) by increasing length."""
    from snapkv_cli.bench.niah import outcomes_from_json

    outcomes = sorted((outcome for path in paths for outcome in outcomes_from_json(prose.load(path))),
                      key=lambda outcome: outcome.length)
    methods = list(dict.fromkeys((o.method, o.budget) for o in outcomes))
    cells: dict[tuple[int, float], dict] = {}
    for outcome in outcomes:
        cells.setdefault((outcome.length, outcome.depth), {})[(outcome.method, outcome.budget)] = outcome

    def shown(outcome) -> str:
        text = " ".join(outcome.answer.split())
        text = text if len(text) <= 70 else text[:69] + "…"
        return f"{'**exact**' if outcome.exact else 'miss'}: {text.replace('|', '/')}"

    rows = []
    for (length, depth), by_method in cells.items():
        first = next(iter(by_method.values()))
        rows.append([f"{length:,}", f"{depth:g}%", f"{first.prompt_tokens:,}", f"{first.prefix_s:.0f}",
                     *(shown(by_method[key]) if key in by_method else "-" for key in methods)])
    header = ["tokens", "depth", "prompt tokens", "document prefill s",
              *(method if budget is None else f"{method} {budget}" for method, budget in methods)]
    return prose.table((header, rows))


def niah_facts(path: str) -> dict[str, str]:
    """A Needle In A Haystack run: its lengths and depths, and per compressed method and budget (the default method
    as ``default``) the full cache's exact cells it answered exactly, of those it compressed (``snapkv-1024-kept``)
    with the interval (``-interval``); the best method besides the full cache and SnapKV (``best-other``)."""
    from snapkv_cli.bench.niah import best_other, outcomes_from_json
    from snapkv_cli.bench.retention import wilson_interval

    outcomes = outcomes_from_json(prose.load(path))
    kept, full_exact = _niah_kept(outcomes)
    lengths = sorted({o.length for o in outcomes})
    best = best_other(outcomes)
    facts = {"lengths": f"{lengths[0] // 1024}k-{lengths[-1] // 1024}k",
             "depths": str(len({o.depth for o in outcomes})), "commit": prose.commits((path,)),
             "best-other": "none" if best is None else
             f"{best.method} {best.budget} ({best.exact}/{best.total} exact, partial {best.partial:.2f})"}
    for (method, budget), cells in kept.items():
        name = "default" if method == prose.DEFAULT_METHOD else method
        facts[f"{name}-{budget}-kept"] = _kept_text(cells, full_exact, " / ")
        facts[f"{name}-{budget}-interval"] = prose.interval(wilson_interval(*cells)) if cells[1] else "-"
    return facts


TABLES = {"niah-table": niah_table, "niah-answers": niah_answers, "niah-kept": niah_kept}
FACTS = {"niah": niah_facts}


def stored_cells(report: dict) -> str | None:
    """A NIAH JSON's stored cells against their recomputation from its outcomes."""
    from snapkv_cli.bench.niah import outcomes_from_json, summary_rows

    outcomes = outcomes_from_json(report)
    if report["cells"] != summary_rows(outcomes) or report["overall"] != summary_rows(outcomes, pooled=True):
        return "stored cells differ from the outcomes"
    return None


CHECKS = {"niah": stored_cells}
