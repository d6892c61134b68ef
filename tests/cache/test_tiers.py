"""The host tier under the device: demotion (interior states too: SGLang #40680), the match
over device ∪ host, load-back, per-tier hit tokens, and both budgets kept at every step."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hycache.cache.facade import HybridPrefixCache
from hycache.cache.lease import Lease
from hycache.cache.presets import build_cache
from hycache.cache.tierconfig import TierConfig
from hycache.errors import CacheUsageError, ConfigError
from tests.cache.test_facade import seq, tiny_spec


def run(cache: HybridPrefixCache, tokens: list[int], new: list[int] | None = None) -> Lease:
    lease = cache.admit(tokens, max_new_tokens=len(new or []))
    assert isinstance(lease, Lease)
    cache.record_planned(lease, up_to=len(tokens))
    if new:
        cache.extend(lease, new)
        cache.record_planned(lease)
    cache.finish(lease)
    cache.check_integrity()
    return lease


def tiered(
    capacity: int, host: int, *, interior: bool = True, preset: str = "marconi"
) -> HybridPrefixCache:
    cache = build_cache(tiny_spec(), capacity, preset, page_size=16)
    tiers = TierConfig(host, state_share=0.5, demote_interior_states=interior, page_tokens=16)
    return tiers.attach(cache)


@pytest.mark.parametrize("interior", [True, False])
def test_demoted_interior_state_is_found_on_host_and_reused(interior: bool) -> None:
    """#40680: under write_back an interior state evicted from the device must reach the
    host; ``demote_interior_states=False`` reproduces the drop (no host hit)."""
    cache = tiered(1 << 30, 1 << 30, interior=interior)
    prefix = seq(1000, 64)
    run(cache, prefix + seq(2000, 32))
    run(cache, prefix + seq(3000, 32))  # branch point at 64: a state on an interior node
    found = cache.tree.match([*prefix, 1], None)
    node = next(n for n in found.path if n.end == 64)
    assert node.children and cache.recurrent is not None and cache.recurrent.has(node)
    cache.accounting.evict(node, cache.recurrent)  # the device evicts the state alone
    assert cache.lookup(prefix + seq(4000, 32))[0] < 64
    lease = run(cache, prefix + seq(4000, 32))
    assert cache.tiering is not None
    counters = cache.tiering.tiers[0].counters
    if interior:
        assert lease.hit == 64 and counters.states_up == 1 and lease.loaded_bytes > 0
    else:
        assert lease.hit < 64 and counters.states_up == 0


def test_evicted_kv_and_state_come_back_from_host() -> None:
    spec = tiny_spec()
    request = 96 * spec.kv_bytes_per_token + 3 * spec.state_bytes
    cache = tiered(3 * request, 40 * request)
    first = seq(1000, 96)
    run(cache, first)
    for base in range(2000, 12000, 1000):
        run(cache, seq(base, 96))  # pushes ``first`` off the device
    assert cache.lookup([*first, 7])[0] == 0
    lease = run(cache, [*first, 7])
    assert cache.tiering is not None
    assert lease.hit == 96 and lease.tier_tokens == {"host": 96}
    assert cache.tiering.hit_tokens["host"] >= 96


def test_tier_config_checked() -> None:
    with pytest.raises(ConfigError):
        TierConfig(-1)
    with pytest.raises(ConfigError):
        TierConfig(10, state_share=1.5)
    with pytest.raises(ConfigError):
        TierConfig(10, movement="nope")
    cache = tiered(1 << 30, 1 << 20)
    with pytest.raises(CacheUsageError):
        TierConfig(1 << 20).attach(cache)
    with pytest.raises(ConfigError):
        TierConfig(1 << 20).attach(build_cache(tiny_spec(swa_window=16), 1 << 30, "marconi"))


PROMPTS = st.lists(
    st.tuples(st.integers(0, 3), st.integers(1, 6), st.integers(0, 2), st.integers(0, 20)),
    min_size=1,
    max_size=25,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    prompts=PROMPTS,
    preset=st.sampled_from(["vllm", "sglang", "marconi", "hycache"]),
    movement=st.sampled_from(["write_back", "write_through"]),
    host_units=st.integers(0, 12),
    share=st.sampled_from([0.0, 0.3, 1.0]),
)
def test_random_workload_keeps_both_budgets(
    prompts: list[tuple[int, int, int, int]],
    preset: str,
    movement: str,
    host_units: int,
    share: float,
) -> None:
    """Shared prefixes (one of 4), random lengths and outputs: after every request both pools
    are within budget, the cache is whole, and hits per tier sum to the reused tokens."""
    spec = tiny_spec()
    page = 16 * spec.kv_bytes_per_token
    cache = build_cache(spec, 40 * page + 6 * spec.state_bytes, preset)
    tiers = TierConfig(host_units * (page + spec.state_bytes), share, movement)
    tiers.attach(cache)
    assert cache.tiering is not None
    host = cache.tiering.tiers[0]
    for shared, pages, tail, out in prompts:
        tokens = seq(10_000 * (shared + 1), 16 * pages) + seq(500 + 37 * tail, 5 + tail)
        run(cache, tokens, seq(90_000, out))
        for kind, budget in host.budget.items():
            assert budget is not None and host.used[kind] <= budget
        assert cache.pool.used_bytes <= cache.pool.budget_bytes
    hits = cache.tiering.hit_tokens
    assert hits["device"] + hits["host"] == cache.stats().reused_tokens
    assert host.overrun_bytes() == 0


def test_write_through_selective_copies_only_what_was_hit() -> None:
    """SGLang's write_through_selective: nothing reaches the host on a first insert; once a
    prefix is hit, the next insert copies the path up to it."""
    cache = build_cache(tiny_spec(), 1 << 30, "marconi", page_size=16)
    TierConfig(1 << 30, movement="write_through_selective", page_tokens=16).attach(cache)
    assert cache.tiering is not None
    host = cache.tiering.tiers[0]
    prefix = seq(1000, 64)
    run(cache, prefix)
    assert host.count("full") == 0
    run(cache, prefix + seq(3000, 32))  # resumes from the prefix's state: its first hit
    assert host.count("full") == 64 // 16  # the hit prefix, not the new 32 tokens
    every = build_cache(tiny_spec(), 1 << 30, "marconi", page_size=16)
    TierConfig(1 << 30, movement="write_through", page_tokens=16).attach(every)
    run(every, prefix + seq(2000, 32))
    assert every.tiering is not None and every.tiering.tiers[0].count("full") == 96 // 16
