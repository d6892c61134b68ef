"""Cache statistics, kept apart the way vLLM and SGLang users asked for them."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field


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


@dataclass(frozen=True)
class CacheStats:
    """A snapshot. ``recompute_tokens``: attention matched but no usable state there."""

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

    @property
    def token_hit_rate(self) -> float:
        return self.reused_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    @property
    def kv_hit_rate(self) -> float:
        return self.kv_matched_tokens / self.prompt_tokens if self.prompt_tokens else 0.0
