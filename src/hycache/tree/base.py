"""Results of tree operations (frozen, no sentinels)."""

from __future__ import annotations

from dataclasses import dataclass

from hycache.tree.keys import TokenKey
from hycache.tree.node import Node


@dataclass(frozen=True, slots=True)
class MatchResult:
    """What a pure lookup found.

    ``matched``: page-aligned length of the token path present in the tree.
    ``kv_hit``:  longest prefix every KV-bounding component (FULL) covers (``matched`` when the
                 tree has no such component).
    ``hit``:     deepest prefix length every component accepts (``hit <= kv_hit``): the
                 reusable length. ``recompute`` = ``kv_hit - hit`` tokens matched but unusable.
    ``path``:    the nodes walked from the root (the last may be matched only in part).
    ``key``/``namespace``/``tree_version``: what was looked up and the tree's structure
                 version then; ``RadixTree.insert(..., after=result)`` uses them to skip
                 re-comparing the matched path when nothing changed in between.
    """

    hit: int
    kv_hit: int
    matched: int
    path: tuple[Node, ...]
    key: TokenKey
    namespace: str | None
    tree_version: int

    @property
    def recompute(self) -> int:
        return self.kv_hit - self.hit
