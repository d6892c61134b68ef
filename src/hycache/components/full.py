"""FULL: full-attention KV. Any prefix is reusable; the match length is where KV stops."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from hycache.components.base import Component
from hycache.errors import IntegrityError
from hycache.memory.base import PageStore
from hycache.tree.node import Node


class PagedKVComponent(Component):
    """KV kept in pages of ``page_size`` tokens: ``node.data[slot]`` is the node's page id list.

    Shared by FULL and SWA; they differ only in the validator.
    """

    def __init__(
        self, store: PageStore, *, bytes_per_page: int = 0, name: str | None = None
    ) -> None:
        super().__init__(name)
        self.store = store
        self.bytes_per_page = bytes_per_page

    def fill(self, node: Node) -> bool:
        slot = self.slot
        if node.data[slot] is not None:
            return False
        node.data[slot] = self.store.alloc_pages(node.length // self.page_size)
        return True

    def units_for(self, tokens: int) -> int:
        return tokens // self.page_size

    def split(self, upper: Node, lower: Node) -> None:
        slot = self.slot
        pages: Sequence[int] | None = lower.data[slot]
        if pages is None:
            return
        cut = upper.length // self.page_size
        upper.data[slot] = pages[:cut]
        lower.data[slot] = pages[cut:]

    def release(self, node: Node) -> None:
        slot = self.slot
        pages: Sequence[int] | None = node.data[slot]
        if pages is not None:
            node.data[slot] = None
            self.store.free_pages(pages)

    def bytes_on(self, node: Node) -> int:
        pages: Sequence[int] | None = node.data[self.slot]
        return 0 if pages is None else len(pages) * self.bytes_per_page

    def check_node(self, node: Node) -> None:
        pages: Sequence[int] | None = node.data[self.slot]
        if pages is not None and len(pages) * self.page_size != node.length:
            raise IntegrityError(
                f"{self.name}: {node} holds {len(pages)} pages for {node.length} tokens"
            )

    def deepest_accepted(self, path: Sequence[Node], bound: int) -> int:
        raise NotImplementedError

    def deepest_accepted_in(self, path: Sequence[Node], bound: int, slots: Sequence[int]) -> int:
        raise NotImplementedError


class FullComponent(PagedKVComponent):
    """Accepts every prefix whose KV is present from the root down."""

    kind: ClassVar[str] = "full"
    bounds_kv: ClassVar[bool] = True

    def deepest_accepted(self, path: Sequence[Node], bound: int) -> int:
        slot = self.slot
        for node in path:
            if node.data[slot] is None:
                return min(node.start, bound)
            if node.end >= bound:
                return bound
        return bound

    def deepest_accepted_in(self, path: Sequence[Node], bound: int, slots: Sequence[int]) -> int:
        for node in path:
            data = node.data
            if all(data[s] is None for s in slots):
                return min(node.start, bound)
            if node.end >= bound:
                return bound
        return bound
