"""hycache.spec has no import cycle, imports inside functions included, and exports its API."""

from __future__ import annotations

import ast
from pathlib import Path

import hycache.spec
import hycache.spec.model

SRC = Path(__file__).resolve().parents[2] / "src"
PACKAGE = "hycache.spec"


def _module_name(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    root = SRC / Path(*PACKAGE.split("."))
    return {_module_name(p): p for p in sorted(root.rglob("*.py"))}


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """Every module of ``known`` that ``name`` imports, anywhere in its body."""
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name.split(".")
                anchor = anchor if is_package else anchor[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            targets = [base] + [f"{base}.{alias.name}" for alias in node.names]
        for target in targets:
            if target in known and target != name:
                found.add(target)
    return found


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules)
    return {name: _imports(name, path, known) for name, path in modules.items()}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the stack, 2: done
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)) is not None:
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)) is not None:
            return found
    return None


def test_the_graph_sees_function_level_imports() -> None:
    """The checker itself: a cycle made only of a function-level import is found."""
    graph = _graph()
    assert "hycache.spec.hf.parse" in graph["hycache.spec.model"]
    assert "hycache.spec.named" in graph["hycache.spec.model"]
    looped = {k: set(v) for k, v in graph.items()}
    looped["hycache.spec.named"].add("hycache.spec.model")
    assert _cycle(looped) is not None


def test_spec_package_has_no_import_cycle() -> None:
    assert _cycle(_graph()) is None


def test_parsers_and_named_specs_do_not_import_the_model() -> None:
    graph = _graph()
    for name in graph:
        if name.startswith(("hycache.spec.hf", "hycache.spec.named")):
            assert "hycache.spec.model" not in graph[name], name


def test_public_names() -> None:
    from hycache.spec import FullAttentionGroup, ModelSpec, RecurrentGroup, SlidingWindowGroup

    assert ModelSpec is hycache.spec.model.ModelSpec
    for cls in (ModelSpec, FullAttentionGroup, RecurrentGroup, SlidingWindowGroup):
        assert cls.__name__ in hycache.spec.__all__
    assert (
        ModelSpec.named("qwen3-next-80b-a3b")
        is hycache.spec.model.NAMED_SPECS["qwen3-next-80b-a3b"]
    )
