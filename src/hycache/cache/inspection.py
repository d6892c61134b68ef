"""``CacheInspect``: the inspection side of ``HybridPrefixCache`` (a mixin of it).

Pure queries (``lookup``, ``stats``), dropping every entry (``clear``, only with no request in
flight) and the cross-structure invariants (``check_integrity``: tree, pool, and that the pool
is charged exactly for tree data plus what requests in flight hold).

Contract: ``HybridPrefixCache.__init__`` (``hycache.cache.facade``) sets every attribute declared in
``CacheMemory``; the mixin adds no state of its own.
"""

from __future__ import annotations

from hycache.cache.accounting import CacheMemory
from hycache.cache.stats import CacheStats
from hycache.components.recurrent import RecurrentComponent
from hycache.errors import CacheUsageError
from hycache.tree.keys import TokenInput


class CacheInspect(CacheMemory):
    """Queries, statistics and integrity checks of ``HybridPrefixCache``."""

    # ------------------------------------------------------------------ inspection
    def lookup(self, tokens: TokenInput, namespace: str | None = None) -> tuple[int, int]:
        """Pure query: (reusable, attention-matched) length of ``tokens`` as cached now."""
        result = self.tree.match(tokens, namespace)
        return result.hit, result.kv_hit

    def clear(self) -> None:
        """Drop every cached entry. No request may be in flight."""
        if self.leases:
            raise CacheUsageError(f"clear() with {len(self.leases)} request(s) in flight")
        self.tree.clear()
        self._node_session.clear()
        self._state_reason.clear()

    def stats(self) -> CacheStats:
        c, pool = self.counters, self.pool
        kv, state = self.occupancy()
        return CacheStats(
            requests=c.requests,
            waits=c.waits,
            aborts=c.aborts,
            prompt_tokens=c.prompt_tokens,
            kv_matched_tokens=c.kv_matched_tokens,
            reused_tokens=c.reused_tokens,
            recompute_tokens=c.kv_matched_tokens - c.reused_tokens,
            requests_hit=c.requests_hit,
            component_hits=dict(c.component_hits),
            component_misses=dict(c.component_misses),
            evictions=dict(c.evictions),
            evicted_bytes=c.evicted_bytes,
            cow_copies=c.cow_copies,
            checkpoints_recorded=c.checkpoints_recorded,
            checkpoints_skipped=c.checkpoints_skipped,
            offgrid_dropped=c.offgrid_dropped,
            offgrid_misplaced=c.offgrid_misplaced,
            states_inserted=c.states_inserted,
            states_rejected=c.states_rejected,
            states_duplicate=c.states_duplicate,
            states_capped=c.states_capped,
            kv_bytes=kv,
            state_bytes=state,
            used_bytes=pool.used_bytes,
            peak_bytes=sum(pool.peak.values()),
            budget_bytes=pool.budget_bytes,
            padding_waste_bytes=pool.padding_waste_bytes(),
        )

    def check_integrity(self) -> None:
        """Tree and pool invariants, plus: pool units == tree data + in-flight holdings, and
        every locked node belongs to a request in flight."""
        self.tree.check_integrity()
        self.pool.check_integrity()
        held = dict.fromkeys(self.pool.costs, 0)
        for node in self.tree.iter_nodes():
            for c in self.tree.components:
                data = node.data[c.slot]
                if data is not None:
                    held[c.kind] += 1 if isinstance(c, RecurrentComponent) else len(data)
        for lease in self.leases.values():
            for kind, ids in lease.working.items():
                held[kind] += len(ids)
            held["recurrent"] = (
                held.get("recurrent", 0) + len(lease.checkpoints) + len(lease.spare_slots)
            )
        for kind, units in self.pool.units.items():
            assert held.get(kind, 0) == units, f"{kind}: pool has {units}, holders {held}"
        locks = sum(
            (lease.locked is not None) + (lease.kv_locked is not None)
            for lease in self.leases.values()
        )
        roots = [self.tree.root(ns) for ns in self.tree.namespaces()]
        assert sum(sum(c.lock_ref for c in r.children.values()) for r in roots) == locks
