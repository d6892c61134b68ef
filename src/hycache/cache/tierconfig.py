"""``TierConfig``: the settings of a host tier under the device (checked when built)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from hycache.cache.facade import HybridPrefixCache
from hycache.cache.host import HostTier
from hycache.errors import ConfigError
from hycache.memory.layouts import host_pool
from hycache.memory.pool import MemoryPool
from hycache.policy.movement.base import MovementPolicy
from hycache.policy.movement.registry import movement_policy
from hycache.spec.model import ModelSpec

#: host bytes given to states by default (SGLang sizes its host state pool like the KV pool,
#: #24561 / #39851; a share keeps both within one host budget)
DEFAULT_STATE_SHARE = 0.2


@dataclass(frozen=True)
class TierConfig:
    """``host_bytes``: the host tier's budget; ``state_share``: the part of it for states
    (the rest holds KV pages); ``movement``: ``write_back`` or ``write_through``;
    ``demote_interior_states=False`` reproduces SGLang #40680 (interior states dropped)."""

    host_bytes: int
    state_share: float = DEFAULT_STATE_SHARE
    movement: str = "write_back"
    demote_interior_states: bool = True

    def __post_init__(self) -> None:
        if isinstance(self.host_bytes, bool) or not isinstance(self.host_bytes, int):
            raise ConfigError(f"host_bytes must be a whole number, got {self.host_bytes!r}")
        if self.host_bytes < 0:
            raise ConfigError(f"host_bytes must be >= 0, got {self.host_bytes}")
        if not (math.isfinite(self.state_share) and 0.0 <= self.state_share <= 1.0):
            raise ConfigError(f"state_share must be in [0, 1], got {self.state_share}")
        self.movement_policy()

    def movement_policy(self) -> MovementPolicy:
        return movement_policy(self.movement, demote_interior_states=self.demote_interior_states)

    def host_pool(self, spec: ModelSpec, page_size: int) -> MemoryPool:
        return host_pool(spec, self.host_bytes, page_size, self.state_share)

    def attach(self, cache: HybridPrefixCache) -> HybridPrefixCache:
        """Put this host tier under ``cache`` (pages of the cache's page size); returns it."""
        cache.attach_host(
            HostTier(self.host_pool(cache.spec, cache.page_size)), self.movement_policy()
        )
        return cache
