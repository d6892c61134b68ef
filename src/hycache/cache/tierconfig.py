"""``TierConfig``: the tiers under the device (host, optional storage), checked when built.

Knobs that reproduce the anchors' known failures (each off by default, i.e. fixed):
``demote_states=False`` is SGLang #33713 (Mamba nodes pruned, never demoted: no host hit
for a recurrent model), ``demote_interior_states=False`` is SGLang #40680 (write_back drops
interior states), ``state_pool_like_kv=True`` is SGLang #24561/#39851 (the host state pool
sized like the KV pool: twice the host memory promised).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from hycache.cache.facade import HybridPrefixCache
from hycache.cache.lowertier import LowerTier
from hycache.errors import ConfigError
from hycache.policy.movement.base import MovementPolicy
from hycache.policy.movement.registry import movement_policy
from hycache.spec.model import ModelSpec

#: host bytes given to states by default (SGLang sizes its host state pool like the KV pool,
#: #24561 / #39851; a share keeps both within one host budget)
DEFAULT_STATE_SHARE = 0.2

#: the smallest host page in tokens (rounded up to a multiple of the device page): SGLang
#: HiCache's storage backends and vLLM's offloading connector move KV in pages of this order
#: (one transfer per page); docs/benchmarks.md has the ablation over 16/64/256 tokens
DEFAULT_PAGE_TOKENS = 64

STORAGE_KINDS = ("disk", "remote")

#: SGLang's storage prefetch policies (``--hicache-storage-prefetch-policy``): schedule the
#: request with what has arrived, wait for all of it, or wait at most
#: ``base + per_ki_token * tokens / 1024`` seconds (its default coefficients: 1 s, 0.25 s)
PREFETCH_POLICIES = ("best_effort", "wait_complete", "timeout")


def _bytes(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(f"{name} must be a whole number of bytes >= 0, got {value!r}")
    return value


@dataclass(frozen=True)
class TierConfig:
    """``host_bytes``: the host tier's budget, ``state_share`` of it for states; ``storage``:
    ``disk`` or ``remote`` (None: no storage tier) with ``storage_bytes`` (None: unlimited),
    written through from the host; ``movement``: ``write_back`` or ``write_through`` (device
    to host); ``page_tokens``: the host page; ``prefetch``: how long an admission waits for
    storage (``PREFETCH_POLICIES``; module docstring for the failure knobs)."""

    host_bytes: int
    state_share: float = DEFAULT_STATE_SHARE
    movement: str = "write_back"
    demote_interior_states: bool = True
    demote_states: bool = True
    state_pool_like_kv: bool = False
    storage: str | None = None
    storage_bytes: int | None = None
    page_tokens: int = DEFAULT_PAGE_TOKENS
    prefetch: str = "wait_complete"
    prefetch_timeout_base_s: float = 1.0
    prefetch_timeout_per_ki_token_s: float = 0.25

    def __post_init__(self) -> None:
        _bytes("host_bytes", self.host_bytes)
        if not (math.isfinite(self.state_share) and 0.0 <= self.state_share <= 1.0):
            raise ConfigError(f"state_share must be in [0, 1], got {self.state_share}")
        if self.storage is not None and self.storage not in STORAGE_KINDS:
            raise ConfigError(
                f"unknown storage kind {self.storage!r}; known: {', '.join(STORAGE_KINDS)}"
            )
        if self.storage_bytes is not None:
            _bytes("storage_bytes", self.storage_bytes)
            if self.storage is None:
                raise ConfigError("storage_bytes without a storage kind")
        if isinstance(self.page_tokens, bool) or not isinstance(self.page_tokens, int):
            raise ConfigError(f"page_tokens must be a whole number, got {self.page_tokens!r}")
        if self.page_tokens < 1:
            raise ConfigError(f"page_tokens must be >= 1, got {self.page_tokens}")
        if self.prefetch not in PREFETCH_POLICIES:
            raise ConfigError(
                f"unknown prefetch policy {self.prefetch!r}; known: {', '.join(PREFETCH_POLICIES)}"
            )
        for name in ("prefetch_timeout_base_s", "prefetch_timeout_per_ki_token_s"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ConfigError(f"{name} must be finite and >= 0, got {value!r}")
        self.movement_policy()

    def movement_policy(self) -> MovementPolicy:
        return movement_policy(
            self.movement,
            demote_interior_states=self.demote_interior_states,
            demote_states=self.demote_states,
        )

    def page(self, device_page: int) -> int:
        """The host page: ``page_tokens`` rounded up to a multiple of ``device_page``."""
        return -(-self.page_tokens // device_page) * device_page

    def _tier(self, name: str, spec: ModelSpec, page: int, budget: int | None) -> LowerTier:
        if any(g.kind == "swa" for g in spec.attention_groups):
            raise ConfigError("tiers hold full-attention KV and states; no sliding windows")
        kv_unit = page * sum(g.kv_bytes_per_token for g in spec.attention_groups)
        state = spec.recurrent.state_bytes if spec.recurrent is not None else 0
        if budget is None:
            return LowerTier(
                name, kv_unit=kv_unit, state_unit=state, kv_budget=None, state_budget=None
            )
        if self.state_pool_like_kv and state:
            return LowerTier(
                name,
                kv_unit=kv_unit,
                state_unit=state,
                kv_budget=budget,
                state_budget=budget,
                promised_bytes=budget,
            )
        states = int(budget * self.state_share) // state * state if state else 0
        return LowerTier(
            name, kv_unit=kv_unit, state_unit=state, kv_budget=budget - states, state_budget=states
        )

    def tiers(self, spec: ModelSpec, device_page: int) -> list[LowerTier]:
        page = self.page(device_page)
        out = [self._tier("host", spec, page, self.host_bytes)]
        if self.storage is not None:
            out.append(self._tier("storage", spec, page, self.storage_bytes))
        return out

    def attach(self, cache: HybridPrefixCache) -> HybridPrefixCache:
        """Put these tiers under ``cache``; returns it."""
        tiers = self.tiers(cache.spec, cache.page_size)
        cache.attach_tiers(tiers, self.movement_policy(), self.page(cache.page_size))
        return cache
