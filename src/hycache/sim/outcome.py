"""The accounting both replay modes share: usage samples, a replay's result, requests served
uncached and the prefill FLOPs of a lease."""

from __future__ import annotations

from collections.abc import Callable

from hycache.cache.facade import HybridPrefixCache
from hycache.cache.lease import Lease
from hycache.sim.cost import CostModel
from hycache.sim.metrics import PolicyResult, Recorder, percentile
from hycache.sim.request import Request

Tick = Callable[[], None]


def sample_usage(cache: HybridPrefixCache, rec: Recorder, now: float, keep: bool) -> None:
    usage = cache.usage()
    kv, state = usage.kv_bytes, usage.state_bytes
    rec.sample(now, kv, state, usage.used_bytes, usage.budget_bytes)
    if keep:
        rec.keep(now, kv, state)


def policy_result(
    cache: HybridPrefixCache, rec: Recorder, mode: str, wall: float, knobs: dict[str, object]
) -> PolicyResult:
    s = cache.stats()
    return PolicyResult(
        policy=cache.name,
        mode=mode,
        capacity_bytes=s.budget_bytes,
        requests=s.requests,
        prompt_tokens=s.prompt_tokens,
        token_hit_rate=s.token_hit_rate,
        kv_hit_rate=s.kv_hit_rate,
        request_hit_rate=s.requests_hit / s.requests if s.requests else 0.0,
        recompute_tokens=s.recompute_tokens,
        prefill_flops_saved=rec.flops_saved,
        prefill_flops=rec.prefill_flops,
        ttft_p50_s=percentile(rec.ttft_s, 50),
        ttft_p95_s=percentile(rec.ttft_s, 95),
        ttft_mean_s=sum(rec.ttft_s) / len(rec.ttft_s) if rec.ttft_s else 0.0,
        peak_bytes=max(rec.used_bytes_peak, s.peak_bytes),
        capacity_overrun_bytes=max(0, rec.overrun_bytes, s.peak_bytes - s.budget_bytes),
        kv_bytes_peak=rec.kv_bytes_peak,
        state_bytes_peak=rec.state_bytes_peak,
        evictions=sum(s.evictions.values()),
        padding_waste_bytes=s.padding_waste_bytes,
        states_inserted=s.states_inserted,
        checkpoints_skipped=s.checkpoints_skipped,
        offgrid_dropped=s.offgrid_dropped,
        waits=s.waits,
        rejected=rec.rejected,
        wall_s=wall,
        knobs=knobs,
        timeline=rec.closed_timeline(),
        ttft_samples=tuple(rec.ttft_s),
        tiers=cache.tier_stats(),
        reasons=s.reasons,
    )


def reject_uncached(cache: HybridPrefixCache, rec: Recorder, request: Request) -> None:
    """A request larger than the whole cache: served without caching (a miss), counted. The
    caller records its TTFT."""
    rec.rejected += 1
    rec.prefill_flops += cache.spec.prefill_flops(0, request.prompt_len)
    cache.note_uncached_request(request.prompt_len)


def account_prefill(cost: CostModel, rec: Recorder, lease: Lease) -> None:
    """Count the prefill ``lease`` saved and the one it still runs (``cost``'s model's
    FLOPs)."""
    rec.flops_saved += cost.prefill_flops(0, lease.hit)
    rec.prefill_flops += cost.prefill_flops(lease.hit, lease.prompt_len - lease.hit)
