"""The memory contract shared by components and pools.

Components never own memory; they ask a store for ids and give them back:

* a :class:`PageStore` hands out page ids, one page holding ``page_size`` tokens of one
  attention group's KV (all its layers);
* a :class:`SlotStore` hands out slot ids, one slot holding one sequence's recurrent state of
  one recurrent group (all its layers).

Accounting-only stores (the simulator) just count; tensor-backed stores (the engine) map the
same ids to tensors. Every store must keep ``free + cached + in_use == total`` and never hand
out more bytes than its budget; ``check_integrity()`` checks that (raising IntegrityError).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol


class PageStore(Protocol):
    """Hands out KV page ids. ``alloc_pages`` raises CapacityError when it cannot.

    The ids come as any sliceable sequence (a ``range`` when they are contiguous)."""

    def alloc_pages(self, count: int) -> Sequence[int]: ...

    def free_pages(self, pages: Sequence[int]) -> None: ...

    @property
    def pages_in_use(self) -> int: ...


class SlotStore(Protocol):
    """Hands out recurrent-state slot ids. ``alloc_slot`` raises CapacityError when it cannot."""

    def alloc_slot(self) -> int: ...

    def free_slot(self, slot: int) -> None: ...

    @property
    def slots_in_use(self) -> int: ...
