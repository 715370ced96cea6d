"""The package's layers, as CONTRIBUTING.md names them: no import cycle between modules, and no module importing from
a layer above its own. Every import counts (at the top, inside functions, under ``TYPE_CHECKING``), read from the
source with ``ast``; the layers are read from CONTRIBUTING.md's table, so the document and the check cannot drift."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "snapkv_cli"
TABLE_START, TABLE_END = "<!-- layers: lowest first -->", "<!-- end layers -->"


def module_name(path: Path, package: Path) -> str:
    parts = list(path.relative_to(package.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules(package: Path = PACKAGE) -> dict[str, Path]:
    return {module_name(path, package): path for path in sorted(package.rglob("*.py"))}


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """The modules of the package that ``name`` (at ``path``) imports, anywhere in its source. ``from X import y``
    is an import of ``X.y`` where that is a module, else of ``X``."""
    base = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                stem = ".".join(base[:len(base) - node.level + 1] + ([node.module] if node.module else []))
            else:
                stem = node.module or ""
            for alias in node.names:
                found.add(f"{stem}.{alias.name}" if f"{stem}.{alias.name}" in known else stem)
    return {module for module in found if module in known and module != name}


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    found = modules(package)
    return {name: imports_of(name, path, set(found)) for name, path in found.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def layers(text: str) -> list[tuple[str, list[str]]]:
    """``(layer, [path, ...])`` of CONTRIBUTING.md's table of layers, lowest first: the backticked paths of each
    row's second column (a folder ends with ``/``)."""
    table = text.split(TABLE_START, 1)[1].split(TABLE_END, 1)[0]
    rows = []
    for line in table.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) < 2 or set(cells[0]) <= {"-", " ", ":"} or cells[0] == "layer":
            continue
        rows.append((cells[0], re.findall(r"`([^`]+)`", cells[1])))
    return rows


def layer_of(path: str, table: list[tuple[str, list[str]]]) -> int | None:
    """The index of the layer holding the module at ``path`` (relative, ``snapkv_cli/...py``): a row's file names it,
    or else the deepest folder that holds it; None when no row does."""
    best, best_length = None, -1
    for position, (_, paths) in enumerate(table):
        for where in paths:
            holds = path.startswith(where) if where.endswith("/") else path == where
            length = len(where) + (0 if where.endswith("/") else 10_000)  # a file named outranks any folder
            if holds and length > best_length:
                best, best_length = position, length
    return best


def upward_imports(package: Path, table) -> list[str]:
    paths = {name: path.relative_to(package.parent).as_posix() for name, path in modules(package).items()}
    layer = {name: layer_of(path, table) for name, path in paths.items()}
    return [f"{name} ({table[layer[name]][0]}) imports {target} ({table[layer[target]][0]})"
            for name, targets in sorted(import_graph(package).items()) for target in sorted(targets)
            if layer[target] > layer[name]]


@pytest.fixture(scope="module")
def table():
    return layers((ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8"))


def test_the_package_has_no_import_cycle():
    assert cycles(import_graph()) == []


def test_every_module_belongs_to_a_layer_named_in_contributing(table):
    assert len(table) >= 8, table
    assert [path for path in modules().values() if layer_of(path.relative_to(ROOT).as_posix(), table) is None] == []


def test_no_module_imports_from_a_layer_above_its_own(table):
    assert upward_imports(PACKAGE, table) == []


def test_the_checks_find_a_cycle_and_an_upward_import(tmp_path):
    """On a made-up package: a cycle through three modules and an import of a higher layer, lazy and type-only ones
    among them, are found; imports of a lower layer or outside the package are not."""
    package = tmp_path / "snapkv_cli"
    (package / "low").mkdir(parents=True)
    files = {
        "__init__.py": "",
        "low/__init__.py": "",
        "low/a.py": "def f():\n    from ..high import h\n",
        "low/b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import c\n",
        "low/c.py": "import os\nfrom snapkv_cli.low import a\nfrom .b import x\n",
        "high.py": "from .low.a import f\n",
    }
    for name, source in files.items():
        (package / name).write_text(source)
    graph = import_graph(package)
    assert graph["snapkv_cli.low.c"] == {"snapkv_cli.low.a", "snapkv_cli.low.b"}  # os is not the package's
    assert sorted(cycles(graph)) == [["snapkv_cli.high", "snapkv_cli.low.a"], ["snapkv_cli.low.b", "snapkv_cli.low.c"]]
    rows = ["| layer | where |", "|---|---|", "| low | `snapkv_cli/__init__.py`, `snapkv_cli/low/` |",
            "| high | `snapkv_cli/high.py` |"]
    table = layers("\n".join([TABLE_START, *rows, TABLE_END]))
    assert upward_imports(package, table) == ["snapkv_cli.low.a (low) imports snapkv_cli.high (high)"]
