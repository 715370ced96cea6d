"""The tables of methods and of built-in models, from their registries rather than from a run."""

from __future__ import annotations

from tools.docs import prose


def methods_table() -> str:
    """The README's table of methods, from the method registry (:mod:`snapkv_cli.engine.methods`)."""
    from snapkv_cli.engine.methods import METHODS
    from snapkv_cli.engine.settings import with_defaults

    rows = [[f"`{method.name}`", method.paper, with_defaults(method.keeps)] for method in METHODS.values()]
    return prose.table((["method", "paper", "what each layer and KV head keeps"], rows))


def models_table() -> str:
    """The guide's table of built-in models, from the catalogue (:data:`snapkv_cli.models.catalog.ENTRIES`)."""
    from snapkv_cli.models.catalog import DEFAULT, ENTRIES

    rows = [[f"`{entry.name}`" + (" (default)" if entry.name == DEFAULT else ""), entry.parameters,
             f"{entry.context:,}", entry.licence, "chat" if entry.instruction_tuned else "completion (base model)",
             f"`{entry.gguf.source.removeprefix('pypi:')}`, {entry.quantization}, {entry.gguf.size / 1e6:,.0f} MB",
             f"{entry.disk} of disk, {entry.memory} of memory"] for entry in ENTRIES]
    return prose.table((["name", "parameters", "context", "licence", "prompt", "GGUF from PyPI", "first setup"],
                        rows))


TABLES = {"methods-table": methods_table, "models-table": models_table}
