"""Planning an insert that slides windows: which positions each component fills, and the cost.

``plan_slide(tree, found, length, start=..., anchors=..., prefix=...)`` is pure. It takes a
fresh ``match`` of the tokens to insert and returns a :class:`SlidePlan`: the *anchors* (the
points a later request could resume at: the insert's end, the recurrent states on the path and
those the caller names, the branch points the path passes; besides, every page boundary below
``prefix``), per component the position ranges it fills (``Component.fill_ranges``; None: all)
and the store units that takes. The caller makes
room for ``plan.units`` and then runs ``RadixTree.insert(..., slide=plan)``, which fills
exactly that, or refuses a plan the tree has outgrown (its structure changed since the match).

A branch point is a position p in ``(0, length)`` where the path, once inserted, ends a node
that has another child: a cached path (data or a lock at or below it) that shares ``[0, p)``
and leaves at p. The window rule itself is the components' (see
:mod:`hycache.components.swa`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from hycache.errors import CacheUsageError
from hycache.tree.base import MatchResult, Ranges, SlidePlan
from hycache.tree.keys import TOKEN_BYTES
from hycache.tree.radix import RadixTree


def branch_points(found: MatchResult, length: int) -> list[int]:
    """Positions in ``(0, length)`` where the path of ``found`` (a match of the tokens to
    insert) will end a node that has another child once ``[0, length)`` is inserted."""
    points: list[int] = []
    matched = found.matched
    path = found.path
    for i, node in enumerate(path):
        if node.end > matched:  # matched only in part: the insert splits it at ``matched``
            if 0 < matched < length:
                points.append(matched)
            break
        if node.end >= length:
            break
        continues = 1 if i + 1 < len(path) else 0
        if len(node.children) > continues:
            points.append(node.end)
    return points


def resume_points(tree: RadixTree, found: MatchResult, length: int) -> list[int]:
    """Ends of fully matched path nodes in ``(0, length]`` where a component holds a resume
    point (a recurrent state)."""
    marking = [c for c in tree.components if c.marks_resume_point]
    return [
        node.end
        for node in found.path
        if node.end <= min(found.matched, length) and any(c.has(node) for c in marking)
    ]


def _absent(tree: RadixTree, found: MatchResult, slot: int, length: int) -> list[tuple[int, int]]:
    """Position ranges of ``[0, length)`` where component ``slot`` has no data before the
    insert: on path nodes without it, and everything past the matched path."""
    gaps: list[tuple[int, int]] = []
    reach = min(found.matched, length)
    for node in found.path:
        lo, hi = node.start, min(node.end, reach)
        if lo < hi and node.data[slot] is None:
            gaps.append((lo, hi))
    if reach < length:
        gaps.append((reach, length))
    return gaps


def _overlap(gaps: Iterable[tuple[int, int]], ranges: Sequence[tuple[int, int]]) -> int:
    total = 0
    for glo, ghi in gaps:
        for rlo, rhi in ranges:
            total += max(0, min(ghi, rhi) - max(glo, rlo))
    return total


def plan_slide(
    tree: RadixTree,
    found: MatchResult,
    length: int,
    *,
    start: int = 0,
    anchors: Iterable[int] = (),
    prefix: int = 0,
) -> SlidePlan:
    """Plan inserting ``[0, length)`` of the tokens ``found`` matched (``found`` fresh: no
    structural change since). ``start``: the first position the inserting request computed
    (its hit). ``anchors``: extra resume points, e.g. the states the caller will store.
    ``prefix``: every page boundary below it is a resume point too. Pure."""
    if found.tree_version != tree.version:
        raise CacheUsageError("plan_slide needs a match of the tree as it is now")
    page = tree.page_size
    length = min(length, len(found.key) // TOKEN_BYTES)
    length -= length % page
    if start < 0 or prefix < 0:
        raise CacheUsageError(f"bad slide: start {start}, prefix {prefix}")
    prefix = min(prefix, length)
    prefix -= prefix % page
    points = {length} if length else set()
    points.update(a for a in anchors if 0 < a <= length)
    points.update(branch_points(found, length))
    points.update(resume_points(tree, found, length))
    ordered = tuple(sorted(points))
    ranges: list[Ranges | None] = []
    units: list[int] = []
    for component in tree.components:
        wanted = component.fill_ranges(ordered, start, length, prefix)
        spans = None if wanted is None else tuple(wanted)
        ranges.append(spans)
        gaps = _absent(tree, found, component.slot, length)
        tokens = _overlap(gaps, ((0, length),) if spans is None else spans)
        units.append(component.units_for(tokens))
    kinds = tuple(c.kind for c in tree.components)
    return SlidePlan(length, start, ordered, prefix, tuple(ranges), tuple(units), kinds, found)
