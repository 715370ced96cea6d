"""Write a long multi-page PDF of real prose with one planted fact, for long-document runs
(tools/bench/long_document_run.py).

The prose is the benchmark haystack (paragraphs of Python's own documentation topics, no download); the fact is a
paragraph in the middle of page ``--fact-page``. Deterministic for given arguments.

Usage::

    .venv/bin/python -m tools.bench.make_long_document --pages 40 --out /tmp/long.pdf
"""

from __future__ import annotations

import argparse
from pathlib import Path

FACT = "The secret ingredient of the lighthouse keeper's stew is smoked juniper."
QUESTION = "What is the secret ingredient of the lighthouse keeper's stew?"


def pdf_writer():
    from examples import make_examples

    return make_examples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pages", type=int, default=40)
    parser.add_argument("--paragraphs-per-page", type=int, default=6)
    parser.add_argument("--fact-page", type=int, default=None, help="default: the middle page")
    parser.add_argument("--seed", type=int, default=14)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    fact_page = write_long_pdf(args.out, args.pages, args.paragraphs_per_page, args.fact_page, args.seed)
    print(f"{args.out}: {args.pages} logical pages, the fact on page {fact_page}; ask: {QUESTION}")


def write_long_pdf(out: Path, pages: int, paragraphs_per_page: int = 6, fact_page: int | None = None,
                   seed: int = 14) -> int:
    """Write the PDF to ``out``; return the page holding :data:`FACT` (default: the middle one)."""
    from snapkv_cli.bench.haystack import pages_of_prose

    fact_page = fact_page or (pages + 1) // 2
    texts = pages_of_prose(pages, paragraphs_per_page, FACT, fact_page, seed)
    out.write_bytes(pdf_writer().pdf_bytes(texts, title="Long notes", footer="page {page}"))
    return fact_page


if __name__ == "__main__":
    main()
