"""Engine mode: a request no cache of this size can hold runs uncached and alone."""

from __future__ import annotations

from hycache.cache.presets import build_cache
from hycache.sim.cost import CostModel
from hycache.sim.hardware import hardware
from hycache.sim.replay import replay_engine
from hycache.sim.request import Request
from hycache.spec.model import load_spec


def request(rid: str, tokens: list[int], out: int, arrival: float) -> Request:
    return Request.of(rid, tokens, [7] * out, arrival)


def test_an_oversized_request_waits_for_the_batch_and_then_runs_alone() -> None:
    spec = load_spec("qwen3-next-80b-a3b")
    cost = CostModel(spec, hardware("h200"))
    capacity = spec.kv_bytes_per_token * 3000 + spec.state_bytes * 4
    small = request("small", list(range(1000)), 200, 0.0)
    huge = request("huge", list(range(5000, 14000)), 10, 0.001)
    result = replay_engine(
        build_cache(spec, capacity, "hycache", track_ids=False),
        [small, huge],
        cost,
        reject_oversized=True,
    )
    assert result.rejected == 1 and result.capacity_overrun_bytes == 0
    ttft_small, ttft_huge = result.ttft_samples
    alone = cost.prefill_time(0, 9000)
    # it waited for the small request's 200 decode steps, then prefilled by itself
    assert ttft_huge > ttft_small + 199 * cost.decode_time([1000]) * 0.9
    assert ttft_huge >= alone


def test_publishing_at_prefill_end_lets_requests_in_flight_share() -> None:
    """docqa at a generous capacity: with publishing, questions on a document that arrive
    while an earlier question decodes already reuse the document."""
    from hycache.sim.workloads import generate

    spec = load_spec("qwen3-next-80b-a3b")
    cost = CostModel(spec, hardware("h200"))
    rates = {}
    for publish in (False, True):
        cache = build_cache(spec, 20 * 10**9, "hycache", track_ids=False)
        result = replay_engine(cache, generate("docqa", requests=60, seed=0), cost, publish=publish)
        assert result.capacity_overrun_bytes == 0
        cache.check_integrity()
        rates[publish] = result.token_hit_rate
    assert rates[True] > rates[False]
