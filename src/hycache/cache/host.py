"""``HostTier``: the host-memory tier under the device (DESIGN.md section 4b, issue 16).

Entries are keyed by a page-hash chain: the key of page ``i`` of a path digests the
namespace and every token up to the end of that page, so a key names one cached position
(as the device tree does) and a state is keyed by the last page hash of its prefix (SGLang's
TRAILING_PAGES). KV pages and states are charged to a host ``MemoryPool`` with separate
budgets (``host_kv``, ``host_state``); a put makes room by dropping the host's own least
recently used unpinned entries of that kind and never exceeds a budget: an entry that cannot
fit is not stored.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from dataclasses import dataclass

from hycache.errors import IntegrityError
from hycache.memory.pool import MemoryPool
from hycache.tree.keys import TOKEN_BYTES


def page_hashes(key: bytes, namespace: str | None, pages: int, page_size: int) -> list[bytes]:
    """The chain keys of the first ``pages`` whole pages of ``key`` in ``namespace``."""
    step = page_size * TOKEN_BYTES
    h = hashlib.blake2b(repr(namespace).encode(), digest_size=16).digest()
    out: list[bytes] = []
    for i in range(pages):
        h = hashlib.blake2b(h + key[i * step : (i + 1) * step], digest_size=16).digest()
        out.append(h)
    return out


@dataclass
class TierCounters:
    """Movement totals: bytes down (device->host) and up (host->device), entries dropped."""

    bytes_down: int = 0
    bytes_up: int = 0
    pages_down: int = 0
    states_down: int = 0
    pages_up: int = 0
    states_up: int = 0
    not_stored: int = 0
    host_evictions: int = 0


class HostTier:
    """Host-held KV pages and states, LRU per kind, within the host pool's budgets."""

    def __init__(self, pool: MemoryPool) -> None:
        self.pool = pool
        self.kv_kind = "full" if "full" in pool.costs else None
        self.state_kind = "recurrent" if "recurrent" in pool.costs else None
        self._entries: dict[str, OrderedDict[bytes, None]] = {
            kind: OrderedDict() for kind in pool.costs
        }
        self.pinned: set[bytes] = set()
        self.counters = TierCounters()

    # ------------------------------------------------------------------ queries
    def has(self, kind: str, digest: bytes) -> bool:
        entries = self._entries.get(kind)
        return entries is not None and digest in entries

    def count(self, kind: str) -> int:
        entries = self._entries.get(kind)
        return 0 if entries is None else len(entries)

    @property
    def budget_bytes(self) -> int:
        return self.pool.budget_bytes

    @property
    def peak_bytes(self) -> int:
        return sum(self.pool.peak.values())

    # ------------------------------------------------------------------ mutation
    def put(self, kind: str, digest: bytes) -> bool:
        """Store one entry (a device eviction or a write-through copy). Already held: it
        becomes most recent. Otherwise the host's LRU entries of that kind make room; False
        (nothing stored, nothing dropped) when the budget cannot hold it."""
        entries = self._entries.get(kind)
        if entries is None:
            return False
        if digest in entries:
            entries.move_to_end(digest)
            return True
        cost = self.pool.costs[kind]
        evictable = len(entries) - sum(1 for d in self.pinned if d in entries)
        if cost.charged > self.pool.free_bytes(cost.resource) + evictable * cost.charged:
            self.counters.not_stored += 1
            return False
        while self.pool.shortfall({kind: 1}):
            victim = next(d for d in entries if d not in self.pinned)
            del entries[victim]
            self.pool.free(kind, range(1))
            self.counters.host_evictions += 1
        self.pool.alloc(kind, 1)
        entries[digest] = None
        self.counters.bytes_down += cost.charged
        if kind == self.state_kind:
            self.counters.states_down += 1
        else:
            self.counters.pages_down += 1
        return True

    def touch(self, kind: str, digests: list[bytes]) -> None:
        """Mark held entries used, the last of ``digests`` most recent."""
        entries = self._entries.get(kind)
        if entries is None:
            return
        for d in digests:
            if d in entries:
                entries.move_to_end(d)

    def loaded(self, kind: str, count: int) -> int:
        """Count ``count`` entries of ``kind`` copied up to the device; returns their bytes
        (the host keeps its copies)."""
        moved = count * self.pool.unit_bytes(kind)
        self.counters.bytes_up += moved
        if kind == self.state_kind:
            self.counters.states_up += count
        else:
            self.counters.pages_up += count
        return moved

    def clear(self) -> None:
        for kind, entries in self._entries.items():
            if entries:
                self.pool.free(kind, range(len(entries)))
            entries.clear()
        self.pinned.clear()

    def check_integrity(self) -> None:
        """Pool units == entries held, and the pool's own budgets (IntegrityError)."""
        self.pool.check_integrity()
        for kind, entries in self._entries.items():
            if self.pool.units[kind] != len(entries):
                raise IntegrityError(
                    f"host {kind}: the pool charges {self.pool.units[kind]}, {len(entries)} held"
                )
