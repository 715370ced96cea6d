"""The stderr console every command reports on (progress, reports, errors); stdout carries only answers.

Read it as ``console.stderr`` at the time of use (not ``from .console import stderr``), so it can be replaced.
"""

from __future__ import annotations

from rich.console import Console

stderr = Console(stderr=True, highlight=False)
