"""The package's import graph has no cycle, counting every import (``TYPE_CHECKING`` and function-local ones too).

Read from the source with ``ast`` (nothing is imported), so that an import added under ``if TYPE_CHECKING:`` to
get a type is caught as well: the layering reads top-down (instrumentor, then the SDK adapters, then the engine,
then turns / metrics / propagation, then settings / semconv / the OpenTelemetry fence).
"""

from __future__ import annotations

import ast
from pathlib import Path

import acp_otel

PACKAGE_DIR = Path(acp_otel.__file__).parent


def _module_name(path: Path) -> str:
    parts = ("acp_otel", *path.relative_to(PACKAGE_DIR).with_suffix("").parts)
    return ".".join(parts[:-1]) if parts[-1] == "__init__" else ".".join(parts)


def _is_package(path: Path) -> bool:
    return path.name == "__init__.py"


def import_graph(package_dir: Path = PACKAGE_DIR, external: dict[str, set[str]] | None = None) -> dict[str, set[str]]:
    """``{module: modules of the package it imports}`` for every ``.py`` file under ``package_dir``; the
    top-level names of other imports go to ``external`` when given."""
    files = {_module_name(p): p for p in sorted(package_dir.rglob("*.py"))}
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        package = name if _is_package(path) else name.rpartition(".")[0]
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")
                    base = base[: len(base) - (node.level - 1)]
                    module = ".".join(base + ([node.module] if node.module else []))
                else:
                    module = node.module or ""
                # "from . import _x": the parent package is imported before any of its modules anyway (no edge),
                # and the names may be modules ("from .pkg import mod").
                if not name.startswith(module + "."):
                    targets.add(module)
                targets.update(f"{module}.{alias.name}" for alias in node.names)
        graph[name] = {t for t in targets if t in files and t != name}
        if external is not None:
            external[name] = {t.partition(".")[0] for t in targets if t and not t.startswith("acp_otel")}
    return graph


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected component with more than one module (Tarjan), as a readable path."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return components


def test_the_graph_is_read_from_the_source() -> None:
    graph = import_graph()
    # A TYPE_CHECKING import, a relative module import and a function-local one are all edges.
    assert "acp_otel._instrumentor" in graph["acp_otel"]
    assert "acp_otel._sdk_adapter" in graph["acp_otel._instrumentor"]
    assert "acp_otel._engine" in graph["acp_otel._proxy.process"]
    assert "acp_otel._state" in graph["acp_otel._sdk_adapter"]


def test_find_cycles_finds_one() -> None:
    assert find_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert find_cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_in_the_package() -> None:
    cycles = find_cycles(import_graph())
    assert cycles == [], f"import cycles in acp_otel/ (TYPE_CHECKING imports count): {cycles}"


def _closure(graph: dict[str, set[str]], start: str) -> set[str]:
    seen = {start}
    todo = [start]
    while todo:
        for nxt in graph[todo.pop()]:
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def test_the_engine_knows_nothing_of_the_sdk_or_wrapt() -> None:
    external: dict[str, set[str]] = {}
    graph = import_graph(external=external)
    engine_side = _closure(graph, "acp_otel._engine")
    assert {"acp_otel._turns", "acp_otel._propagation", "acp_otel._otel_private"} <= engine_side
    adapters = {"acp_otel._instrumentor", "acp_otel._state", "acp_otel._patching", "acp_otel._sdk_adapter"}
    adapters |= {"acp_otel._remote", "acp_otel._spawn", "acp_otel._shutdown"}
    assert engine_side.isdisjoint(adapters), engine_side & adapters
    sdk_or_wrapt = {m: external[m] & {"acp", "wrapt"} for m in engine_side if external[m] & {"acp", "wrapt"}}
    assert sdk_or_wrapt == {}, f"the engine's modules import the SDK or wrapt: {sdk_or_wrapt}"
