"""When ``MarconiEviction`` stamps a node: as the Marconi artifact's V2/V3 keep
``last_access_time`` in ``radix_cache_hybrid.py`` (creation, the deepest matched node on a
lookup, the deepest node an insert covers whole; never the nodes an insert merely walks over).
"""

from __future__ import annotations

from hycache.cache.config import CacheConfig
from hycache.cache.facade import HybridPrefixCache
from hycache.cache.lease import Lease
from hycache.memory.layouts import shared_pool
from hycache.policy.admission import AlwaysAdmit
from hycache.policy.checkpoint.marconi import MarconiPlanner
from hycache.policy.eviction.marconi import MarconiEviction
from hycache.tree.node import Node
from tests.policy.test_policies import BIG, marconi_cache, run, seq, spec, state_at, victims


def policy_of(cache: HybridPrefixCache) -> MarconiEviction:
    eviction = cache.eviction
    if not isinstance(eviction, MarconiEviction):
        raise TypeError("not a Marconi cache")
    return eviction


def node_at(cache: HybridPrefixCache, start: int, end: int) -> Node:
    """The only node covering ``[start, end)``."""
    found = [n for n in cache.tree.iter_nodes() if (n.start, n.end) == (start, end)]
    if len(found) != 1:
        raise LookupError(f"{len(found)} nodes cover [{start}, {end})")
    return found[0]


def marconi_planned(alpha: float = 0.0) -> HybridPrefixCache:
    """The marconi preset's planner and eviction on the tiny model: a state at the branch
    point a lookup finds and one at the end of a page-aligned request."""
    s = spec()
    return HybridPrefixCache(
        s,
        shared_pool(s, BIG, 16),
        CacheConfig(page_size=16),
        checkpoint=MarconiPlanner(),
        admission=AlwaysAdmit(),
        eviction=MarconiEviction(alpha),
    )


def test_walked_nodes_keep_their_stamp_and_the_hit_node_is_refreshed() -> None:
    """States at 32 and 64 on one path; a later request extends the path past 64. The
    lookup refreshes the node at 64 (the deepest matched), the insert refreshes it again (the
    deepest node it covers whole) and creates the new leaf; the node at 32 gets KV put on it
    again by the insert but keeps the stamp of its creation (the old rule re-stamped it)."""
    cache = marconi_cache(0.0, every=32)
    policy = policy_of(cache)
    run(cache, [*seq(0, 64), 1])
    created = policy.context.clock
    at32, at64 = node_at(cache, 0, 32), node_at(cache, 32, 64)
    assert policy.stamp(at32) == policy.stamp(at64) == created

    lease = cache.admit(seq(0, 64) + seq(100, 32) + [1])
    assert isinstance(lease, Lease) and lease.hit == 64
    looked_up = policy.context.clock
    assert policy.stamp(at64) == looked_up > created
    assert policy.stamp(at32) == created
    cache.record_planned(lease)
    cache.finish(lease)
    inserted = policy.context.clock
    assert inserted > looked_up
    assert policy.stamp(at32) == created  # walked over: unchanged
    assert policy.stamp(at64) == inserted  # the deepest node the insert covers whole
    assert policy.stamp(node_at(cache, 64, 96)) == inserted  # created by the insert


def test_the_old_state_in_the_middle_of_an_extended_path_goes_first() -> None:
    """The consequence at alpha 0: a session's path at 32 -> 64, an unrelated leaf, then the
    session extends its path. The state at 32, stamped when created, is older than the
    unrelated leaf and goes first (when every node the insert walked got a fresh stamp, the
    unrelated leaf went first)."""
    cache = marconi_cache(0.0, every=32)
    run(cache, [*seq(0, 64), 1])
    run(cache, [*seq(5000, 32), 1])
    run(cache, seq(0, 64) + seq(100, 32) + [1])
    assert victims(cache, "bytes", 1) == [(32, "recurrent")]
    assert state_at(cache, seq(5000, 32)) and state_at(cache, seq(0, 64))


def test_a_repeated_request_refreshes_the_node_its_insert_covers() -> None:
    """The same 64 tokens twice: the second lookup matches no state (the last token is never
    matched), but its insert covers the node at 64 whole and refreshes it, as the artifact's
    ``insert`` does through ``match_prefix``; the unrelated leaf in between now goes first."""
    cache = marconi_planned()
    policy = policy_of(cache)
    run(cache, seq(0, 64))
    node = node_at(cache, 0, 64)
    created = policy.stamp(node)
    run(cache, seq(5000, 32))
    lease = run(cache, seq(0, 64))
    assert lease.hit == 0
    assert policy.stamp(node) == policy.context.clock > created
    assert victims(cache, "bytes", 1) == [(32, "full")]  # the unrelated leaf, KV and state
    assert state_at(cache, seq(0, 64))


def test_a_split_stamps_the_new_upper_node_and_the_lower_part_keeps_its_stamp() -> None:
    """A request branches off inside a node: the new upper part (holding the branch state)
    and the new leaf get the insert's stamp; the old lower part keeps the one it had."""
    cache = marconi_planned()
    policy = policy_of(cache)
    run(cache, seq(0, 64))
    old = node_at(cache, 0, 64)
    created = policy.stamp(old)
    run(cache, seq(0, 32) + seq(500, 32))
    inserted = policy.context.clock
    upper = node_at(cache, 0, 32)
    assert old.parent is upper and (old.start, old.end) == (32, 64)
    assert policy.stamp(old) == created
    assert policy.stamp(upper) == inserted
    assert state_at(cache, seq(0, 32))  # the branch state
    leaf = next(n for n in upper.children.values() if n is not old)
    assert policy.stamp(leaf) == inserted


def test_evicting_a_middle_state_merges_stamps_with_the_child() -> None:
    """The artifact merges a single-child node whose state goes into its child, stamped with
    the newer of the two: the node at 32 and its child at 64 end with the child's stamp."""
    cache = marconi_cache(0.0, every=32)
    policy = policy_of(cache)
    run(cache, [*seq(0, 64), 1])
    lease = cache.admit(seq(0, 64) + seq(300, 3))
    assert isinstance(lease, Lease) and lease.hit == 64
    cache.abort(lease)
    at32, at64 = node_at(cache, 0, 32), node_at(cache, 32, 64)
    newer = policy.stamp(at64)
    assert policy.stamp(at32) < newer
    assert victims(cache, "bytes", 1) == [(32, "recurrent")]
    assert policy.stamp(at32) == policy.stamp(at64) == newer
