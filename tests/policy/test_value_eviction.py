"""hycache's value eviction: marginal saved compute, superseded states, dead tails, re-keying.

Driven through a real cache (entries registered by the normal hooks); victims are asked of the
policy directly and evicted the way the cache does (``victims`` of test_policies).
"""

from __future__ import annotations

import random

import pytest

from hycache.cache.config import CacheConfig
from hycache.cache.facade import HybridPrefixCache
from hycache.cache.presets import build_cache
from hycache.errors import ConfigError
from hycache.memory.layouts import shared_pool
from hycache.policy.admission import AlwaysAdmit
from hycache.policy.eviction.value import ValueEviction
from tests.policy.test_policies import BIG, Fixed, random_turn, run, seq, spec, victims


def make(policy: ValueEviction, *, every: int = 0, page: int = 16) -> HybridPrefixCache:
    s = spec()
    return HybridPrefixCache(
        s,
        shared_pool(s, BIG, page),
        CacheConfig(page_size=page),
        checkpoint=Fixed(every),
        admission=AlwaysAdmit(),
        eviction=policy,
    )


def nodes_by_end(cache: HybridPrefixCache) -> dict[int, object]:
    return {n.end: n for n in cache.tree.iter_nodes()}


def test_a_state_is_superseded_by_a_deeper_state_on_its_chain() -> None:
    """Turn 2 of a conversation extends turn 1: turn 1's state is superseded (its key drops
    below turn 2's), and is the first state to go."""
    policy = ValueEviction(by_reason=False)
    cache = make(policy)
    turn1 = [*seq(0, 256), 1]
    run(cache, turn1)  # state at 256
    assert not policy._superseded(cache.tree.match(seq(0, 256), None).path[-1])
    run(cache, [*seq(0, 256), *seq(900, 256), 1])  # state at 512, same chain
    nodes = {n.end: n for n in cache.tree.iter_nodes()}
    rec = cache.recurrent
    assert rec is not None and rec.has(nodes[256]) and rec.has(nodes[512])
    assert policy._superseded(nodes[256]) and not policy._superseded(nodes[512])
    assert policy.key(nodes[256], rec) < policy.key(nodes[512], rec)
    first_state = next(v for v in victims(cache, "bytes", 4) if v[1] == "recurrent")
    assert first_state == (256, "recurrent")


def test_a_branch_point_state_is_not_superseded() -> None:
    """A state where two prompts diverge serves both: it keeps its full value."""
    policy = ValueEviction(by_reason=False)
    cache = make(policy, every=128)
    run(cache, [*seq(0, 128), *seq(500, 128), 1])
    run(cache, [*seq(0, 128), *seq(700, 128), 1])
    node = cache.tree.match(seq(0, 128), None).path[-1]
    assert node.end == 128 and len(node.children) == 2
    assert not policy._superseded(node)


def test_evicting_the_superseded_state_raises_the_deeper_ones_value() -> None:
    """Once turn 1's state is gone, turn 2's fallback moves up to the root: it is re-keyed
    with the prefill of the whole conversation, at its own last-access clock."""
    policy = ValueEviction(by_reason=False, exponent=1.0)
    cache = make(policy)
    run(cache, [*seq(0, 256), 1])
    run(cache, [*seq(0, 256), *seq(900, 256), 1])
    rec = cache.recurrent
    assert rec is not None
    deep = {n.end: n for n in cache.tree.iter_nodes()}[512]
    before = policy._current[(deep, rec.slot)]
    born = policy._aging.born((deep, rec.slot))  # the aging clock at its insert
    cache.accounting.evict({n.end: n for n in cache.tree.iter_nodes()}[256], rec)
    policy.evicted(deep, rec, before)  # what next_victim reports; re-keys the neighbours
    policy._settle()
    after = policy.key(deep, rec)[-1] - policy._aging.born((deep, rec.slot))  # its value
    flops = cache.spec.prefill_flops
    per_token = policy._kv_per_token
    expected = flops(0, 512) / (rec.bytes_per_state + per_token * 512)
    assert after == pytest.approx(expected, rel=1e-3)
    value_before = flops(256, 256) / (rec.bytes_per_state + per_token * 256)
    assert before[-1] - born == pytest.approx(value_before)


def test_dead_tails_go_before_states() -> None:
    """KV on a leaf holding no state (nothing can resume inside it) is the first victim."""
    policy = ValueEviction(by_reason=False)
    cache = make(policy, every=128)
    run(cache, [*seq(0, 64), *seq(300, 100)])  # a state at 128; KV cached up to 160
    order = victims(cache, "bytes", 2)
    assert order[0] == (160, "full")  # the dead tail
    assert order[1][0] == 128  # then the state (or the leaf holding it, which takes it along)


def test_value_eviction_never_overruns_and_keeps_integrity() -> None:
    """Random conversations through the hycache preset at a tight budget: the pool never
    holds more than its budget and every invariant holds after every request."""
    s = spec()
    budget = s.kv_bytes_per_token * 600 + s.state_bytes * 6
    cache = build_cache(s, budget, "hycache")
    assert isinstance(cache.eviction, ValueEviction)
    rng = random.Random(3)
    sessions: list[list[int]] = [[] for _ in range(5)]
    for _ in range(120):
        history = random_turn(cache, sessions, rng, (5, 80), 10)
        if len(history) > 400:
            history.clear()
    assert cache.stats().reused_tokens > 0


@pytest.mark.parametrize("reason_weight", ["chance", "lineage", "rate"])
def test_a_state_weighs_the_chance_of_one_more_hit_given_those_it_had(
    reason_weight: str,
) -> None:
    """Documents C and A were asked four questions (their states resumed from three times), B
    two; then C's state left the cache and a fourth state was stored. With ``reason_weight``
    "rate" every state weighs its reason's hits per state stored, (7 + 1) / (4 + 2). With
    "chance" the fresh state weighs the chance that a state of its reason is resumed from at
    all, c0 = (3 + 1) / (4 + 2); one resumed from ``k`` times, the share of the states that had
    a ``k``-th hit and settled (left the cache, or had another) that had a (k+1)-th, with c0
    as one more state: A (3 hits; C settled there, with no fourth) (0 + c0) / (1 + 1); B (1
    hit; A and C went on) (2 + c0) / (2 + 1). Either way a branch point's weight counts its
    continuations."""
    policy = ValueEviction(reason_weight=reason_weight)
    cache = make(policy, every=128)
    docs = {"c": (9000, 4), "a": (0, 4), "b": (5000, 2)}
    for start, questions in docs.values():
        for question in range(questions):
            run(cache, [*seq(start, 128), *seq(1000 + 100 * question, 16)])
    node = {
        name: cache.tree.match(seq(start, 128), None).path[-1] for name, (start, _) in docs.items()
    }
    rec = cache.recurrent
    assert rec is not None
    cache.accounting.evict(node["c"], rec)
    run(cache, [*seq(7000, 128), 1])  # a fresh state
    a, b = node["a"], node["b"]
    fresh = cache.tree.match(seq(7000, 128), None).path[-1]
    assert (a.end, len(a.children), b.end, len(b.children), fresh.end) == (128, 4, 128, 2, 128)
    view = policy._view
    assert view.state_reuse_rate(a) == view.state_reuse_rate(b) == pytest.approx(8 / 6)
    assert view.state_hit_chance(fresh) == pytest.approx(4 / 6)
    assert view.state_hit_chance(a) == pytest.approx((0 + 4 / 6) / (1 + 1))
    assert view.state_hit_chance(b) == pytest.approx((2 + 4 / 6) / (2 + 1))
    ratio = policy._state_value(a) / policy._state_value(b)
    if reason_weight in ("chance", "lineage"):  # both resumed from: the same weight
        assert ratio == pytest.approx((4 * (4 / 6) / 2) / (2 * (8 / 3) / 3))
    else:
        assert ratio == pytest.approx(4 / 2)


def test_an_unknown_reason_weight_is_refused() -> None:
    with pytest.raises(ConfigError, match="reason_weight"):
        ValueEviction(reason_weight="odds")
