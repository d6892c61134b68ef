"""Storage prefetch in the simulator: how much KV an admission may take from the tiers below
the host, and the time that costs.

SGLang prefetches a request's storage hit into the host while the request waits, under one of
three policies (``TierConfig.prefetch``): ``best_effort`` schedules the request with whatever
arrived by then (in serial replay nothing waits, so nothing arrives), ``wait_complete`` waits
for all of it, ``timeout`` waits at most ``base + per_ki_token * tokens / 1024`` seconds. The
host -> device part of a load overlaps the prefill layer by layer
(``CostModel.exposed_load``); the storage part is waited for before the prefill starts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from hycache.cache.lease import Lease
from hycache.cache.tierconfig import TierConfig
from hycache.sim.cost import CostModel


@dataclass(frozen=True)
class Prefetch:
    """A tier configuration's prefetch settings, priced with a cost model."""

    policy: str
    timeout_base_s: float
    timeout_per_ki_token_s: float
    seconds_per_token: float  # storage -> device, one token of KV

    @classmethod
    def of(cls, tiers: TierConfig, cost: CostModel) -> Prefetch:
        per_token = cost.load_time({"storage": cost.spec.kv_bytes_per_token})
        return cls(
            tiers.prefetch,
            tiers.prefetch_timeout_base_s,
            tiers.prefetch_timeout_per_ki_token_s,
            per_token,
        )

    def slow_limit(self, waited_s: float) -> int | None:
        """Tokens of KV a storage prefetch delivers to a request that waited ``waited_s``
        seconds (None: all of them)."""
        if self.policy == "wait_complete" or self.seconds_per_token == 0.0:
            return None
        if self.policy == "best_effort":
            return math.floor(waited_s / self.seconds_per_token)
        # timeout: m tokens load in m * t seconds, and the deadline grows by per_ki / 1024 a token
        slope = self.seconds_per_token - self.timeout_per_ki_token_s / 1024
        if slope <= 0:
            return None
        return math.floor((self.timeout_base_s + waited_s) / slope)

    def ttft_s(self, cost: CostModel, lease: Lease, prefill_s: float, waited_s: float) -> float:
        """Seconds a lease's loads add to its TTFT: the storage part not yet delivered after
        ``waited_s``, plus what the prefill does not hide of the host -> device part."""
        moved = lease.loaded_bytes_by_tier
        if not moved:
            return 0.0
        slow = {t: b for t, b in moved.items() if t != "host"}
        wait = max(0.0, cost.load_time(slow) - waited_s) if slow else 0.0
        # storage data reaches the device over the host link, as host data does
        up = cost.load_time({"host": sum(moved.values())})
        return wait + cost.exposed_load(up, prefill_s)
