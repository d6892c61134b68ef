"""RECURRENT: a fixed-size state, reusable only exactly where a checkpoint was copied.

``node.data[slot]`` is the slot id of the state at prefix length ``node.end`` (the state after
consuming the node's last token), or ``None``. States sit at node ends only: putting one inside
an edge first splits the node there (the tree does that).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from hycache.components.base import Component
from hycache.errors import IntegrityError
from hycache.memory.base import SlotStore
from hycache.tree.node import Node


class RecurrentComponent(Component):
    kind: ClassVar[str] = "recurrent"
    pinned_on_path: ClassVar[bool] = False
    marks_resume_point: ClassVar[bool] = True

    def __init__(
        self, store: SlotStore, *, bytes_per_state: int = 0, name: str | None = None
    ) -> None:
        super().__init__(name)
        self.store = store
        self.bytes_per_state = bytes_per_state

    def put(self, node: Node) -> bool:
        """Store a state at ``node.end``; return True if it is new (False: already there)."""
        slot = self.slot
        if node.data[slot] is not None:
            return False
        node.data[slot] = self.store.alloc_slot()
        return True

    def copy_onto(self, node: Node) -> bool:
        return self.put(node)

    def split(self, upper: Node, lower: Node) -> None:
        """The state stays with ``lower`` (it is at the original end); ``upper`` has none."""

    def release(self, node: Node) -> None:
        slot = self.slot
        state: int | None = node.data[slot]
        if state is not None:
            node.data[slot] = None
            self.store.free_slot(state)

    def deepest_accepted(self, path: Sequence[Node], bound: int) -> int:
        slot = self.slot
        for i in range(len(path) - 1, -1, -1):
            node = path[i]
            if node.end <= bound and node.data[slot] is not None:
                return node.end
        return 0

    def deepest_accepted_in(self, path: Sequence[Node], bound: int, slots: Sequence[int]) -> int:
        for i in range(len(path) - 1, -1, -1):
            node = path[i]
            if node.end <= bound and any(node.data[s] is not None for s in slots):
                return node.end
        return 0

    def bytes_on(self, node: Node) -> int:
        return 0 if node.data[self.slot] is None else self.bytes_per_state

    def holder_above(self, node: Node) -> Node | None:
        """The nearest proper ancestor of ``node`` (below the root) holding a state: where a
        request would resume if ``node``'s state were gone. Pure."""
        slot = self.slot
        parent = node.parent
        while parent is not None and parent.parent is not None:
            if parent.data[slot] is not None:
                return parent
            parent = parent.parent
        return None

    def check_node(self, node: Node) -> None:
        state = node.data[self.slot]
        if state is not None and not isinstance(state, int):
            raise IntegrityError(f"{self.name}: {node} holds {state!r}, not a slot id")
        if state is not None and node.parent is None:
            raise IntegrityError(f"{self.name}: a state on a root")

    def adopt(self, node: Node, slot_id: int) -> bool:
        """Store an already allocated state (slot ``slot_id``) at ``node.end``. Returns False
        (and takes nothing) when the node already holds a state: the caller keeps its slot."""
        slot = self.slot
        if node.data[slot] is not None:
            return False
        node.data[slot] = slot_id
        return True

    def state_of(self, node: Node) -> int | None:
        """The slot id of the state at ``node.end``, if any."""
        state: int | None = node.data[self.slot]
        return state
