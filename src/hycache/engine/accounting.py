"""``MemoryCheck``: the engine's setup and per-request memory checks.

Contract: the tensors behind the pool's ids are exactly the bytes the pool charges for (or
fewer), the cache's unit kinds are the model's, and after every request the pool holds its
invariants within its budget (``IntegrityError`` otherwise; never ``assert``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hycache.errors import ConfigError, IntegrityError

if TYPE_CHECKING:
    from hycache.cache.facade import HybridPrefixCache
    from hycache.engine.store import TensorStore


class MemoryCheck:
    """The pool's accounting checked against the store's tensors."""

    def __init__(self, cache: HybridPrefixCache, store: TensorStore, *, check_tree: bool) -> None:
        self.cache = cache
        self.store = store
        self.check_tree = check_tree

    def check_setup(self) -> None:
        """The cache's unit kinds are the model's, and every unit's tensors are exactly the
        bytes the pool charges it for (or fewer: vLLM's padding). ConfigError otherwise."""
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

    def check(self) -> None:
        """The pool's invariants hold and nothing exceeds the budget (IntegrityError)."""
        pool = self.cache.pool
        pool.check_integrity()
        for resource, used in pool.used.items():
            if used > pool.budgets[resource]:
                raise IntegrityError(f"{resource}: {used} B used of {pool.budgets[resource]} B")
        live = self.live_tensor_bytes()
        if not live <= pool.used_bytes <= pool.budget_bytes:
            raise IntegrityError(
                f"tensors {live} B, pool charges {pool.used_bytes} B, budget {pool.budget_bytes} B"
            )
        if self.check_tree:
            self.cache.check_integrity()
