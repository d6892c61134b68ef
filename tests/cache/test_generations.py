"""Generation odds against brute-force counts, through the notes that keep them, and the
generation a cache gives the states a request stores."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hycache.cache.generations import GenerationOdds
from hycache.cache.registry import NodeNotes
from hycache.errors import IntegrityError
from hycache.policy.eviction.value import ValueEviction
from hycache.tree.node import Node
from tests.policy.test_policies import run, seq
from tests.policy.test_value_eviction import make

#: (what, which state, generation): store a state of that generation at node ``which``, a hit
#: on it, or it leaves
OPS = st.lists(
    st.tuples(
        st.sampled_from(("store", "hit", "hit", "gone", "drop")),
        st.integers(0, 5),
        st.integers(0, 3),
    ),
    max_size=150,
)


def _node() -> Node:
    return Node(None, b"", 0, 1, None)


def _chance(first: list[int], unused: list[int], generation: int, prior: float) -> float:
    """The module docstring's recursion, written out."""
    chance = prior
    for g in range(generation + 1):
        hits = first[g] if g < len(first) else 0
        gone = unused[g] if g < len(unused) else 0
        chance = (hits + chance) / (hits + gone + 1)
    return chance


@given(OPS, st.floats(0.0, 1.0))
def test_odds_match_brute_force(ops: list[tuple[str, int, int]], prior: float) -> None:
    notes = NodeNotes()
    nodes = [_node() for _ in range(6)]
    stored: dict[int, tuple[int, int]] = {}  # node index -> (generation, hits)
    first = [0] * 4  # per generation: states resumed from
    unused = [0] * 4  # per generation: states gone never resumed from

    def leave(index: int) -> None:
        generation, hits = stored.pop(index)
        unused[generation] += hits == 0

    for what, which, generation in ops:
        node = nodes[which]
        if what == "store":
            if which in stored:
                leave(which)  # one stored before it that the cache was not told went
            notes.note_reason(node, "final")
            notes.note_generation(node, generation)
            stored[which] = (generation, 0)
        elif what == "hit" and which in stored:
            notes.count_state_hit(node)
            g, hits = stored[which]
            first[g] += hits == 0
            stored[which] = (g, hits + 1)
        elif what in ("gone", "drop"):
            (notes.state_gone if what == "gone" else notes.drop_reason)(node)
            if which in stored:
                leave(which)
        odds = notes.generation_odds
        for g in range(4):
            assert odds.settled("final", g) == (first[g], unused[g])
            assert odds.chance("final", g, prior) == pytest.approx(_chance(first, unused, g, prior))
        for index, (g, _hits) in stored.items():
            assert notes.generation(nodes[index]) == g


def test_a_generation_nobody_reached_borrows_the_one_below() -> None:
    odds = GenerationOdds()
    for _ in range(3):
        odds.first_hit("final", 0)
    odds.left_unused("final", 0)
    at_zero = (3 + 0.5) / (4 + 1)
    assert odds.chance("final", 0, 0.5) == pytest.approx(at_zero)
    assert odds.chance("final", 5, 0.5) == pytest.approx(at_zero)  # (0 + c) / (0 + 1)
    odds.left_unused("final", 1)  # the memo of "final" is dropped
    assert odds.chance("final", 1, 0.5) == pytest.approx(at_zero / 2)
    assert odds.chance("branch", 2, 0.25) == pytest.approx(0.25)
    with pytest.raises(IntegrityError):
        odds.chance("final", -1, 0.5)
    with pytest.raises(IntegrityError):
        odds.first_hit("final", -1)


def test_a_request_that_resumed_from_a_state_stores_the_next_generation() -> None:
    """Turn 1 resumes from nothing (generation 0); turn 2 from turn 1's state (1); turn 3 from
    turn 2's (2). A new conversation starts at 0 again."""
    policy = ValueEviction(reason_weight="lineage")
    cache = make(policy)
    history = [*seq(0, 128), 1]
    leases = [run(cache, history)]
    for turn in range(2):
        history = [*history[:-1], *seq(1000 + 200 * turn, 128), 1]
        leases.append(run(cache, history))
    fresh = run(cache, [*seq(5000, 128), 1])
    assert [lease.generation for lease in leases] == [0, 1, 2]
    assert fresh.generation == 0
    notes = cache.notes
    ends = {n.end: n for n in cache.tree.iter_nodes() if cache.recurrent and cache.recurrent.has(n)}
    assert {end: notes.generation(node) for end, node in ends.items()} == {
        128: 0,
        256: 1,
        384: 2,
    } | {end: 0 for end in ends if end not in (128, 256, 384)}


def test_a_fresh_state_weighs_the_chance_of_its_generation() -> None:
    """With ``reason_weight`` "lineage" a state not yet resumed from weighs the odds of its
    generation (the prior: ``state_hit_chance``); one resumed from, ``state_hit_chance``."""
    policy = ValueEviction(reason_weight="lineage")
    cache = make(policy)
    history = [*seq(0, 128), 1]
    run(cache, history)
    history = [*history[:-1], *seq(1000, 128), 1]
    run(cache, history)
    view = policy._view
    nodes = {n.end: n for n in cache.tree.iter_nodes()}
    first, second = nodes[128], nodes[256]
    notes = cache.notes
    assert notes.state_hits(first) == 1 and notes.state_hits(second) == 0
    assert view.state_lineage_chance(first) == view.state_hit_chance(first)
    reason = notes.reason(second)
    expected = notes.generation_odds.chance(reason, 1, view.state_hit_chance(second))
    assert view.state_lineage_chance(second) == pytest.approx(expected)
