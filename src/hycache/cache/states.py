"""``CacheStates``: how ``HybridPrefixCache`` (a mixin of it) stores recurrent states.

A state a request checkpointed goes into the tree only if the admission policy admits it and
no state already sits at that position; the per-path cap keeps the deepest states only; and
the reuse rate per checkpoint reason says how often states taken for that reason get reused.

Contract: ``HybridPrefixCache.__init__`` (``hycache.cache.facade``) sets every attribute declared
here and in ``CacheMemory``; the mixin adds no state of its own. ``_store_states`` frees the
slots of the states it refuses; callers of ``_store_state`` free them themselves.
"""

from __future__ import annotations

import hashlib

from hycache.cache.accounting import CacheMemory
from hycache.policy.base import AdmissionPolicy
from hycache.tree.keys import TOKEN_BYTES
from hycache.tree.node import Node


class CacheStates(CacheMemory):
    """Recurrent state storing (admission, the per-path cap) and per-reason reuse rates."""

    admission: AdmissionPolicy
    max_states_per_path: int | None

    def _store_state(
        self,
        path: list[Node],
        key: bytes,
        ns: str | None,
        position: int,
        slot: int,
        reason: str,
        cached: int,
    ) -> bool:
        """Hand state ``slot`` (taken at ``position``) to the tree if admitted; ``path`` is the
        insert path of ``key`` (kept current as nodes split)."""
        assert self.recurrent is not None
        if position > cached:
            return False
        if self.admission.uses_sightings:
            digest = hashlib.blake2b(key[: position * TOKEN_BYTES], digest_size=16)
            digest.update(repr(ns).encode())
            sighting = digest.digest()
        else:
            sighting = b""
        if not self.admission.admit(sighting, reason):
            self.counters.states_rejected += 1
            return False
        version = self.tree.version
        node = self.tree.boundary_on_path(path, position)
        if self.tree.version != version:
            self._register_split(node)
        if not self.recurrent.adopt(node, slot):
            self.counters.states_duplicate += 1
            return False
        self.counters.states_inserted += 1
        self.counters.reason_inserted[reason] += 1
        self._state_reason[node] = reason
        self.eviction.on_insert(node, self.recurrent)
        return True

    def _store_states(
        self,
        path: list[Node],
        key: bytes,
        ns: str | None,
        candidates: dict[int, tuple[int, str]],
        cached: int,
    ) -> tuple[list[int], list[int]]:
        """Hand each candidate state (position -> (slot, reason)) to the tree; the slots of
        refused ones are freed. Returns the positions (stored, refused)."""
        stored: list[int] = []
        refused: list[int] = []
        for position in sorted(candidates):
            slot, reason = candidates[position]
            if self._store_state(path, key, ns, position, slot, reason, cached):
                stored.append(position)
            else:
                refused.append(position)
                self.pool.free("recurrent", [slot])
        return stored, refused

    def _cap_states(self, deepest: Node) -> set[int]:
        """Keep at most ``max_states_per_path`` states on the path to ``deepest`` (the deepest
        ones); shallower unlocked states go. Returns the positions whose state went."""
        assert self.recurrent is not None and self.max_states_per_path is not None
        holders = [n for n in deepest.path_from_root() if self.recurrent.has(n)]
        capped: set[int] = set()
        for node in holders[: max(0, len(holders) - self.max_states_per_path)]:
            if not self.eviction.pinned(node, self.recurrent):
                self.counters.states_capped += 1
                capped.add(node.end)
                self.tree.release(node, self.recurrent)
        return capped

    def state_reason(self, node: Node) -> str:
        """Why the state at ``node`` was checkpointed (a plan's reason, ``"unknown"`` if none)."""
        return self._state_reason.get(node, "unknown")

    def state_reuse_rate(self, node: Node) -> float:
        """Hits per stored state so far, ``(hits + 1) / (stored + 2)``, of the checkpoint
        reason the state at ``node`` was taken for: how often states like it get reused."""
        reason = self._state_reason.get(node, "unknown")
        c = self.counters
        return (c.reason_hits[reason] + 1) / (c.reason_inserted[reason] + 2)
