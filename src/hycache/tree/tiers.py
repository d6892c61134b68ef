"""Tiers under one tree (DESIGN.md section 4b): device, host, storage, fastest first.

A tree built with ``lower_tiers`` carries, for every layer group, one component per tier; a
group's data on a node lives in that tier's slot, so the set of tiers holding it is the set of
non-empty slots (:func:`holders`). A match runs each group's validator over the union of its
slots (:func:`union_match`): the longer reusable prefix wins whichever tier it sits in,
compared in tokens. :func:`tier_sources` says where a hit's data comes from (fastest holder
wins) and :func:`copy_path` copies one tier's data on a path to another tier.

Where several groups of one kind exist, a position's FULL page (or the state at the hit) comes
from the slowest of the groups' fastest holders: the data is complete only once that tier has
delivered.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from hycache.components.base import Component
from hycache.errors import CacheUsageError
from hycache.tree.base import MatchResult
from hycache.tree.keys import TokenInput, encode_tokens
from hycache.tree.node import Node


class TieredTree(Protocol):
    """What these functions use of ``hycache.tree.radix.RadixTree``."""

    @property
    def page_size(self) -> int: ...

    @property
    def tiers(self) -> tuple[tuple[Component, ...], ...]: ...

    def match(self, tokens: TokenInput, namespace: str | None = None) -> MatchResult: ...

    def split_at(self, tokens: TokenInput, length: int, namespace: str | None = None) -> Node: ...

    def nodes_on(
        self, tokens: TokenInput, namespace: str | None = None, *, length: int | None = None
    ) -> list[Node]: ...


@dataclass(frozen=True)
class TierSources:
    """Where a hit's data comes from: ``kv_from[t]`` tokens of FULL KV in ``[0, hit)`` from
    tier ``t`` (tiers with none left out), ``state_from`` the tier of the recurrent state at
    ``hit`` (None when hit is 0 or there is no recurrent group)."""

    kv_from: dict[int, int]
    state_from: int | None


def union_match(
    first: Sequence[Component],
    group_slots: Sequence[Sequence[int]],
    path: Sequence[Node],
    matched: int,
) -> tuple[int, int]:
    """(hit, kv_hit) of ``path`` (matched ``matched`` tokens deep) when a group's data counts
    wherever any of its tiers holds it. ``first``: the groups' first-tier components."""
    kv_hit = matched
    for g, component in enumerate(first):
        if component.bounds_kv:
            kv_hit = component.deepest_accepted_in(path, kv_hit, group_slots[g])
    hit = kv_hit
    while True:
        candidate = hit
        for g, component in enumerate(first):
            candidate = component.deepest_accepted_in(path, candidate, group_slots[g])
        if candidate == hit:
            return hit, kv_hit
        hit = candidate


def holders(tiers: Sequence[Sequence[Component]], group: int, node: Node) -> list[int]:
    """The tiers (indices, fastest first) holding group ``group``'s data on ``node``."""
    return [t for t, comps in enumerate(tiers) if comps[group].has(node)]


def _fastest(tiers: Sequence[Sequence[Component]], groups: Sequence[int], node: Node) -> int:
    """The slowest of the groups' fastest holders on ``node`` (every group must hold data)."""
    worst = 0
    for g in groups:
        found = holders(tiers, g, node)
        if not found:
            raise CacheUsageError(f"group {g} holds nothing on {node}")
        worst = max(worst, found[0])
    return worst


def tier_sources(
    tiers: Sequence[Sequence[Component]], path: Sequence[Node], hit: int
) -> TierSources:
    """Where the data of a hit of ``hit`` tokens along ``path`` (a match's path) comes from.
    Pure; CacheUsageError when the path does not hold what ``hit`` needs."""
    first = tiers[0]
    full = [g for g, c in enumerate(first) if c.kind == "full"]
    recurrent = [g for g, c in enumerate(first) if c.kind == "recurrent"]
    kv_from: dict[int, int] = {}
    state_from: int | None = None
    for node in path:
        if node.start >= hit:
            break
        if full:
            tier = _fastest(tiers, full, node)
            kv_from[tier] = kv_from.get(tier, 0) + min(node.end, hit) - node.start
        if recurrent and node.end == hit:
            state_from = _fastest(tiers, recurrent, node)
    if recurrent and hit and state_from is None:
        raise CacheUsageError(f"no state at the hit {hit}")
    return TierSources(kv_from, state_from)


def copy_path(
    tree: TieredTree,
    tokens: TokenInput,
    namespace: str | None,
    source: int,
    target: int,
    groups: Sequence[int],
) -> int:
    """Copy to tier ``target`` what tier ``source`` holds of ``groups`` on the cached path of
    ``tokens`` (whole pages; states at node ends on it). Data the target already holds stays;
    what the source lacks is not copied. Returns the nodes that gained data. Mutates the tree
    (a split where the cached path ends inside a node)."""
    n = len(tree.tiers)
    if not (0 <= source < n and 0 <= target < n) or source == target:
        raise CacheUsageError(f"copy from tier {source} to tier {target} of {n}")
    key = encode_tokens(tokens)
    limit = tree.match(key, namespace).matched
    if limit == 0:
        return 0
    tree.split_at(key, limit, namespace)
    gained = 0
    src, dst = tree.tiers[source], tree.tiers[target]
    for node in tree.nodes_on(key, namespace, length=limit):
        changed = False
        for g in groups:
            if src[g].has(node) and not dst[g].has(node):
                changed |= dst[g].copy_onto(node)
        gained += changed
    return gained
