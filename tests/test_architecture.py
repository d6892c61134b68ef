"""The shape of the package: no import cycles (function-level and type-checking imports
included), the lower layers never reach up, and the facade is composed, not inherited."""

from __future__ import annotations

import ast
from pathlib import Path

from hycache.cache.facade import HybridPrefixCache

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SRC / "hycache"

#: packages that must never import the ones listed (nor torch): the core stays engine-free
LOWER = ("hycache.tree", "hycache.components", "hycache.memory", "hycache.policy")
UPPER = ("hycache.cache", "hycache.sim", "hycache.engine", "hycache.cli", "torch")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path) -> set[str]:
    """Every module ``path`` imports, wherever the import statement stands."""
    found: set[str] = set()
    package = module_name(path) if path.name == "__init__.py" else module_name(path.parent)
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def graph() -> dict[str, set[str]]:
    modules = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    return {
        name: {m for m in imports_of(path) if m in modules and m != name}
        for name, path in modules.items()
    }


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycles() -> None:
    assert cycles(graph()) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    """The checker itself: a planted cycle is reported."""
    edges = graph()
    edges["hycache.tree.node"] = {*edges["hycache.tree.node"], "hycache.tree.radix"}
    assert any({"hycache.tree.node", "hycache.tree.radix"} <= set(c) for c in cycles(edges))


def test_lower_layers_never_import_upper_ones() -> None:
    bad = []
    for path in PACKAGE.rglob("*.py"):
        name = module_name(path)
        if not name.startswith(LOWER):
            continue
        for imported in imports_of(path):
            if imported.startswith(UPPER):
                bad.append(f"{name} imports {imported}")
    assert bad == []


def test_the_facade_is_composed_not_inherited() -> None:
    assert HybridPrefixCache.__bases__ == (object,)
