"""An unbounded, accounting-only store: ids from a counter, nothing ever refused."""

from __future__ import annotations

from collections.abc import Sequence

from hycache.errors import IntegrityError


class UnboundedStore:
    """Page and slot ids without a budget (unlimited-capacity simulation, tests, benchmarks).

    Ids are never reused, so a stale id held by mistake can never alias live data.
    """

    def __init__(self) -> None:
        self._next_page = 0
        self._next_slot = 0
        self._pages_in_use = 0
        self._slots_in_use = 0

    def alloc_pages(self, count: int) -> range:
        if not (count >= 0):
            raise IntegrityError("broken invariant: count >= 0")
        first = self._next_page
        self._next_page += count
        self._pages_in_use += count
        return range(first, first + count)

    def free_pages(self, pages: Sequence[int]) -> None:
        self._pages_in_use -= len(pages)
        if not (self._pages_in_use >= 0):
            raise IntegrityError("freed more pages than were allocated")

    @property
    def pages_in_use(self) -> int:
        return self._pages_in_use

    def alloc_slot(self) -> int:
        slot = self._next_slot
        self._next_slot += 1
        self._slots_in_use += 1
        return slot

    def free_slot(self, slot: int) -> None:
        if not (0 <= slot < self._next_slot):
            raise IntegrityError("broken invariant: 0 <= slot < self._next_slot")
        self._slots_in_use -= 1
        if not (self._slots_in_use >= 0):
            raise IntegrityError("freed more slots than were allocated")

    @property
    def slots_in_use(self) -> int:
        return self._slots_in_use

    def check_integrity(self) -> None:
        if not (0 <= self._pages_in_use <= self._next_page):
            raise IntegrityError("broken invariant: 0 <= self._pages_in_use <= self._next_page")
        if not (0 <= self._slots_in_use <= self._next_slot):
            raise IntegrityError("broken invariant: 0 <= self._slots_in_use <= self._next_slot")
