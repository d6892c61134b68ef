"""The value eviction's two aging clocks and the online choice between them.

Unit level: :class:`AgingClocks` on real tree nodes and a real heap, against a brute-force
model of both clocks. Cache level: the hycache preset on streams where one clock is clearly
right, the switch re-keying every entry, the budget and the invariants holding throughout.
"""

from __future__ import annotations

import heapq
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hycache.cache.presets import build_cache
from hycache.policy.eviction import aging
from hycache.policy.eviction.aging import AgingClocks, HeapEntry, Ident, Key
from hycache.policy.eviction.value import ValueEviction
from hycache.tree.node import Node
from tests.policy.test_policies import random_turn, spec

HORIZON = 100


def entries(count: int) -> list[Ident]:
    return [(Node(None, b"", i, 1, None), 0) for i in range(count)]


def live(
    clocks: AgingClocks, values: dict[Ident, float]
) -> tuple[dict[Ident, Key], list[HeapEntry]]:
    """The live keys (born on the live clock + value) and a heap holding them."""
    current = {ident: (clocks.born(ident) + value,) for ident, value in values.items()}
    heap = [(key, i, ident[0], ident[1]) for i, (ident, key) in enumerate(current.items())]
    heapq.heapify(heap)
    return current, heap


def test_each_clock_stamps_and_moves_by_its_own_keys() -> None:
    a, b = entries(2)
    clocks = AgingClocks(HORIZON, learn=True)
    clocks.stamp(a, typical=2.0, tick=50)  # aged: 0 + 2 * 50 / 100 = 1; flat: 0
    assert clocks.born(a) == 1.0
    clocks.evicted(a, live_key=1.0 + 3.0)  # value 3: aged key 4, flat key 3
    assert (clocks._clock_aged, clocks._clock_flat) == (4.0, 3.0)
    clocks.stamp(b, typical=2.0, tick=100)
    assert clocks._born[b] == (4.0 + 2.0, 3.0)


def test_without_learning_or_without_a_horizon_the_clock_never_changes() -> None:
    for clocks in (AgingClocks(HORIZON, learn=False), AgingClocks(0, learn=True)):
        idents = entries(20)
        values = {ident: float(i) for i, ident in enumerate(idents)}
        for tick, ident in enumerate(idents):
            clocks.stamp(ident, typical=5.0, tick=tick)
        current, heap = live(clocks, values)
        aged = clocks.aged
        for ident in idents:
            assert not clocks.observe_hit(ident, current, heap)
        assert clocks.aged == aged and clocks.switches == 0 and clocks.score == 0.0
    assert not AgingClocks(0, learn=True).aged  # no horizon: GreedyDual's clock alone


def old_and_valuable_stream(hits_on_old: bool) -> AgingClocks:
    """Half the entries were stamped long ago with a high value, half just now with a low one
    (so the aged clock ranks the young ones higher, the flat one the old ones). Hits go to
    the old ones or to the young ones."""
    clocks = AgingClocks(HORIZON, learn=True)
    old, young = entries(40), entries(40)
    values = {ident: 10.0 for ident in old} | {ident: 1.0 for ident in young}
    for ident in old:
        clocks.stamp(ident, typical=10.0, tick=0)
    for ident in young:
        clocks.stamp(ident, typical=10.0, tick=10 * HORIZON)  # aged: born 100 later
    current, heap = live(clocks, values)
    for ident in (old if hits_on_old else young) * 2:
        if clocks.observe_hit(ident, current, heap):
            break
    return clocks


def test_hits_on_old_valuable_entries_switch_to_the_flat_clock() -> None:
    clocks = old_and_valuable_stream(hits_on_old=True)
    assert not clocks.aged and clocks.switches == 1 and clocks.score < -aging.SWITCH_AT


def test_hits_on_young_entries_keep_the_aged_clock() -> None:
    clocks = old_and_valuable_stream(hits_on_old=False)
    assert clocks.aged and clocks.switches == 0 and clocks.score > 0


def test_a_switch_keeps_every_value_and_moves_to_the_other_born_time() -> None:
    clocks = AgingClocks(HORIZON, learn=True)
    idents = entries(5)
    for tick, ident in enumerate(idents):
        clocks.stamp(ident, typical=4.0, tick=tick * 30)
    aged_keys = {ident: clocks.born(ident) + 1.5 for ident in idents}
    clocks.aged = False  # what a switch does
    for ident in idents:
        flat_born = clocks._born[ident][1]
        assert clocks.rebased(ident, aged_keys[ident]) == pytest.approx(flat_born + 1.5)


def test_a_hit_is_scored_against_the_entries_randrange_draws() -> None:
    """The sample of a hit is what ``random.Random(0).randrange(len(heap))`` draws, one entry
    per draw, so the score (and every result that depends on it) is the sampler's."""
    clocks = AgingClocks(HORIZON, learn=True)
    idents = entries(37)  # not a power of two: some draws are rejected and drawn again
    values = {ident: float(1 + i % 7) for i, ident in enumerate(idents)}
    for tick, ident in enumerate(idents):
        clocks.stamp(ident, typical=3.0, tick=tick * 11)
    current, heap = live(clocks, values)
    hit = idents[5]
    aged_hit, flat_hit = clocks._keys(clocks._born[hit], current[hit][-1])
    rng = random.Random(0)
    below_aged = below_flat = drawn = 0
    for _ in range(clocks.samples):
        key, _, node, slot = heap[rng.randrange(len(heap))]
        if (node, slot) == hit:
            continue
        other_aged, other_flat = clocks._keys(clocks._born[(node, slot)], key[-1])
        drawn += 1
        below_aged += other_aged < aged_hit
        below_flat += other_flat < flat_hit
    clocks.observe_hit(hit, current, heap)
    assert drawn > 0
    assert clocks.score == (below_aged - below_flat) / drawn


class BruteClocks:
    """Both clocks from the definition: each is the largest key evicted so far on its scale;
    an entry's born time is its clock at its last stamp (aged: plus typical * tick / H)."""

    def __init__(self) -> None:
        self.level = [0.0, 0.0]
        self.born: dict[int, tuple[float, float]] = {}

    def stamp(self, i: int, typical: float, tick: int) -> None:
        self.born[i] = (self.level[0] + typical * tick / HORIZON, self.level[1])

    def evict(self, i: int, value: float) -> None:
        born = self.born.pop(i)
        self.level = [max(self.level[c], born[c] + value) for c in (0, 1)]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("sef"), st.integers(0, 7), st.integers(1, 50))))
def test_the_clocks_match_a_brute_force_model(ops: list[tuple[str, int, int]]) -> None:
    """Random stamps and evictions (values 1..50), the live clock flipped at random: both
    clocks and every born time equal the brute-force model's."""
    clocks, brute = AgingClocks(HORIZON, learn=True), BruteClocks()
    idents = entries(8)
    values: dict[int, float] = {}
    for tick, (op, i, value) in enumerate(ops):
        if op == "s":
            clocks.stamp(idents[i], typical=float(value), tick=tick)
            brute.stamp(i, float(value), tick)
            values[i] = float(value)
        elif op == "e" and i in values:
            clocks.evicted(idents[i], clocks.born(idents[i]) + values[i])
            brute.evict(i, values.pop(i))
        elif op == "f":
            clocks.aged = not clocks.aged
        assert clocks._clock_aged == pytest.approx(brute.level[0])
        assert clocks._clock_flat == pytest.approx(brute.level[1])
        for j in values:
            assert clocks._born[idents[j]] == pytest.approx(brute.born[j])


def chat_stream(cache_budget_turns: int, seed: int) -> tuple[ValueEviction, float]:
    """Conversations that come back after many others (each turn extends its own history):
    the flat clock's case. Returns the policy after the stream and the reuse reached."""
    s = spec()
    budget = (
        s.kv_bytes_per_token * 300 * cache_budget_turns + s.state_bytes * 2 * cache_budget_turns
    )
    cache = build_cache(s, budget, "hycache", adaptive=False)
    policy = cache.eviction
    assert isinstance(policy, ValueEviction)
    rng = random.Random(seed)
    histories: list[list[int]] = [[] for _ in range(12)]
    for _ in range(160):
        random_turn(cache, histories, rng, (20, 60), 8)
        for ident, key in policy._current.items():  # every live key is on the live clock
            value = key[-1] - policy._aging.born(ident)
            assert value >= 0.0
    return policy, cache.stats().reused_tokens


def test_the_learned_clock_keeps_the_budget_and_every_key_on_the_live_clock() -> None:
    switched = 0
    for seed in range(3):
        policy, reused = chat_stream(cache_budget_turns=6, seed=seed)
        assert reused > 0
        switched += policy._aging.switches
    assert switched > 0, "no stream switched the clock: the check above never ran on a switch"
