"""Cross-structure checks of a cache: the tree and the pool each hold together, the pool is
charged exactly for tree data plus what requests in flight hold, and every lock belongs to a
request in flight. Every failure raises ``IntegrityError`` (checks survive ``python -O``)."""

from __future__ import annotations

from hycache.cache.registry import InFlight
from hycache.components.recurrent import RecurrentComponent
from hycache.errors import IntegrityError
from hycache.memory.pool import MemoryPool
from hycache.tree.radix import RadixTree


def check_cache_integrity(tree: RadixTree, pool: MemoryPool, in_flight: InFlight) -> None:
    """Raise IntegrityError on the first broken invariant."""
    tree.check_integrity()
    pool.check_integrity()
    held = dict.fromkeys(pool.costs, 0)
    for node in tree.iter_nodes():
        for c in tree.components:
            data = node.data[c.slot]
            if data is not None:
                held[c.kind] += 1 if isinstance(c, RecurrentComponent) else len(data)
    for lease in in_flight:
        for kind, ids in lease.working.items():
            held[kind] += len(ids)
        held["recurrent"] = (
            held.get("recurrent", 0) + len(lease.checkpoints) + len(lease.spare_slots)
        )
    for kind, units in pool.units.items():
        if held.get(kind, 0) != units:
            raise IntegrityError(f"{kind}: the pool charges {units} units, holders have {held}")
    locks = sum((lease.locked is not None) + (lease.kv_locked is not None) for lease in in_flight)
    roots = [tree.root(ns) for ns in tree.namespaces()]
    taken = sum(sum(c.lock_ref for c in r.children.values()) for r in roots)
    if taken != locks:
        raise IntegrityError(f"the tree holds {taken} locks, requests in flight {locks}")
