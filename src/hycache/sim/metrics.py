"""What one replay measured, and how it is summarised."""

from __future__ import annotations

from dataclasses import dataclass, field

from hycache.cache.stats import ReasonCounts


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0..100) by linear interpolation; 0.0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100.0
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


@dataclass
class Recorder:
    """Mutable accumulation during a replay."""

    ttft_s: list[float] = field(default_factory=list)
    flops_saved: float = 0.0
    prefill_flops: float = 0.0
    kv_bytes_peak: int = 0
    state_bytes_peak: int = 0
    used_bytes_peak: int = 0
    overrun_bytes: int = 0
    rejected: int = 0
    #: (t, kv bytes, state bytes) at every sample whose bytes differ from the point before:
    #: the full-resolution series, as a step function
    timeline: list[tuple[float, int, int]] = field(default_factory=list)
    #: the last point offered to ``keep`` (where the step function ends)
    timeline_end: tuple[float, int, int] | None = None

    def sample(self, now: float, kv: int, state: int, used: int, budget: int) -> None:
        self.kv_bytes_peak = max(self.kv_bytes_peak, kv)
        self.state_bytes_peak = max(self.state_bytes_peak, state)
        self.used_bytes_peak = max(self.used_bytes_peak, used)
        self.overrun_bytes = max(self.overrun_bytes, used - budget)

    def keep(self, now: float, kv: int, state: int) -> None:
        """Add a timeline point unless the bytes held are those of the last point."""
        point = (now, kv, state)
        if not self.timeline or self.timeline[-1][1:] != point[1:]:
            self.timeline.append(point)
        self.timeline_end = point

    def closed_timeline(self) -> tuple[tuple[float, int, int], ...]:
        """The timeline with its end: the last point offered to ``keep`` when ``timeline``
        does not hold it already."""
        end = self.timeline_end
        if end is None or (self.timeline and self.timeline[-1] == end):
            return tuple(self.timeline)
        return (*self.timeline, end)


@dataclass(frozen=True)
class DisaggStats:
    """What a ``disagg`` replay measured beyond the prefill instance (``hycache.sim.disagg``):
    the bytes the prefill instance sent (KV and states, the analytic minimum: no padding), the
    decode instance's own hits, capacity and peak, and the transfer times."""

    decode_capacity_bytes: int
    bytes_moved: int
    kv_bytes_moved: int
    state_bytes_moved: int
    #: requests that moved anything / whose prefill did not run (the decode hit covered N-1)
    transfers: int
    prefill_skipped: int
    decode_hit_tokens: int
    prompt_tokens: int
    decode_peak_bytes: int
    decode_overrun_bytes: int
    decode_evictions: int
    decode_rejected: int
    transfer_p50_s: float
    transfer_p95_s: float
    #: bytes moved per request, in replay order
    moved_samples: tuple[int, ...] = ()
    #: where the decode side resumed (``hycache.sim.disagg.PULLS``) and the prompt tokens it
    #: computed itself (one per request with ``last``)
    pull: str = "last"
    decode_prefill_tokens: int = 0

    @property
    def bytes_moved_mean(self) -> float:
        """Bytes moved per request (every request, those that moved nothing included)."""
        return self.bytes_moved / len(self.moved_samples) if self.moved_samples else 0.0

    @property
    def decode_hit_rate(self) -> float:
        """The decode instance's hit tokens as a fraction of all prompt tokens."""
        return self.decode_hit_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    def as_json(self) -> dict[str, object]:
        return {
            "pull": self.pull,
            "decode_capacity_bytes": self.decode_capacity_bytes,
            "decode_prefill_tokens": self.decode_prefill_tokens,
            "bytes_moved": self.bytes_moved,
            "bytes_moved_mean": self.bytes_moved_mean,
            "kv_bytes_moved": self.kv_bytes_moved,
            "state_bytes_moved": self.state_bytes_moved,
            "transfers": self.transfers,
            "prefill_skipped": self.prefill_skipped,
            "decode_hit_tokens": self.decode_hit_tokens,
            "decode_hit_rate": self.decode_hit_rate,
            "decode_peak_bytes": self.decode_peak_bytes,
            "decode_overrun_bytes": self.decode_overrun_bytes,
            "decode_evictions": self.decode_evictions,
            "decode_rejected": self.decode_rejected,
            "transfer_p50_s": self.transfer_p50_s,
            "transfer_p95_s": self.transfer_p95_s,
        }


@dataclass(frozen=True)
class PolicyResult:
    """One policy's replay. Rates are fractions of prompt tokens (or requests)."""

    policy: str
    mode: str
    capacity_bytes: int
    requests: int
    prompt_tokens: int
    token_hit_rate: float
    kv_hit_rate: float
    request_hit_rate: float
    recompute_tokens: int
    prefill_flops_saved: float
    prefill_flops: float
    ttft_p50_s: float
    ttft_p95_s: float
    ttft_mean_s: float
    peak_bytes: int
    capacity_overrun_bytes: int
    kv_bytes_peak: int
    state_bytes_peak: int
    evictions: int
    padding_waste_bytes: int
    states_inserted: int
    checkpoints_skipped: int
    offgrid_dropped: int
    waits: int
    rejected: int
    wall_s: float
    knobs: dict[str, object]
    #: (t, KV bytes, state bytes) held, at every change and at the end (``Recorder.keep``); t is
    #: the request index in serial and disagg mode, simulated seconds in engine mode
    timeline: tuple[tuple[float, int, int], ...] = ()
    ttft_samples: tuple[float, ...] = ()
    #: lower tiers: ``tier_hit_tokens``, ``tier_bytes_peak``, ``bytes_moved``, ... (None: off)
    tiers: dict[str, object] | None = None
    #: a ``disagg`` replay: the transfer and the decode instance; the fields above describe
    #: the prefill instance (its cache, hits and prefill work), TTFT the whole request
    disagg: DisaggStats | None = None
    #: per checkpoint reason, its states stored, resumed from and skipped for memory
    reasons: dict[str, ReasonCounts] = field(default_factory=dict)
    #: what the one-time bootstrap chose (hycache: the knobs of its winning candidate,
    #: marconi: ``alpha``) and ``window_requests``, the requests it replayed; empty when nothing
    #: was tuned (the knobs were set, or the preset has no bootstrap)
    tuned: dict[str, object] = field(default_factory=dict)

    def as_json(self) -> dict[str, object]:
        """The fields the ``--json`` report promises, plus context; with lower tiers also
        ``tier_hit_tokens``, ``tier_bytes_peak``, ``bytes_moved`` (per direction), and
        ``capacity_overrun_bytes`` then counts every tier. A ``disagg`` replay adds
        ``DisaggStats.as_json`` (``bytes_moved``: prefill -> decode bytes, one integer) and
        ``prefill_token_hit_rate``, and ``capacity_overrun_bytes`` counts both instances. A
        bootstrap's choice adds ``tuned``."""
        out = self._json()
        if self.tuned:
            out["tuned"] = self.tuned
        if self.disagg is not None:
            out["prefill_token_hit_rate"] = self.token_hit_rate
            out.update(self.disagg.as_json())
            out["capacity_overrun_bytes"] = (
                self.capacity_overrun_bytes + self.disagg.decode_overrun_bytes
            )
        if self.tiers is not None:
            t = self.tiers
            out["tier_hit_tokens"] = t["tier_hit_tokens"]
            out["tier_bytes_peak"] = t["tier_bytes_peak"]
            out["bytes_moved"] = t["bytes_moved"]
            out["tier_budget_bytes"] = t["tier_budget_bytes"]
            over = t["tier_overrun_bytes"]
            below = sum(over.values()) if isinstance(over, dict) else 0
            out["capacity_overrun_bytes"] = self.capacity_overrun_bytes + below
        return out

    def _json(self) -> dict[str, object]:
        return {
            "token_hit_rate": self.token_hit_rate,
            "kv_hit_rate": self.kv_hit_rate,
            "request_hit_rate": self.request_hit_rate,
            "recompute_tokens": self.recompute_tokens,
            "prefill_flops_saved": self.prefill_flops_saved,
            "ttft_p50_s": self.ttft_p50_s,
            "ttft_p95_s": self.ttft_p95_s,
            "peak_bytes": self.peak_bytes,
            "capacity_overrun_bytes": self.capacity_overrun_bytes,
            "kv_bytes_peak": self.kv_bytes_peak,
            "state_bytes_peak": self.state_bytes_peak,
            "evictions": self.evictions,
            "wall_s": self.wall_s,
            "mode": self.mode,
            "capacity_bytes": self.capacity_bytes,
            "requests": self.requests,
            "prompt_tokens": self.prompt_tokens,
            "padding_waste_bytes": self.padding_waste_bytes,
            "states_inserted": self.states_inserted,
            "waits": self.waits,
            "rejected": self.rejected,
            "knobs": self.knobs,
            "checkpoint_reasons": {r: c.as_json() for r, c in self.reasons.items()},
        }
