"""Setup and per-request memory checks of the engine (a mixin of ``Engine``).

Contract: the tensors behind the pool's ids are exactly the bytes the pool charges for (or
fewer), the cache's unit kinds are the model's, and after every request the pool holds its
invariants within its budget. Needs ``cache``, ``store`` and ``check_tree`` set by
``Engine.__init__``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hycache.errors import ConfigError

if TYPE_CHECKING:
    from hycache.cache.facade import HybridPrefixCache
    from hycache.engine.store import TensorStore


class AccountingMixin:
    """The pool's accounting checked against the store's tensors."""

    cache: HybridPrefixCache
    store: TensorStore
    check_tree: bool

    # ------------------------------------------------------------------ setup checks
    def _check_accounting(self) -> None:
        """The cache's unit kinds are the model's, and every unit's tensors are exactly the
        bytes the pool charges it for (or fewer: vLLM's padding)."""
        pool = self.cache.pool
        kinds = set(self.store.pages) | ({"recurrent"} if self.store.slots else set())
        if kinds != set(pool.costs):
            raise ConfigError(
                f"cache unit kinds {sorted(pool.costs)} do not match the model's {sorted(kinds)}"
            )
        for kind, pages in self.store.pages.items():
            data = pool.costs[kind].data
            if pages.bytes_per_page != data:
                raise ConfigError(
                    f"{kind} page: the model's tensors are {pages.bytes_per_page} B, the pool "
                    f"accounts {data} B"
                )
        if self.store.slots is not None:
            data = pool.costs["recurrent"].data
            if self.store.slots.bytes_per_slot != data:
                raise ConfigError(
                    f"state slot: the model's tensors are {self.store.slots.bytes_per_slot} B, "
                    f"the pool accounts {data} B"
                )

    def live_tensor_bytes(self) -> int:
        """Bytes of tensor data behind the ids the pool has handed out right now."""
        pool = self.cache.pool
        total = sum(pool.units[k] * p.bytes_per_page for k, p in self.store.pages.items())
        if self.store.slots is not None:
            total += pool.units["recurrent"] * self.store.slots.bytes_per_slot
        return total

    def check_memory(self) -> None:
        """Assert the pool's invariants and that nothing exceeds the budget."""
        pool = self.cache.pool
        pool.check_integrity()
        for resource, used in pool.used.items():
            assert used <= pool.budgets[resource], f"{resource}: {used} > {pool.budgets[resource]}"
        assert self.live_tensor_bytes() <= pool.used_bytes <= pool.budget_bytes
        if self.check_tree:
            self.cache.check_integrity()
