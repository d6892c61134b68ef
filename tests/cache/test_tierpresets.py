"""Each preset's tiers tell the truth about today: every anchor failure reproduces with its
knob off and disappears with it on (SGLang #33713, #40680, #39851/#24561; vLLM's and
LMCache's KV-only stores), and marconi stays single-tier."""

from __future__ import annotations

from hycache.cache.facade import HybridPrefixCache
from hycache.cache.presets import build_cache, resolve_knobs
from hycache.cache.tierconfig import TierConfig
from hycache.cache.tierpresets import preset_tiers
from tests.cache.test_facade import seq, tiny_spec
from tests.cache.test_tiers import run


def tiered(preset: str, capacity: int, host: int, **knobs: object) -> HybridPrefixCache:
    page = {"vllm": "block_size", "lmcache": "block_size"}.get(preset, "page_size")
    size = 1 if preset == "sglang" else 16  # sglang's default strategy needs page 1
    cache = build_cache(tiny_spec(), capacity, preset, **{page: size}, **knobs)
    base = TierConfig(host, state_share=0.5, page_tokens=16)
    tiers = preset_tiers(base, preset, resolve_knobs(preset, knobs))
    if tiers is not None:
        tiers.attach(cache)
    return cache


def pushed_off_then_back(cache: HybridPrefixCache) -> int:
    """A 96-token prompt, pushed off the device by ten others, asked again: tokens of the
    second request's hit that came from below the device."""
    first = seq(1000, 96)
    run(cache, first)
    for base in range(2000, 12000, 1000):
        run(cache, seq(base, 96))
    assert cache.lookup([*first, 7])[0] == 0
    lease = run(cache, [*first, 7])
    return sum(lease.tier_tokens.values())


def capacity() -> int:
    spec = tiny_spec()
    return 3 * (96 * spec.kv_bytes_per_token + 3 * spec.state_bytes) + 4 * spec.state_bytes


def test_sglang_33713_states_pruned_so_no_host_hit() -> None:
    host = 1 << 30
    assert pushed_off_then_back(tiered("sglang", capacity(), host)) == 0
    fixed = tiered("sglang", capacity(), host, hicache_fix_33713=True)
    assert pushed_off_then_back(fixed) == 96


def test_kv_only_stores_give_no_hybrid_hit_below_the_device() -> None:
    """vLLM's offloading connector and LMCache store KV only: the KV of the evicted prompt
    sits on the host, but without its state nothing is reused (never a garbled hit)."""
    host = 1 << 30
    for preset, knob in (("vllm", "offload_states"), ("lmcache", "store_states")):
        kv_only = tiered(preset, capacity(), host)
        assert pushed_off_then_back(kv_only) == 0
        assert kv_only.tiering is not None and kv_only.tiering.tiers[0].count("full") > 0
        assert kv_only.tiering.tiers[0].count("recurrent") == 0
        # vLLM keeps the prompt's state at its last whole block: 80 of 96 tokens
        assert pushed_off_then_back(tiered(preset, capacity(), host, **{knob: True})) == 80


def test_sglang_40680_interior_state_dropped_under_write_back() -> None:
    hits = []
    for fix in (False, True):
        cache = tiered(
            "sglang",
            1 << 30,
            1 << 30,
            hicache_write_policy="write_back",
            hicache_fix_33713=True,
            hicache_fix_40680=fix,
        )
        prefix = seq(1000, 64)
        run(cache, prefix)  # its state at 64, interior once the next request branches
        run(cache, prefix + seq(3000, 32))
        node = next(n for n in cache.tree.match([*prefix, 1], None).path if n.end == 64)
        assert node.children and cache.recurrent is not None and cache.recurrent.has(node)
        cache.accounting.evict(node, cache.recurrent)
        hits.append(run(cache, prefix + seq(4000, 32)).hit)
    assert hits[0] < 64 and hits[1] == 64


def test_sglang_39851_host_state_pool_sized_like_kv_overruns_the_promise() -> None:
    spec = tiny_spec()
    host = 8 * (16 * spec.kv_bytes_per_token) + 8 * spec.state_bytes
    overrun = []
    for fix in (False, True):
        cache = tiered("sglang", capacity(), host, hicache_fix_33713=True, hicache_fix_39851=fix)
        for base in range(1000, 31000, 1000):
            run(cache, seq(base, 96))
            cache.check_integrity()
        assert cache.tiering is not None
        overrun.append(cache.tiering.tiers[0].overrun_bytes())
    assert overrun[0] > 0 and overrun[1] == 0


def test_marconi_stays_single_tier() -> None:
    cache = tiered("marconi", capacity(), 1 << 30)
    assert cache.tiering is None
