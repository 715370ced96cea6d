"""The table of methods, from the method registry rather than from a run."""

from __future__ import annotations

from tools.docs import prose


def methods_table() -> str:
    """The README's table of methods, from the method registry (:mod:`snapkv_cli.engine.methods`)."""
    from snapkv_cli.engine.methods import METHODS
    from snapkv_cli.engine.settings import with_defaults

    rows = [[f"`{method.name}`", method.paper, with_defaults(method.keeps)] for method in METHODS.values()]
    return prose.table((["method", "paper", "what each layer and KV head keeps"], rows))


TABLES = {"methods-table": methods_table}
