"""SWA: sliding-window KV. Position p is reusable when the window before it is still live.

With window W the model attends W keys including the query, so resuming at prefix length p
needs KV of positions ``[max(0, p - W + 1), p)``. Dropped (tombstoned) ranges are nodes whose
SWA data is ``None``; the tree splits nodes so a node is either wholly live or wholly dropped.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from hycache.components.full import PagedKVComponent
from hycache.memory.base import PageStore
from hycache.tree.node import Node


class SlidingWindowComponent(PagedKVComponent):
    kind: ClassVar[str] = "swa"
    bounds_kv: ClassVar[bool] = False

    def __init__(
        self,
        store: PageStore,
        window: int,
        *,
        bytes_per_page: int = 0,
        name: str | None = None,
    ) -> None:
        super().__init__(store, bytes_per_page=bytes_per_page, name=name)
        assert window >= 1
        self.window = window

    def deepest_accepted(self, path: Sequence[Node], bound: int) -> int:
        """Deepest page-aligned p <= bound whose last ``window - 1`` positions are all live."""
        need = self.window - 1
        page = self.page_size
        if need == 0:
            return bound
        slot = self.slot
        best = 0
        run_start = 0  # start of the live run we are in (0 = connected to the root)
        for node in path:
            if node.start >= bound:
                break
            if node.data[slot] is None:
                run_start = node.end
                continue
            top = min(node.end, bound)
            candidate = top - top % page
            if candidate - run_start >= need or run_start == 0:
                best = candidate
        return best

    def __repr__(self) -> str:
        return f"SlidingWindowComponent(window={self.window})"
