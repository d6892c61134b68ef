"""The movement contract: which device data a host tier receives, and when.

The cache asks a ``MovementPolicy`` two questions. On a device eviction: does this entry go
down to the host (``demotes``)? At an insert: is a copy written to the host at once
(``writes_through``)? Load-back into the device on a hit is not a policy choice: a hit whose
data sits on the host is always loaded (room allocated like any admission).

An *interior* state is one evicted alone from a node with children or locks: the state
leaves, the node stays (a tombstone).
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from hycache.compiled import mypyc_attr, own_abc_caches
from hycache.tree.node import Node


@mypyc_attr(allow_interpreted_subclasses=True)
class MovementPolicy(ABC):
    """Decides which device entries reach the host tier."""

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        own_abc_caches(cls)

    name: str = "base"

    @abstractmethod
    def demotes(self, kind: str, *, interior: bool) -> bool:
        """Whether an entry of ``kind`` (``"full"`` or ``"recurrent"``) evicted from the
        device is copied to the host first (when the host has room)."""

    def writes_through(self) -> bool:
        """Whether inserted KV pages and states may be copied to the host at insert time."""
        return False

    def through(self, path: list[Node]) -> list[Node]:
        """Of a just-inserted ``path`` (root side first), the prefix copied to the host now."""
        return path if self.writes_through() else []


own_abc_caches(MovementPolicy)
