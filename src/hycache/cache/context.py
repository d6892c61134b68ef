"""``CacheView``: the read-only view of a cache its eviction policy gets (``EvictionContext``)."""

from __future__ import annotations

from collections.abc import Sequence

from hycache.cache.accounting import Accounting
from hycache.cache.holds import Holds
from hycache.cache.registry import InFlight, NodeNotes
from hycache.cache.stats import Counters
from hycache.components.full import PagedKVComponent
from hycache.components.recurrent import RecurrentComponent
from hycache.spec.model import ModelSpec
from hycache.tree.node import Node
from hycache.tree.radix import RadixTree

#: Remembered ``prefill_flops`` results before the memo starts over (about 100 bytes each).
FLOPS_MEMO_ENTRIES = 1 << 16


class CacheView:
    """Implements ``hycache.policy.eviction.base.EvictionContext`` over the cache's parts.
    ``prefill_flops`` is remembered per ``(start, length)``: a policy values the same entries
    again and again, and the spec's sum over its layer groups is a pure function."""

    def __init__(
        self,
        spec: ModelSpec,
        accounting: Accounting,
        in_flight: InFlight,
        notes: NodeNotes,
        holds: Holds,
        counters: Counters,
    ) -> None:
        self._accounting = accounting
        self._in_flight = in_flight
        self._notes = notes
        self._holds = holds
        self._counters = counters
        self._flops: dict[tuple[int, int], float] = {}
        self._prefill = spec.prefill_flops_table()

    @property
    def clock(self) -> int:
        return self._in_flight.clock

    @property
    def tree(self) -> RadixTree:
        return self._accounting.tree

    @property
    def page_size(self) -> int:
        return self._accounting.page_size

    @property
    def kv_components(self) -> Sequence[PagedKVComponent]:
        return self._accounting.kv_components

    @property
    def recurrent(self) -> RecurrentComponent | None:
        return self._accounting.recurrent

    @property
    def budget_bytes(self) -> int:
        return self._accounting.pool.budget_bytes

    def resource_of(self, kind: str) -> str:
        return self._accounting.pool.resource_of(kind)

    def prefill_flops(self, start: int, length: int) -> float:
        memo = self._flops
        flops = memo.get((start, length))
        if flops is None:
            if len(memo) >= FLOPS_MEMO_ENTRIES:
                memo.clear()
            flops = memo[(start, length)] = self._prefill.prefill_flops(start, length)
        return flops

    def is_live(self, node: Node) -> bool:
        return self._notes.is_live(node)

    def state_reason(self, node: Node) -> str:
        return self._notes.reason(node)

    def state_reuse_rate(self, node: Node) -> float:
        reason = self._notes.reason(node)
        c = self._counters
        return (c.reason_hits[reason] + 1) / (c.reason_inserted[reason] + 2)

    def state_hit_chance(self, node: Node) -> float:
        notes = self._notes
        reason = notes.reason(node)
        hits = notes.state_hits(node)
        ladder = notes.ladder(reason)
        first = 0 if ladder is None else ladder.at(1)
        chance = (first + 1) / (self._counters.reason_inserted[reason] + 2)
        if hits == 0 or ladder is None:
            return chance
        settled = ladder.at(hits) - ladder.live_at(hits)
        return (ladder.at(hits + 1) + chance) / (settled + 1)

    def state_lineage_chance(self, node: Node) -> float:
        notes = self._notes
        if notes.state_hits(node):
            return self.state_hit_chance(node)
        return notes.generation_odds.chance(
            notes.reason(node), notes.generation(node), self.state_hit_chance(node)
        )

    def mean_state_reuse_rate(self) -> float:
        c = self._counters
        return (sum(c.reason_hits.values()) + 1) / (sum(c.reason_inserted.values()) + 2)

    def passed_by_others(self, node: Node) -> bool:
        return self._holds.passed_by_others(node)

    def requests_in_flight(self) -> int:
        return len(self._in_flight)
