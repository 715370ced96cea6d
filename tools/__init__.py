"""The scripts around the package, in three rooms: ``docs`` (the generated parts of the docs), ``bench`` (the
benchmarks behind the docs' numbers and their peers) and ``probes`` (one-off measurements behind design notes)."""

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent  # the repository
