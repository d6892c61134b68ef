"""``CacheMemory``: the memory side of ``HybridPrefixCache`` (a mixin of it).

It accounts what the pool is charged for and for whom (entries pinned by requests in flight,
their working sets), runs the eviction rounds that make a demand fit, registers node splits
with the eviction policy, and sizes a working set and an insert in pool units.

Contract: ``HybridPrefixCache.__init__`` (``hycache.cache.facade``) sets every attribute declared
here; the mixin adds no state of its own. ``_ensure`` evicts only unlocked entries, and
nothing at all when eviction could not make the demand fit.
"""

from __future__ import annotations

from hycache.cache.lease import Lease
from hycache.cache.stats import Counters
from hycache.components.base import Component
from hycache.components.full import FullComponent, PagedKVComponent
from hycache.components.recurrent import RecurrentComponent
from hycache.memory.pool import MemoryPool
from hycache.policy.base import EvictionPolicy
from hycache.tree.base import MatchResult
from hycache.tree.node import Node
from hycache.tree.radix import RadixTree


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


class CacheMemory:
    """Memory accounting and eviction driving for ``HybridPrefixCache``."""

    pool: MemoryPool
    tree: RadixTree
    eviction: EvictionPolicy
    counters: Counters
    leases: dict[int, Lease]
    kv_components: list[PagedKVComponent]
    recurrent: RecurrentComponent | None
    page_size: int
    running_slots: int
    live_sessions: set[str]
    _node_session: dict[Node, str]
    _state_reason: dict[Node, str]

    # ------------------------------------------------------------------ memory
    def is_live(self, node: Node) -> bool:
        session = self._node_session.get(node)
        return session is not None and session in self.live_sessions

    def _locked_bytes(self) -> dict[str, int]:
        seen: set[Node] = set()
        held = dict.fromkeys(self.pool.budgets, 0)
        for lease in self.leases.values():
            for node in (lease.kv_locked, lease.locked):
                while node is not None and node.parent is not None and node not in seen:
                    seen.add(node)
                    for c in self.tree.components:
                        if self.eviction.pinned(node, c):
                            held[self.pool.resource_of(c.kind)] += c.bytes_on(node)
                    node = node.parent
        return held

    def _in_flight_bytes(self) -> dict[str, int]:
        held = dict.fromkeys(self.pool.budgets, 0)
        for lease in self.leases.values():
            for kind, ids in lease.working.items():
                held[self.pool.resource_of(kind)] += len(ids) * self.pool.unit_bytes(kind)
            slots = len(lease.checkpoints) + len(lease.spare_slots)
            if slots:
                resource = self.pool.resource_of("recurrent")
                held[resource] += slots * self.pool.unit_bytes("recurrent")
        return held

    def _reclaimable(self) -> dict[str, int]:
        locked, flight = self._locked_bytes(), self._in_flight_bytes()
        return {r: self.pool.used[r] - locked[r] - flight[r] for r in self.pool.budgets}

    def _ensure(self, demand: dict[str, int]) -> dict[str, int]:
        """Evict until ``demand`` (units per kind) fits. Returns the bytes still short per
        resource (empty: it fits now). Evicts nothing if eviction could not make it fit."""
        short = self.pool.shortfall(demand)
        if not short:
            return short
        reclaimable = self._reclaimable()
        if any(reclaimable[r] < missing for r, missing in short.items()):
            return short
        return self._evict_for(demand, short)

    def _evict_for(self, demand: dict[str, int], short: dict[str, int]) -> dict[str, int]:
        """The eviction rounds of ``_ensure``: evict until ``demand`` fits or nothing is left."""
        while short:
            # One round ranks the candidates once; an entry that only became evictable during
            # the round (a parent whose last child went) waits for the next round.
            progress = False
            try:
                while short:
                    victim = self.eviction.next_victim(next(iter(short)))
                    if victim is None:
                        break
                    self._evict(*victim)
                    progress = True
                    short = self.pool.shortfall(demand)
            finally:
                self.eviction.end_round()
            if not progress:
                break
        return short

    def _split_at(self, key: bytes, position: int, ns: str | None) -> Node:
        """``tree.split_at`` that registers a node the split creates (see ``_register_split``)."""
        version = self.tree.version
        node = self.tree.split_at(key, position, ns)
        if self.tree.version != version:
            self._register_split(node)
        return node

    def _register_split(self, upper: Node) -> None:
        """A split created ``upper``, holding KV pages the eviction policy has never seen:
        register them, or they could never be evicted."""
        for component in self.kv_components:
            if component.has(upper):
                self.eviction.on_insert(upper, component)

    def _evict(self, node: Node, component: Component) -> None:
        if isinstance(component, RecurrentComponent):
            self.counters.evictions[component.name] += 1
            self.counters.evicted_bytes += component.bytes_on(node)
            self.tree.release(node, component)
        else:
            assert not node.children and not node.lock_ref
            for c in self.tree.components:
                if c.has(node):
                    self.counters.evictions[c.name] += 1
                    self.counters.evicted_bytes += c.bytes_on(node)
            self.tree.remove_leaf(node)
        if node.parent is None:
            self._node_session.pop(node, None)
        if not isinstance(component, RecurrentComponent) or node.parent is None:
            self._state_reason.pop(node, None)

    def _working_set(self, tokens: int, kv_in_place: int = 0) -> dict[str, int]:
        """Units per kind a running request needs for ``tokens`` new tokens, the first
        ``kv_in_place`` of which read cached full-attention KV in place (no pages of theirs)."""
        demand = {
            c.kind: _ceil_div(
                tokens - (kv_in_place if isinstance(c, FullComponent) else 0), self.page_size
            )
            for c in self.kv_components
        }
        if self.recurrent is not None:
            demand["recurrent"] = self.running_slots
        return demand

    def _pages_needed(self, found: MatchResult, length: int) -> dict[str, int]:
        """KV pages per kind an insert of ``length`` tokens would allocate, given the match
        ``found`` of exactly those tokens."""
        if not length:
            return {}
        need = {}
        for component in self.kv_components:
            revive = sum(
                n.length for n in found.path if n.end <= found.matched and not component.has(n)
            )
            need[component.kind] = (length - found.matched + revive) // self.page_size
        return need

    def occupancy(self) -> tuple[int, int]:
        """Bytes charged now for KV pages and for states (cached and in flight)."""
        pool = self.pool
        kv = sum(pool.units[k.kind] * pool.unit_bytes(k.kind) for k in self.kv_components)
        state = pool.units["recurrent"] * pool.unit_bytes("recurrent") if self.recurrent else 0
        return kv, state

    def _insert_path(self, key: bytes, ns: str | None, found: MatchResult) -> list[Node]:
        """Insert ``key`` (room for its pages already made) and register its KV entries."""
        path = self.tree.insert(key, ns, after=found)
        for node in path:
            for component in self.kv_components:
                self.eviction.on_insert(node, component)
        return path

    def _claim(self, node: Node, session: str) -> None:
        """The nodes from the root to ``node`` belong to ``session``."""
        for on_path in node.path_from_root():
            self._node_session[on_path] = session
