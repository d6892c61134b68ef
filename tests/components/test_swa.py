"""The sliding-window component: its window rule (``fill_ranges``), what it accepts
(``deepest_accepted``), its checks."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hycache.components.swa import SlidingWindowComponent
from hycache.errors import ConfigError, IntegrityError
from hycache.memory.unbounded import UnboundedStore
from hycache.tree.node import Node


def test_fill_ranges_merge_round_out_and_keep_a_page_with_window_one() -> None:
    swa = SlidingWindowComponent(UnboundedStore(), 6)
    swa.bind(0, 4)
    assert swa.fill_ranges([32], 0, 32) == [(24, 32)]  # 5 positions before 32, whole pages
    assert swa.fill_ranges([16, 20, 40], 0, 40) == [(8, 20), (32, 40)]
    assert swa.fill_ranges([16, 40], 13, 40) == [(32, 40)]  # start 13 rounds up to 16
    assert swa.fill_ranges([4], 0, 4) == [(0, 4)]
    assert swa.fill_ranges([40], 0, 40, prefix=8) == [(0, 8), (32, 40)]
    assert swa.fill_ranges([16], 4, 40, prefix=12) == [(4, 16)]
    one = SlidingWindowComponent(UnboundedStore(), 1)
    one.bind(0, 4)
    assert one.fill_ranges([8, 16], 0, 16) == [(4, 8), (12, 16)]
    with pytest.raises(ConfigError):
        SlidingWindowComponent(UnboundedStore(), 0)


@settings(max_examples=150, deadline=None)
@given(
    page=st.sampled_from([1, 2, 4]),
    window=st.integers(1, 12),
    length=st.integers(1, 12),
    start=st.integers(0, 48),
    anchors=st.lists(st.integers(1, 12), max_size=4),
    prefix=st.integers(0, 12),
)
def test_fill_ranges_hold_exactly_the_positions_some_anchor_reads(
    page: int, window: int, length: int, start: int, anchors: list[int], prefix: int
) -> None:
    """Position q is in a range iff q >= start (rounded up to a page) and q is below the
    prefix or q's page meets the ``max(window - 1, 1)`` positions before some anchor; ranges
    are sorted, disjoint, aligned."""
    end = length * page
    points = sorted({a * page for a in anchors if a * page <= end} | {end})
    below = min(prefix * page, end)
    swa = SlidingWindowComponent(UnboundedStore(), window)
    swa.bind(0, page)
    spans = swa.fill_ranges(points, start, end, below)
    for (lo, hi), (nlo, _) in itertools.pairwise(spans):
        assert lo < hi < nlo
    assert all(lo % page == 0 and hi % page == 0 for lo, hi in spans)
    first = -(-start // page) * page
    reach = max(window - 1, 1)
    for q in range(end):
        page_lo = q - q % page
        wanted = q >= first and (
            q < below or any(page_lo < a and page_lo + page > a - reach for a in points)
        )
        assert any(lo <= q < hi for lo, hi in spans) == wanted, q


def test_deepest_accepted_needs_the_window_before_the_point() -> None:
    swa = SlidingWindowComponent(UnboundedStore(), 5)
    swa.bind(0, 2)
    nodes = []
    parent = Node(None, b"", 0, 1, None)
    for start, live in ((0, True), (4, False), (8, True), (12, True)):
        node = Node(parent, bytes(32), start, 1, None)
        node.data[0] = range(2) if live else None
        nodes.append(node)
        parent = node
    assert swa.deepest_accepted(nodes, 16) == 16  # [12, 16) and [8, 12): 8 live positions
    assert swa.deepest_accepted(nodes, 10) == 4  # 10 needs [6, 10): [4, 8) is dropped
    assert swa.deepest_accepted(nodes, 4) == 4  # connected to the root


def test_check_node_catches_a_wrong_page_count() -> None:
    swa = SlidingWindowComponent(UnboundedStore(), 4)
    swa.bind(0, 2)
    node = Node(Node(None, b"", 0, 1, None), bytes(32), 0, 1, None)
    node.data[0] = range(1)  # 4 tokens need 2 pages
    with pytest.raises(IntegrityError, match="pages for"):
        swa.check_node(node)
