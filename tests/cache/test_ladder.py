"""The hit ladder against a brute-force model of stored states, through the notes that climb
it."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hycache.cache.ladder import HitLadder
from hycache.cache.registry import NodeNotes
from hycache.errors import IntegrityError
from hycache.tree.node import Node

#: (what, which state): store a new state at node ``which``, a hit on it, or it leaves
OPS = st.lists(
    st.tuples(st.sampled_from(("store", "hit", "hit", "hit", "gone", "drop")), st.integers(0, 5)),
    max_size=150,
)


def _node() -> Node:
    return Node(None, b"", 0, 1, None)


@given(OPS)
def test_ladder_matches_brute_force(ops: list[tuple[str, int]]) -> None:
    notes = NodeNotes()
    nodes = [_node() for _ in range(6)]
    stored: dict[int, int] = {}  # node index -> hits, states in the cache now
    histories: list[int] = []  # final hit counts of the states that left
    for what, which in ops:
        node = nodes[which]
        if what == "store":
            if which in stored:
                histories.append(stored.pop(which))
            notes.note_reason(node, "branch")
            stored[which] = 0
        elif what == "hit" and which in stored:
            notes.count_state_hit(node)
            stored[which] += 1
        elif what == "gone" and which in stored:
            notes.state_gone(node)
            histories.append(stored.pop(which))
        elif what == "drop":
            notes.drop_reason(node)
            if which in stored:
                histories.append(stored.pop(which))
        for index, hits in stored.items():
            assert notes.state_hits(nodes[index]) == hits
        ladder = notes.ladder("branch")
        every = histories + list(stored.values())
        if ladder is None:
            assert not any(every)
            continue
        for rung in range(0, max(every, default=0) + 3):
            reached = sum(1 for hits in every if hits >= rung) if rung else 0
            live = sum(1 for hits in stored.values() if hits == rung) if rung else 0
            assert (ladder.at(rung), ladder.live_at(rung)) == (reached, live)


def test_a_ladder_refuses_rung_zero_and_a_state_it_never_held() -> None:
    ladder = HitLadder()
    with pytest.raises(IntegrityError, match="rung 1"):
        ladder.climb(0)
    with pytest.raises(IntegrityError, match="no stored state on rung 1 climbed"):
        ladder.climb(2)
    ladder.climb(1)
    ladder.leave(1)
    with pytest.raises(IntegrityError, match="no stored state on rung 1 of"):
        ladder.leave(1)
    assert (ladder.at(1), ladder.live_at(1), ladder.at(0), ladder.at(2)) == (1, 0, 0, 0)


def test_a_new_state_at_a_node_starts_from_no_hit() -> None:
    notes = NodeNotes()
    node = _node()
    notes.note_reason(node, "branch")
    for _ in range(3):
        notes.count_state_hit(node)
    notes.note_reason(node, "tail")  # the branch state went without the cache saying so
    assert notes.state_hits(node) == 0
    branch = notes.ladder("branch")
    assert branch is not None
    assert (branch.at(3), branch.live_at(3), branch.at(1)) == (1, 0, 1)
    assert notes.ladder("tail") is None


def test_clearing_the_notes_takes_every_stored_state_off_its_rung() -> None:
    notes = NodeNotes()
    first, second = _node(), _node()
    for node, hits in ((first, 2), (second, 1)):
        notes.note_reason(node, "branch")
        for _ in range(hits):
            notes.count_state_hit(node)
    ladder = notes.ladder("branch")
    assert ladder is not None
    assert (ladder.live_at(1), ladder.live_at(2)) == (1, 1)
    notes.clear()
    assert (ladder.live_at(1), ladder.live_at(2), ladder.at(1), ladder.at(2)) == (0, 0, 2, 1)
    assert notes.state_hits(first) == notes.state_hits(second) == 0
