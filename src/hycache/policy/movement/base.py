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


class MovementPolicy(ABC):
    """Decides which device entries reach the host tier."""

    name: str = "base"

    @abstractmethod
    def demotes(self, kind: str, *, interior: bool) -> bool:
        """Whether an entry of ``kind`` (``"full"`` or ``"recurrent"``) evicted from the
        device is copied to the host first (when the host has room)."""

    def writes_through(self) -> bool:
        """Whether inserted KV pages and states are copied to the host at insert time."""
        return False
