"""Path-level drops: a component's data over a position range, or the state at one position.

What the conformance scenarios' ``drop`` steps do (and the differential tests fuzz): both
resolve the positions on the path of some tokens, split nodes at the bounds so that data
outside the range stays, refuse (CacheUsageError, nothing dropped) when locked data is in the
way, and prune what becomes empty.
"""

from __future__ import annotations

from typing import Protocol

from hycache.components.base import Component
from hycache.errors import CacheUsageError
from hycache.tree.base import MatchResult
from hycache.tree.keys import TokenInput, encode_tokens
from hycache.tree.node import Node


class Tree(Protocol):
    """What the drops use of ``hycache.tree.radix.RadixTree``."""

    @property
    def page_size(self) -> int: ...

    def match(self, tokens: TokenInput, namespace: str | None = None) -> MatchResult: ...

    def split_at(self, tokens: TokenInput, length: int, namespace: str | None = None) -> Node: ...

    def nodes_on(
        self, tokens: TokenInput, namespace: str | None = None, *, length: int | None = None
    ) -> list[Node]: ...

    def pinned(self, node: Node, component: Component) -> bool: ...

    def release(self, node: Node, component: Component) -> None: ...


def release_range(
    tree: Tree,
    component: Component,
    tokens: TokenInput,
    start: int,
    end: int | None = None,
    namespace: str | None = None,
) -> int:
    """Drop ``component``'s data for positions ``[start, end)`` (``end`` None = to the end
    of the cached path) on the path of ``tokens``; positions not cached are ignored.
    Splits nodes at the bounds so data outside the range is kept. Raises CacheUsageError
    (before dropping anything) if a node in the range is locked. Returns nodes touched."""
    page = tree.page_size
    if start < 0 or start % page or (end is not None and (end < start or end % page)):
        raise CacheUsageError(
            f"range [{start}, {end}) must be page-aligned (page_size {page}) and ordered"
        )
    key = encode_tokens(tokens)
    matched = tree.match(key, namespace).matched
    stop = matched if end is None else min(end, matched)
    if start >= stop:
        return 0
    if start > 0:
        tree.split_at(key, start, namespace)
    tree.split_at(key, stop, namespace)
    targets = [n for n in tree.nodes_on(key, namespace, length=stop) if n.start >= start]
    for node in targets:
        if tree.pinned(node, component) and component.has(node):
            raise CacheUsageError(f"cannot drop {component.name} data of locked {node}")
    touched = 0
    for node in reversed(targets):
        if component.has(node):
            touched += 1
            tree.release(node, component)
    return touched


def release_state_at(
    tree: Tree,
    component: Component,
    tokens: TokenInput,
    length: int,
    namespace: str | None = None,
) -> bool:
    """Drop ``component``'s data on the node ending exactly at prefix ``length`` of
    ``tokens``. Returns False when there is none. Raises CacheUsageError if it is locked."""
    if length <= 0 or length % tree.page_size:
        raise CacheUsageError(
            f"position {length} must be a positive multiple of page_size {tree.page_size}"
        )
    for node in tree.nodes_on(tokens, namespace, length=length):
        if node.end == length and component.has(node):
            tree.release(node, component)
            return True
    return False
