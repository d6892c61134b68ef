"""Inserts that slide windows: the plan (anchors, ranges, units), the insert that follows it,
and the SWA component's window rule. The differential fuzzer (``test_tree_differential``)
checks the same against the reference model on random operation sequences."""

from __future__ import annotations

import pytest

from hycache.components.base import Component
from hycache.components.full import FullComponent
from hycache.components.recurrent import RecurrentComponent
from hycache.components.swa import SlidingWindowComponent
from hycache.errors import CacheUsageError
from hycache.memory.unbounded import UnboundedStore
from hycache.tree.radix import RadixTree
from hycache.tree.window import branch_points, plan_slide


def tree_of(page: int, window: int, *, recurrent: bool = False) -> tuple[RadixTree, UnboundedStore]:
    store = UnboundedStore()
    components: list[Component] = [FullComponent(store), SlidingWindowComponent(store, window)]
    if recurrent:
        components.append(RecurrentComponent(store))
    return RadixTree(page, components), store


def swa_spans(tree: RadixTree, tokens: list[int]) -> list[tuple[int, int, bool]]:
    """(start, end, swa live) of the nodes on the path of ``tokens``."""
    swa = tree.components[1]
    return [(n.start, n.end, swa.has(n)) for n in tree.nodes_on(tokens)]


def slide(
    tree: RadixTree,
    tokens: list[int],
    *,
    start: int = 0,
    anchors: tuple[int, ...] = (),
    prefix: int = 0,
) -> None:
    plan = plan_slide(
        tree, tree.match(tokens), len(tokens), start=start, anchors=anchors, prefix=prefix
    )
    tree.insert(tokens, slide=plan)
    tree.check_integrity()


def test_a_slid_insert_keeps_the_window_before_its_end_only() -> None:
    tree, store = tree_of(4, 8)
    tokens = list(range(100, 132))
    plan = plan_slide(tree, tree.match(tokens), 32)
    assert plan.anchors == (32,)
    assert plan.ranges == (None, ((24, 32),))
    assert plan.units == (8, 2)  # full: 8 pages; swa: the 2 pages of [24, 32)
    tree.insert(tokens, slide=plan)
    tree.check_integrity()
    assert store.pages_in_use == 10
    assert swa_spans(tree, tokens) == [(0, 24, False), (24, 32, True)]
    assert tree.match(tokens).hit == 32
    assert tree.match([*tokens[:24], 1, 2, 3, 4]).hit == 0


def test_a_branch_point_and_a_state_are_anchors() -> None:
    tree, _ = tree_of(4, 8, recurrent=True)
    first = list(range(100, 132))
    slide(tree, first)
    second = [*first[:16], *range(200, 216)]
    found = tree.match(second)
    assert branch_points(found, 32) == [16]
    plan = plan_slide(tree, found, 32, anchors=(28,))
    assert plan.anchors == (16, 28, 32)
    assert plan.ranges[1] == ((8, 16), (20, 32))
    tree.insert(second, slide=plan)
    tree.check_integrity()
    assert swa_spans(tree, second) == [
        (0, 8, False),
        (8, 16, True),
        (16, 20, False),
        (20, 32, True),
    ]
    # the first path's [8, 16) came back to life: its window before 16 is whole again
    assert swa_spans(tree, first) == [
        (0, 8, False),
        (8, 16, True),
        (16, 24, False),
        (24, 32, True),
    ]
    swa = tree.components[1]
    assert swa.deepest_accepted(list(tree.match(first[:16]).path), 16) == 16


def test_existing_states_on_the_path_are_anchors() -> None:
    tree, _ = tree_of(4, 8, recurrent=True)
    tokens = list(range(100, 132))
    tree.insert(tokens[:12])
    recurrent = tree.components[2]
    assert isinstance(recurrent, RecurrentComponent)
    recurrent.put(tree.split_at(tokens, 12))
    tree.release_range(tree.components[1], tokens, 0, 12)  # a tombstone before the state
    plan = plan_slide(tree, tree.match(tokens), 32)
    assert plan.anchors == (12, 32)
    assert plan.ranges[1:] == (((4, 12), (24, 32)), None)
    assert plan.units == (5, 4, 0)  # full: [12, 32); swa: [4, 12) revived and [24, 32) new
    tree.insert(tokens, slide=plan)
    tree.check_integrity()
    assert tree.match([*tokens[:16], 1, 2, 3, 4]).hit == 12


def test_the_start_bounds_what_is_revived() -> None:
    tree, _ = tree_of(4, 8)
    first = list(range(100, 132))
    slide(tree, first)
    second = [*first[:16], *range(200, 216)]
    slide(tree, second, start=14)  # rounded up to 16: the branch window [8, 16) stays dropped
    assert tree.match([*first[:16], 7, 7, 7, 7]).hit == 0
    assert tree.match(second).hit == 32


def test_live_swa_is_never_dropped_and_full_tombstones_are_revived() -> None:
    tree, store = tree_of(2, 4)
    tokens = list(range(50, 70))
    tree.insert(tokens)
    tree.release_range(tree.components[0], tokens, 6, 10)  # full KV gone in [6, 10): one node
    before = store.pages_in_use
    plan = plan_slide(tree, tree.match(tokens), 20)
    assert plan.units == (2, 0)  # full comes back in [6, 10); swa is all live already
    tree.insert(tokens, slide=plan)
    tree.check_integrity()
    assert store.pages_in_use == before + 2
    assert all(live for *_, live in swa_spans(tree, tokens))


def test_a_partly_matched_tombstone_is_counted() -> None:
    """The insert ends inside a tombstoned node: the part it fills is planned exactly."""
    tree, store = tree_of(2, 16)
    tokens = list(range(20))
    tree.insert(tokens)
    tree.release_range(tree.components[1], tokens, 0, 20)
    before = store.pages_in_use
    plan = plan_slide(tree, tree.match(tokens[:12]), 12)
    assert plan.units == (0, 6)  # swa of [0, 12): the window (15 positions) covers it all
    tree.insert(tokens[:12], slide=plan)
    tree.check_integrity()
    assert store.pages_in_use == before + 6


def test_a_stale_plan_is_refused_and_changes_nothing() -> None:
    tree, store = tree_of(4, 8)
    tokens = list(range(100, 132))
    plan = plan_slide(tree, tree.match(tokens), 32)
    tree.insert(list(range(500, 508)))
    version, pages = tree.version, store.pages_in_use
    with pytest.raises(CacheUsageError):
        tree.insert(tokens, slide=plan)
    with pytest.raises(CacheUsageError):
        plan_slide(tree, plan.found, 32)
    other = plan_slide(tree, tree.match(tokens), 32)
    with pytest.raises(CacheUsageError):
        tree.insert(list(range(1, 33)), slide=other)  # the plan of other tokens
    assert (tree.version, store.pages_in_use) == (version, pages)
    tree.check_integrity()


def test_a_prefix_keeps_every_boundary_below_it_resumable() -> None:
    """Without recurrent layers a later request may resume at any prefix of a prompt: the
    cache passes the prompt as ``prefix`` and only the output beyond the window drops."""
    tree, _ = tree_of(4, 8)
    tokens = list(range(100, 148))  # a prompt of 20 tokens, then 28 of output
    slide(tree, tokens, prefix=20)
    assert swa_spans(tree, tokens) == [(0, 20, True), (20, 40, False), (40, 48, True)]
    assert tree.match([*tokens[:12], 1, 2, 3, 4]).hit == 12
    assert tree.match([*tokens[:32], 1, 2, 3, 4]).hit == 20
