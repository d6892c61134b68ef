"""Cache statistics, kept apart the way vLLM and SGLang users asked for them."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from hycache.memory.pool import MemoryPool


@dataclass
class Counters:
    """Mutable running totals inside the cache; read them through :class:`CacheStats`."""

    requests: int = 0
    waits: int = 0
    aborts: int = 0
    prompt_tokens: int = 0
    kv_matched_tokens: int = 0
    reused_tokens: int = 0
    requests_hit: int = 0
    component_hits: Counter[str] = field(default_factory=Counter)
    component_misses: Counter[str] = field(default_factory=Counter)
    evictions: Counter[str] = field(default_factory=Counter)
    evicted_bytes: int = 0
    cow_copies: int = 0
    checkpoints_recorded: int = 0
    checkpoints_skipped: int = 0
    offgrid_dropped: int = 0
    offgrid_misplaced: int = 0
    states_inserted: int = 0
    states_rejected: int = 0
    states_duplicate: int = 0
    states_capped: int = 0
    reason_inserted: Counter[str] = field(default_factory=Counter)
    reason_hits: Counter[str] = field(default_factory=Counter)
    reason_skipped: Counter[str] = field(default_factory=Counter)
    in_place_tokens: int = 0
    published_reused_tokens: int = 0


@dataclass(frozen=True)
class ReasonCounts:
    """One checkpoint reason's states: stored in the cache, resumed from (a hit), and skipped
    (planned, but no state slot could be had even after eviction)."""

    inserted: int
    hits: int
    skipped: int

    def as_json(self) -> dict[str, int]:
        return {"inserted": self.inserted, "hits": self.hits, "skipped": self.skipped}

    def __reduce__(self) -> tuple[type[ReasonCounts], tuple[int, int, int]]:
        # by the constructor: the compiled build's frozen dataclasses refuse the default
        # unpickling, which sets each field (results cross processes with ``--jobs``)
        return ReasonCounts, (self.inserted, self.hits, self.skipped)


@dataclass(frozen=True)
class MemoryUsage:
    """Bytes charged now: KV pages, states (cached and in flight), everything, the budget."""

    kv_bytes: int
    state_bytes: int
    used_bytes: int
    budget_bytes: int


@dataclass(frozen=True)
class CacheStats:
    """A snapshot. ``recompute_tokens``: attention matched but no usable state there.
    ``in_place_tokens``: recomputed tokens whose queries read cached attention KV in place
    (no pages of their own). ``published_reused_tokens``: reused tokens that a request still
    in flight had published past its own hit (reused before it finished)."""

    requests: int
    waits: int
    aborts: int
    prompt_tokens: int
    kv_matched_tokens: int
    reused_tokens: int
    recompute_tokens: int
    requests_hit: int
    component_hits: dict[str, int]
    component_misses: dict[str, int]
    evictions: dict[str, int]
    evicted_bytes: int
    cow_copies: int
    checkpoints_recorded: int
    checkpoints_skipped: int
    offgrid_dropped: int
    offgrid_misplaced: int
    states_inserted: int
    states_rejected: int
    states_duplicate: int
    states_capped: int
    kv_bytes: int
    state_bytes: int
    used_bytes: int
    peak_bytes: int
    budget_bytes: int
    padding_waste_bytes: int
    in_place_tokens: int = 0
    published_reused_tokens: int = 0
    #: per checkpoint reason (``branch``, ``tail``, ``final``, ...), what became of
    #: its states; the skipped ones add up to ``checkpoints_skipped``
    reasons: dict[str, ReasonCounts] = field(default_factory=dict)

    @property
    def token_hit_rate(self) -> float:
        return self.reused_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    @property
    def kv_hit_rate(self) -> float:
        return self.kv_matched_tokens / self.prompt_tokens if self.prompt_tokens else 0.0


def snapshot(c: Counters, pool: MemoryPool, usage: MemoryUsage) -> CacheStats:
    """The statistics of a cache whose running totals are ``c``."""
    return CacheStats(
        requests=c.requests,
        waits=c.waits,
        aborts=c.aborts,
        prompt_tokens=c.prompt_tokens,
        kv_matched_tokens=c.kv_matched_tokens,
        reused_tokens=c.reused_tokens,
        recompute_tokens=c.kv_matched_tokens - c.reused_tokens,
        requests_hit=c.requests_hit,
        component_hits=dict(c.component_hits),
        component_misses=dict(c.component_misses),
        evictions=dict(c.evictions),
        evicted_bytes=c.evicted_bytes,
        cow_copies=c.cow_copies,
        checkpoints_recorded=c.checkpoints_recorded,
        checkpoints_skipped=c.checkpoints_skipped,
        offgrid_dropped=c.offgrid_dropped,
        offgrid_misplaced=c.offgrid_misplaced,
        states_inserted=c.states_inserted,
        states_rejected=c.states_rejected,
        states_duplicate=c.states_duplicate,
        states_capped=c.states_capped,
        kv_bytes=usage.kv_bytes,
        state_bytes=usage.state_bytes,
        used_bytes=usage.used_bytes,
        peak_bytes=sum(pool.peak.values()),
        budget_bytes=usage.budget_bytes,
        padding_waste_bytes=pool.padding_waste_bytes(),
        in_place_tokens=c.in_place_tokens,
        published_reused_tokens=c.published_reused_tokens,
        reasons={
            reason: ReasonCounts(
                c.reason_inserted[reason], c.reason_hits[reason], c.reason_skipped[reason]
            )
            for reason in sorted({*c.reason_inserted, *c.reason_hits, *c.reason_skipped})
        },
    )
