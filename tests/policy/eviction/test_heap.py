"""Parking in the heap policies: attention KV popped on a node with children waits with its
node instead of being pushed back every round. The victims must be exactly those of the plain
lazy heap, which pushes every skipped entry back when the round ends (the reference below).

Both run the same random conversations at a tight budget, side by side, through real caches;
every victim, in order, and every cache's content after every request must agree.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hycache.cache.config import CacheConfig
from hycache.cache.facade import HybridPrefixCache
from hycache.components.base import Component
from hycache.components.recurrent import RecurrentComponent
from hycache.memory.layouts import shared_pool, split_pool
from hycache.policy.admission import AlwaysAdmit
from hycache.policy.eviction.gdsf import GDSFEviction
from hycache.policy.eviction.heap import HeapEviction
from hycache.policy.eviction.lru import LRUEviction
from hycache.policy.eviction.value import ValueEviction
from hycache.tree.node import Node
from tests.policy.test_policies import Fixed, serve_turn, spec


def stash_every_skipped(policy: HeapEviction, resource: str) -> tuple[Node, Component] | None:
    """The plain lazy heap: a popped entry that cannot go now (pinned, or KV on a node with
    children) is stashed and pushed back at the end of the round, whatever the reason."""
    heap = policy._heaps.get(resource)
    current = policy._current
    while heap:
        entry = heapq.heappop(heap)
        key, _, node, slot = entry
        ident = (node, slot)
        if current.get(ident) != key:
            continue
        component = policy._components[slot]
        if node.parent is None or node.data[slot] is None:
            del current[ident]
            continue
        if policy.session_aware and (key[0] == 1.0) != policy._view.is_live(node):
            refiled = (1.0 if key[0] == 0.0 else 0.0, *key[1:])
            current[ident] = refiled
            heapq.heappush(heap, (refiled, next(policy._seq), node, slot))
            continue
        if policy.pinned(node, component) or (
            not isinstance(component, RecurrentComponent) and node.children
        ):
            policy._stash.append((resource, entry))
            continue
        del current[ident]
        policy.evicted(node, component, key)
        return node, component
    return None


class StashingLRU(LRUEviction):
    def next_victim(self, resource: str) -> tuple[Node, Component] | None:
        return stash_every_skipped(self, resource)


class StashingGDSF(GDSFEviction):
    def next_victim(self, resource: str) -> tuple[Node, Component] | None:
        return stash_every_skipped(self, resource)


class StashingValue(ValueEviction):
    def next_victim(self, resource: str) -> tuple[Node, Component] | None:
        self._settle()
        return stash_every_skipped(self, resource)


#: (name, parking policy, reference); the value policy with a learned clock samples heap
#: positions, which parking moves: it runs with the clock fixed (aged, and flat)
PAIRS: list[tuple[str, Callable[[], HeapEviction], Callable[[], HeapEviction]]] = [
    ("lru", LRUEviction, StashingLRU),
    (
        "lru-state-only",
        lambda: LRUEviction(refresh_state_path=False),
        lambda: StashingLRU(refresh_state_path=False),
    ),
    (
        "gdsf-session",
        lambda: GDSFEviction(session_aware=True),
        lambda: StashingGDSF(session_aware=True),
    ),
    (
        "value-aged",
        lambda: ValueEviction(learn_aging=False),
        lambda: StashingValue(learn_aging=False),
    ),
    (
        "value-flat",
        lambda: ValueEviction(learn_aging=False, aging_horizon=0),
        lambda: StashingValue(learn_aging=False, aging_horizon=0),
    ),
]


def cache_with(policy: HeapEviction, *, shared: bool, pages: int) -> HybridPrefixCache:
    s = spec()
    budget = pages * 16 * s.kv_bytes_per_token + 3 * s.state_bytes
    budget *= 1 if shared else 3  # a split pool gives the states a fixed share of it
    pool = shared_pool(s, budget, 16) if shared else split_pool(s, budget, page_size=16)
    return HybridPrefixCache(
        s,
        pool,
        CacheConfig(page_size=16),
        checkpoint=Fixed(32),
        admission=AlwaysAdmit(),
        eviction=policy,
    )


def content(cache: HybridPrefixCache) -> list[tuple[int, int, tuple[bool, ...]]]:
    """Every node as (start, end, which components hold data), in a fixed order."""
    rows = [
        (n.start, n.end, tuple(c.has(n) for c in cache.tree.components))
        for n in cache.tree.iter_nodes()
    ]
    return sorted(rows)


def replay_side_by_side(name: str, seed: int, *, shared: bool, pages: int, turns: int) -> int:
    """Serve the same random conversations through both; returns how many entries parked."""
    make, make_reference = next((a, b) for n, a, b in PAIRS if n == name)
    policy, reference = make(), make_reference()
    caches = [cache_with(p, shared=shared, pages=pages) for p in (policy, reference)]
    victims: list[list[tuple[int, int, str]]] = [[], []]
    for cache, seen in zip(caches, victims, strict=True):
        cache.accounting.on_evict = lambda node, c, seen=seen: seen.append(
            (node.start, node.end, c.name)
        )
    rngs = [random.Random(seed), random.Random(seed)]
    sessions: list[list[list[int]]] = [[[] for _ in range(4)] for _ in caches]
    parked = 0
    for _ in range(turns):
        for cache, rng, histories in zip(caches, rngs, sessions, strict=True):
            history = histories[rng.randrange(len(histories))]
            if len(history) > 150 or rng.random() < 0.1:
                history[:] = history[: rng.randrange(len(history) + 1)]  # a branch
            history.extend(rng.randrange(1000) for _ in range(rng.randint(1, 60)))
            serve_turn(cache, history, rng, rng.randint(0, 20))
        parked = max(parked, sum(len(e) for e in policy._parked.values()))
        assert victims[0] == victims[1]
        assert content(caches[0]) == content(caches[1])
    return parked


@pytest.mark.parametrize("name", [p[0] for p in PAIRS])
@pytest.mark.parametrize("shared", [True, False])
def test_parking_evicts_what_the_plain_heap_evicts(name: str, shared: bool) -> None:
    parked = replay_side_by_side(name, 7, shared=shared, pages=30, turns=150)
    assert parked > 0  # the parking path ran (else this test proves nothing)


@settings(max_examples=25, deadline=None)
@given(
    name=st.sampled_from([p[0] for p in PAIRS]),
    seed=st.integers(0, 10**6),
    shared=st.booleans(),
    pages=st.integers(24, 60),
)
def test_parking_equals_the_plain_heap_on_random_streams(
    name: str, seed: int, shared: bool, pages: int
) -> None:
    replay_side_by_side(name, seed, shared=shared, pages=pages, turns=60)


def test_parked_entries_wait_for_their_node_and_all_come_back() -> None:
    """A chain's inner KV is parked with its node while the node has children; as the chain
    is taken from its leaf up, every parked entry comes back and the whole tree can go.
    (GDSF: a chain's inner KV stands for more prefill than its leaf, so it is popped first.)"""
    policy = GDSFEviction()
    cache = cache_with(policy, shared=True, pages=1000)
    history: list[int] = []
    for turn in range(4):
        history.extend(range(100 * turn, 100 * turn + 40))
        serve_turn(cache, history, random.Random(turn), 0)
    resource = next(iter(policy._heaps))
    kv_victim = None
    while kv_victim is None:
        victim = policy.next_victim(resource)
        assert victim is not None
        if not isinstance(victim[1], RecurrentComponent):
            kv_victim = victim
        cache.accounting.evict(*victim)
    policy.end_round()
    assert policy._parked
    assert all(node.children for node in policy._parked)
    rounds = 0
    while (victim := policy.next_victim(resource)) is not None:
        while victim is not None:  # one round; a parent freed in it waits for the next
            cache.accounting.evict(*victim)
            victim = policy.next_victim(resource)
        policy.end_round()
        rounds += 1
    policy.end_round()
    assert rounds > 1  # some parents became leaves only during a round
    assert not policy._parked
    assert not any(n.parent is not None for n in cache.tree.iter_nodes())
    cache.check_integrity()


# ====================================================================== compaction's pace
class CountingLRU(LRUEviction):
    compactions = 0

    def _compact(self) -> None:
        self.compactions += 1
        super()._compact()


class CountingValue(ValueEviction):
    compactions = 0

    def _compact(self) -> None:
        self.compactions += 1
        super()._compact()


#: policies whose victims do not depend on where entries sit in a heap (no sampler reads it)
LAYOUT_FREE: dict[str, Callable[[], CountingLRU | CountingValue]] = {
    "lru": CountingLRU,
    "lru-state-only": lambda: CountingLRU(refresh_state_path=False),
    "value-aged": lambda: CountingValue(learn_aging=False),
    "value-flat": lambda: CountingValue(aging_horizon=0),
}


@pytest.mark.parametrize("name", list(LAYOUT_FREE))
@pytest.mark.parametrize("shared", [True, False])
def test_a_layout_free_policy_evicts_the_same_whenever_it_compacts(name: str, shared: bool) -> None:
    """Such a policy compacts less often (``LAYOUT_FREE_COMPACT_FACTOR``); with the pace of
    the others (2) every victim, in order, and the content after every request are the same."""
    policies = [LAYOUT_FREE[name](), LAYOUT_FREE[name]()]
    assert policies[0].compact_factor > 2
    policies[1].compact_factor = 2
    caches = [cache_with(p, shared=shared, pages=30) for p in policies]
    victims: list[list[tuple[int, int, str]]] = [[], []]
    for cache, seen in zip(caches, victims, strict=True):
        cache.accounting.on_evict = lambda node, c, seen=seen: seen.append(
            (node.start, node.end, c.name)
        )
    rngs = [random.Random(3), random.Random(3)]
    histories: list[list[list[int]]] = [[[] for _ in range(4)] for _ in caches]
    for _ in range(300):
        for cache, rng, sessions in zip(caches, rngs, histories, strict=True):
            history = sessions[rng.randrange(len(sessions))]
            if len(history) > 150 or rng.random() < 0.1:
                history[:] = history[: rng.randrange(len(history) + 1)]
            history.extend(rng.randrange(1000) for _ in range(rng.randint(1, 60)))
            serve_turn(cache, history, rng, rng.randint(0, 20))
        assert victims[0] == victims[1]
        assert content(caches[0]) == content(caches[1])
    counts = [p.compactions for p in policies]
    assert 0 < counts[0] < counts[1]  # both compacted, at different times
    assert len(victims[0]) > 100


def test_a_learned_clock_keeps_the_default_pace() -> None:
    """The aging clocks' sampler draws heap positions: when a compaction runs changes what it
    draws, so the learned clock compacts at the default pace."""
    assert ValueEviction().compact_factor == 2
    assert ValueEviction(aging_horizon=0).compact_factor > 2
    assert GDSFEviction().compact_factor == 2  # a compaction forgets its frequencies
