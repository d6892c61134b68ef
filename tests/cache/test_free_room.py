"""The free room the cache offers its planner (``PlanInput.free_states``): what fits now, until
memory first runs short of a demand, and never again after that."""

from __future__ import annotations

from dataclasses import dataclass, field

from hycache.cache.lease import Lease
from hycache.policy.checkpoint.base import PlanInput, PrefillPlan
from hycache.policy.eviction.value import ValueEviction
from tests.cache.test_facade import Points, direct_cache, per_request_bytes, seq, tiny_spec


@dataclass
class Recording(Points):
    """``Points`` that remembers the free room each plan was offered."""

    offered: list[int | None] = field(default_factory=list)

    def plan(self, request: PlanInput) -> PrefillPlan:
        self.offered.append(request.free_states)
        return super().plan(request)


def test_room_is_offered_until_memory_first_runs_short() -> None:
    spec = tiny_spec()
    planner = Recording(every=64)
    probe = direct_cache(spec)
    cache = direct_cache(spec, 6 * per_request_bytes(probe, 256), ValueEviction(), planner=planner)
    short_at: int | None = None
    for i in range(24):
        lease = cache.admit(seq(1000 * (i + 1), 256), max_new_tokens=8)
        assert isinstance(lease, Lease), lease
        cache.record_planned(lease)
        cache.finish(lease)
        cache.check_integrity()
        assert cache.pool.used_bytes <= cache.pool.budget_bytes
        if short_at is None and cache.stats().evicted_bytes:
            short_at = i
    assert short_at is not None, "the budget never ran short: the test proves nothing"
    before, after = planner.offered[:short_at], planner.offered[short_at + 1 :]
    assert before and all(free is not None and free > 0 for free in before)
    # later requests find memory freed by evictions, but are offered none of it
    assert after and all(free is None for free in after)


def test_room_stays_offered_while_memory_is_plentiful() -> None:
    spec = tiny_spec()
    planner = Recording(every=64)
    cache = direct_cache(spec, 1 << 40, ValueEviction(), planner=planner)
    for i in range(8):
        lease = cache.admit(seq(1000 * (i + 1), 256), max_new_tokens=8)
        assert isinstance(lease, Lease), lease
        cache.record_planned(lease)
        cache.finish(lease)
    assert cache.stats().evicted_bytes == 0
    assert all(free is not None and free > 0 for free in planner.offered)
