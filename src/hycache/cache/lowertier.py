"""``LowerTier``: one tier below the device (host memory, or storage: disk or remote).

It holds KV host pages (keys from :mod:`hycache.cache.tierkeys`) and states, each kind in
its own budget (``None``: unlimited, as a storage tier may be) and its own least recently
used order. A put makes room by dropping the tier's own LRU unpinned entries of that kind
and never exceeds a budget: what cannot fit is not stored. The tier accounts bytes only;
the data itself is the engine's business.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass

from hycache.errors import IntegrityError

KINDS = ("full", "recurrent")


@dataclass
class TierCounters:
    """Movement totals: bytes down (into this tier) and up (to the device), entries
    dropped by the tier's own LRU, entries that could not be stored."""

    bytes_down: int = 0
    bytes_up: int = 0
    pages_down: int = 0
    states_down: int = 0
    pages_up: int = 0
    states_up: int = 0
    not_stored: int = 0
    evictions: int = 0


class LowerTier:
    """KV pages and states held by one tier, LRU per kind, within its budgets."""

    def __init__(
        self,
        name: str,
        *,
        kv_unit: int,
        state_unit: int,
        kv_budget: int | None,
        state_budget: int | None,
        promised_bytes: int | None = None,
    ) -> None:
        """``promised_bytes``: the tier's budget as the user set it, when the kind budgets
        add up to more (a preset reproducing an oversized pool); overruns count against it."""
        if kv_unit <= 0 or state_unit < 0:
            raise IntegrityError(f"tier {name}: unit bytes must be positive")
        self.name = name
        self.unit = {"full": kv_unit, "recurrent": state_unit}
        self.budget: dict[str, int | None] = {"full": kv_budget, "recurrent": state_budget}
        self.used = {"full": 0, "recurrent": 0}
        self.peak = {"full": 0, "recurrent": 0}
        self.peak_total = 0
        self.promised_bytes = promised_bytes
        self._pages: OrderedDict[bytes, None] = OrderedDict()
        # state key -> (base, position); the index finds a base's states in one probe
        self._states: OrderedDict[bytes, tuple[bytes, int]] = OrderedDict()
        # base -> position -> states held there (prompts differing after the base)
        self._by_base: dict[bytes, dict[int, int]] = {}
        self.pinned: set[bytes] = set()
        self.counters = TierCounters()

    # ------------------------------------------------------------------ queries
    def has_page(self, digest: bytes) -> bool:
        return digest in self._pages

    def has_state(self, key: bytes) -> bool:
        return key in self._states

    def state_positions(self, base: bytes) -> Mapping[int, int] | None:
        """Positions of the states held whose base is ``base`` (None: none)."""
        return self._by_base.get(base)

    def count(self, kind: str) -> int:
        return len(self._pages) if kind == "full" else len(self._states)

    @property
    def budget_bytes(self) -> int | None:
        """The promised budget (None: unlimited)."""
        if self.promised_bytes is not None:
            return self.promised_bytes
        kv, state = self.budget["full"], self.budget["recurrent"]
        return None if kv is None or state is None else kv + state

    @property
    def peak_bytes(self) -> int:
        return self.peak_total

    def overrun_bytes(self) -> int:
        """Bytes above the promise at the worst moment (0 when every promise held)."""
        kinds = sum(max(0, self.peak[k] - b) for k, b in self.budget.items() if b is not None)
        promised = self.budget_bytes
        return max(kinds, 0 if promised is None else self.peak_total - promised)

    # ------------------------------------------------------------------ mutation
    def _room(self, kind: str, count: int) -> int:
        """Make room for up to ``count`` new entries of ``kind``; returns how many fit."""
        budget, unit = self.budget[kind], self.unit[kind]
        if budget is None:
            return count
        entries: Mapping[bytes, object] = self._pages if kind == "full" else self._states
        held = sum(1 for d in self.pinned if d in entries)
        fits = min(count, budget // unit - held) if unit else count
        if fits <= 0:
            return 0
        over = self.used[kind] + fits * unit - budget
        if over > 0:
            victims: list[bytes] = []
            for d in entries:
                if len(victims) * unit >= over:
                    break
                if d not in self.pinned:
                    victims.append(d)
            for d in victims:
                self._drop(kind, d)
            self.counters.evictions += len(victims)
        return fits

    def _drop(self, kind: str, digest: bytes) -> None:
        if kind == "full":
            del self._pages[digest]
        else:
            base, position = self._states.pop(digest)
            positions = self._by_base[base]
            positions[position] -= 1
            if not positions[position]:
                del positions[position]
                if not positions:
                    del self._by_base[base]
        self.used[kind] -= self.unit[kind]

    def _charge(self, kind: str, count: int) -> None:
        self.used[kind] += count * self.unit[kind]
        self.peak[kind] = max(self.peak[kind], self.used[kind])
        self.peak_total = max(self.peak_total, self.used["full"] + self.used["recurrent"])
        self.counters.bytes_down += count * self.unit[kind]

    def put_pages(self, digests: list[bytes]) -> int:
        """Store KV pages, the first of ``digests`` most recent (a prefix outlives its
        continuation); pages held already are refreshed. When not all fit, the first ones
        are stored. Returns the pages newly stored."""
        fresh = [d for d in digests if d not in self._pages]
        self.touch_pages(digests)  # pages held already must not make room for the new ones
        fits = self._room("full", len(fresh))
        self.counters.not_stored += len(fresh) - fits
        stored = fresh[:fits]
        if not stored:
            return 0
        for d in reversed(stored):
            self._pages[d] = None
        self.touch_pages(digests)  # the first digests most recent, old and new alike
        self._charge("full", len(stored))
        self.counters.pages_down += len(stored)
        return len(stored)

    def put_state(self, key: bytes, base: bytes, position: int) -> bool:
        """Store one state; False when it cannot fit (nothing dropped then)."""
        if self.unit["recurrent"] == 0:
            return False
        if key in self._states:
            self._states.move_to_end(key)
            return True
        if not self._room("recurrent", 1):
            self.counters.not_stored += 1
            return False
        self._states[key] = (base, position)
        positions = self._by_base.setdefault(base, {})
        positions[position] = positions.get(position, 0) + 1
        self._charge("recurrent", 1)
        self.counters.states_down += 1
        return True

    def touch_pages(self, digests: list[bytes]) -> None:
        """Mark held pages used, the first of ``digests`` most recent."""
        for d in reversed(digests):
            if d in self._pages:
                self._pages.move_to_end(d)

    def loaded(self, kind: str, nbytes: int, count: int) -> None:
        """Count ``count`` entries (``nbytes``) copied up to the device; the tier keeps them."""
        self.counters.bytes_up += nbytes
        if kind == "recurrent":
            self.counters.states_up += count
        else:
            self.counters.pages_up += count

    def clear(self) -> None:
        self._pages.clear()
        self._states.clear()
        self._by_base.clear()
        self.used = {"full": 0, "recurrent": 0}
        self.pinned.clear()

    def check_integrity(self) -> None:
        """Bytes charged == entries held x unit, within every budget (IntegrityError)."""
        for kind in KINDS:
            held = self.count(kind) * self.unit[kind]
            if self.used[kind] != held:
                raise IntegrityError(
                    f"tier {self.name} {kind}: {self.used[kind]} bytes charged, {held} held"
                )
            budget = self.budget[kind]
            if budget is not None and self.used[kind] > budget:
                raise IntegrityError(
                    f"tier {self.name} {kind}: {self.used[kind]} bytes over budget {budget}"
                )
        indexed = sum(sum(p.values()) for p in self._by_base.values())
        if indexed != len(self._states):
            raise IntegrityError(
                f"tier {self.name}: {indexed} states indexed, {len(self._states)} held"
            )
