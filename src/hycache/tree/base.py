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


Ranges = tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class SlidePlan:
    """What ``RadixTree.insert(..., slide=self)`` fills. ``length``: page-aligned end of the
    insert. ``start``: first position the inserting request computed. ``anchors``: sorted
    resume points; ``prefix``: every page boundary below it is one too. ``ranges[slot]``:
    the ranges component ``slot`` fills (None: all).
    ``units[slot]``: store units the insert will take for it; ``kinds[slot]``: its kind.
    ``found``: the match it was planned on (its ``tree_version`` must still be the tree's)."""

    length: int
    start: int
    anchors: tuple[int, ...]
    prefix: int
    ranges: tuple[Ranges | None, ...]
    units: tuple[int, ...]
    kinds: tuple[str, ...]
    found: MatchResult

    def units_by_kind(self) -> dict[str, int]:
        """Store units per component kind (what a pool is asked for), zero kinds left out."""
        need: dict[str, int] = {}
        for kind, units in zip(self.kinds, self.units, strict=True):
            if units:
                need[kind] = need.get(kind, 0) + units
        return need
