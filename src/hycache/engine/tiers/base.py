"""The tier contract: what a tier stores (``TierObject``), how it is named (``ObjectKey``),
what it counts (``TierCounters``) and what every backend does (``TierBackend``).

Objects are immutable: a key names one content (the KV of one page, or one state, of one
prefix under one model), so a backend never overwrites an object it holds, and any object a
reader finds that does not decode as expected is a miss: counted, deleted, recomputed.

Cost of the calls (n keys): host O(n) dictionary lookups; disk O(n) file system calls;
Redis one pipelined round trip (``locate``: EXISTS, ``get``: GET, ``put``: SET NX EX).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

#: the components an object can hold: a KV page of one attention kind, or a recurrent state
COMPONENTS = ("full", "swa", "state")


@dataclass(frozen=True)
class ObjectKey:
    """``component`` ("full", "swa", "state"), the device ``page`` size, and ``digest``: the
    page-hash chain value of the prefix the object completes (``cache.tierkeys.chain``)."""

    component: str
    page: int
    digest: bytes

    @property
    def name(self) -> str:
        """Stable text form: file names and Redis keys."""
        return f"{self.component}-{self.page}-{self.digest.hex()}"


@dataclass(frozen=True)
class TierObject:
    """One stored object: ``tensors`` in the component's fixed order (KV page: K then V of
    each attention layer of that kind, ``[page, *shape]``; state: per recurrent state its conv
    window then its recurrent state, where present); ``tokens``: the prefix length it
    completes; ``writer``: who wrote it (an engine instance's id)."""

    key: ObjectKey
    tokens: int
    tensors: tuple[torch.Tensor, ...]
    writer: str = ""

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.tensors)


@dataclass
class TierCounters:
    """What one tier did: objects found and missed, objects refused as invalid (bad header,
    checksum, fingerprint or size: deleted), store errors (connection lost, disk full) and
    timeouts, objects stored and refused, bytes each way, objects its own budget evicted."""

    hits: int = 0
    misses: int = 0
    invalid: int = 0
    errors: int = 0
    timeouts: int = 0
    stored: int = 0
    not_stored: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    evictions: int = 0
    #: objects written corrupted on purpose (``verify --inject corrupt-store``)
    corrupted: int = 0


class TierBackend(ABC):
    """One tier. ``get`` never raises for a bad or missing object or a failing store: it
    returns None there (and counts it); ``put`` likewise reports what it stored."""

    name: str = ""

    def __init__(self) -> None:
        self.counters = TierCounters()

    @abstractmethod
    def locate(self, keys: Sequence[ObjectKey]) -> list[bool]:
        """Whether each key is held now (a later ``get`` may still miss)."""

    @abstractmethod
    def get(self, keys: Sequence[ObjectKey]) -> list[TierObject | None]:
        """The objects held under ``keys`` (None: absent, invalid, or the store failed)."""

    @abstractmethod
    def put(self, objects: Sequence[TierObject]) -> int:
        """Store the objects not held yet, within the tier's budget; how many were stored."""

    @abstractmethod
    def clear(self) -> None:
        """Drop every object this tier holds (of this engine's namespace)."""

    def close(self) -> None:  # noqa: B027 (optional hook: most tiers hold nothing to close)
        """Release connections and files (the objects stay)."""
