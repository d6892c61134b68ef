"""Byte-accounted memory pools: one class, three layouts (see :mod:`hycache.memory.layouts`).

A pool has one or more *resources*, each a byte budget, and charges every *unit kind* to one
resource at a fixed (possibly padded) byte cost:

* unit kind ``"full"`` / ``"swa"``: one KV page (``page_size`` tokens, all layers of the group);
* unit kind ``"recurrent"``: one state (all recurrent layers of one sequence).

Units are either *cached* (owned by the tree) or *in use* (held by a running request); the
pool does not care which, the cache does. Invariants (``check_integrity``): for every resource
``used <= budget`` and ``free + used == budget``; every live id is unique per id space.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from hycache.errors import CapacityError, IntegrityError


@dataclass(frozen=True)
class UnitCost:
    """How a unit kind is charged: ``charged`` bytes of ``resource`` per unit, of which
    ``data`` bytes hold data (the rest is padding)."""

    resource: str
    charged: int
    data: int

    def __post_init__(self) -> None:
        if not (0 < self.data <= self.charged):
            raise IntegrityError(f"a unit cost must hold 0 < data <= charged: {self}")


class _IdSpace:
    """Ids from a counter, reusing freed ones first (so ids stay dense for tensor backing).

    With ``track=False`` (accounting-only simulation) ids are not remembered: every allocation
    returns ``range(count)``, which costs nothing however many pages a node holds."""

    def __init__(self, track: bool = True) -> None:
        self.track = track
        self.next = 0
        self.free: list[int] = []
        self.live = 0

    def take(self, count: int) -> Sequence[int]:
        if not self.track:
            self.live += count
            return range(count)
        reuse = min(count, len(self.free))
        ids: list[int] = self.free[len(self.free) - reuse :]
        del self.free[len(self.free) - reuse :]
        fresh = count - reuse
        if fresh:
            ids.extend(range(self.next, self.next + fresh))
            self.next += fresh
        self.live += count
        return ids

    def give(self, ids: Sequence[int]) -> None:
        if self.track:
            self.free.extend(ids)
        self.live -= len(ids)
        if not (self.live >= 0):
            raise IntegrityError("broken invariant: self.live >= 0")


class MemoryPool:
    """Budgeted pool. ``alloc`` never exceeds a budget: it raises CapacityError instead, so the
    cache must evict first (``shortfall`` says how much)."""

    def __init__(
        self,
        layout: str,
        budgets: Mapping[str, int],
        costs: Mapping[str, UnitCost],
        *,
        details: Mapping[str, int | float] | None = None,
        track_ids: bool = True,
    ) -> None:
        for kind, cost in costs.items():
            if cost.resource not in budgets:
                raise IntegrityError(f"{kind} charged to unknown resource")
        self.layout = layout
        self.budgets = dict(budgets)
        self.costs = dict(costs)
        self.details = dict(details or {})
        self.used = dict.fromkeys(self.budgets, 0)
        self.units = dict.fromkeys(self.costs, 0)
        self.peak = dict.fromkeys(self.budgets, 0)
        self.track_ids = track_ids
        self._ids = {kind: _IdSpace(track_ids) for kind in self.costs}

    # ------------------------------------------------------------------ queries
    @property
    def budget_bytes(self) -> int:
        return sum(self.budgets.values())

    @property
    def used_bytes(self) -> int:
        return sum(self.used.values())

    def resource_of(self, kind: str) -> str:
        return self.costs[kind].resource

    def unit_bytes(self, kind: str) -> int:
        """Bytes charged per unit of ``kind``."""
        return self.costs[kind].charged

    def free_bytes(self, resource: str) -> int:
        return self.budgets[resource] - self.used[resource]

    def demand_bytes(self, demand: Mapping[str, int]) -> dict[str, int]:
        """Bytes per resource that ``demand`` (units per kind) needs."""
        need = dict.fromkeys(self.budgets, 0)
        costs = self.costs
        for kind, count in demand.items():
            if count:
                cost = costs[kind]
                need[cost.resource] += count * cost.charged
        return need

    def shortfall(self, demand: Mapping[str, int]) -> dict[str, int]:
        """Bytes per resource that must be freed before ``demand`` fits (only positive ones)."""
        short = {}
        budgets, used = self.budgets, self.used
        for resource, need in self.demand_bytes(demand).items():
            if need:
                missing = need - (budgets[resource] - used[resource])  # - free_bytes
                if missing > 0:
                    short[resource] = missing
        return short

    def fits_empty(self, demand: Mapping[str, int]) -> bool:
        """Whether ``demand`` fits into the whole budget (nothing else held)."""
        need = self.demand_bytes(demand)
        return all(need[r] <= self.budgets[r] for r in need)

    def padding_waste_bytes(self) -> int:
        """Bytes charged but holding no data, over all live units."""
        return sum(n * (self.costs[k].charged - self.costs[k].data) for k, n in self.units.items())

    # ------------------------------------------------------------------ mutation
    def alloc(self, kind: str, count: int) -> Sequence[int]:
        """Take ``count`` units of ``kind``; CapacityError (nothing taken) if they do not fit."""
        if not (count >= 0):
            raise IntegrityError("broken invariant: count >= 0")
        cost = self.costs[kind]
        need = count * cost.charged
        if need > self.free_bytes(cost.resource):
            raise CapacityError(
                f"{self.layout} pool: {count} {kind} unit(s) need {need} B of {cost.resource}, "
                f"{self.free_bytes(cost.resource)} B free"
            )
        self.used[cost.resource] += need
        self.peak[cost.resource] = max(self.peak[cost.resource], self.used[cost.resource])
        self.units[kind] += count
        return self._ids[kind].take(count)

    def free(self, kind: str, ids: Sequence[int]) -> None:
        """Give back units of ``kind``."""
        cost = self.costs[kind]
        self.used[cost.resource] -= len(ids) * cost.charged
        self.units[kind] -= len(ids)
        self._ids[kind].give(ids)
        if not (self.used[cost.resource] >= 0 and self.units[kind] >= 0):
            raise IntegrityError(
                "broken invariant: self.used[cost.resource] >= 0 and self.units[kind] >= 0"
            )

    def page_store(self, kind: str) -> PoolPageStore:
        return PoolPageStore(self, kind)

    def slot_store(self, kind: str) -> PoolSlotStore:
        return PoolSlotStore(self, kind)

    def check_integrity(self) -> None:
        """Check conservation and budgets (free + used == budget, used <= budget)."""
        charged = dict.fromkeys(self.budgets, 0)
        for kind, n in self.units.items():
            charged[self.costs[kind].resource] += n * self.costs[kind].charged
            ids = self._ids[kind]
            if not (ids.live == n):
                raise IntegrityError(f"{kind}: {ids.live} live ids for {n} units")
            if not (not ids.track or ids.live + len(ids.free) == ids.next):
                raise IntegrityError(f"{kind}: ids leaked")
        for resource, budget in self.budgets.items():
            used = self.used[resource]
            if not (charged[resource] == used):
                raise IntegrityError(f"{resource}: charged {charged[resource]} != {used}")
            if not (0 <= used <= budget):
                raise IntegrityError(f"{resource}: {used} B used of {budget} B")
            if not (self.free_bytes(resource) + used == budget):
                raise IntegrityError("broken invariant: self.free_bytes(resource) + used == budget")

    def describe(self) -> str:
        parts = [f"{r}={self.used[r]}/{self.budgets[r]}B" for r in self.budgets]
        return f"{self.layout}({', '.join(parts)})"


class PoolPageStore:
    """A :class:`~hycache.memory.base.PageStore` view of one KV unit kind of a pool."""

    def __init__(self, pool: MemoryPool, kind: str) -> None:
        self.pool = pool
        self.kind = kind

    def alloc_pages(self, count: int) -> Sequence[int]:
        return self.pool.alloc(self.kind, count)

    def free_pages(self, pages: Sequence[int]) -> None:
        self.pool.free(self.kind, pages)

    @property
    def pages_in_use(self) -> int:
        return self.pool.units[self.kind]


class PoolSlotStore:
    """A :class:`~hycache.memory.base.SlotStore` view of the state unit kind of a pool."""

    def __init__(self, pool: MemoryPool, kind: str) -> None:
        self.pool = pool
        self.kind = kind

    def alloc_slot(self) -> int:
        return self.pool.alloc(self.kind, 1)[0]

    def free_slot(self, slot: int) -> None:
        self.pool.free(self.kind, [slot])

    @property
    def slots_in_use(self) -> int:
        return self.pool.units[self.kind]
