"""``StateStore``: how the cache stores recurrent states.

A state a request checkpointed goes into the tree only if the admission policy admits it and
no state already sits at that position; the per-path cap keeps the deepest states only; and
the counters per checkpoint reason record how many states taken for it were stored.

Contract: ``store_states`` frees the slots of the states it refuses; callers of
``store_state`` free them themselves.
"""

from __future__ import annotations

import hashlib

from hycache.cache.accounting import Accounting
from hycache.cache.registry import NodeNotes
from hycache.cache.stats import Counters
from hycache.components.recurrent import RecurrentComponent
from hycache.policy.admission import AdmissionPolicy
from hycache.tree.keys import TOKEN_BYTES, TokenKey
from hycache.tree.node import Node


class StateStore:
    """Recurrent state storing (admission, the per-path cap) and per-reason reuse rates."""

    def __init__(
        self,
        recurrent: RecurrentComponent,
        accounting: Accounting,
        admission: AdmissionPolicy,
        counters: Counters,
        notes: NodeNotes,
        *,
        max_states_per_path: int | None,
    ) -> None:
        self.recurrent = recurrent
        self.accounting = accounting
        self.tree = accounting.tree
        self.eviction = accounting.eviction
        self.admission = admission
        self.counters = counters
        self.notes = notes
        self.max_states_per_path = max_states_per_path

    def store_state(
        self,
        path: list[Node],
        key: TokenKey,
        ns: str | None,
        position: int,
        slot: int,
        reason: str,
        cached: int,
        generation: int = 0,
    ) -> bool:
        """Hand state ``slot`` (taken at ``position``) to the tree if admitted; ``path`` is the
        insert path of ``key`` (kept current as nodes split); ``generation``: see
        ``hycache.cache.generations``."""
        if position > cached:
            return False
        if self.admission.uses_sightings:
            digest = hashlib.blake2b(bytes(key[: position * TOKEN_BYTES]), digest_size=16)
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
            self.accounting.register_split(node)
        if not self.recurrent.adopt(node, slot):
            self.counters.states_duplicate += 1
            return False
        self.counters.states_inserted += 1
        self.counters.reason_inserted[reason] += 1
        self.notes.note_reason(node, reason)
        self.notes.note_generation(node, generation)
        self.eviction.on_insert(node, self.recurrent)
        return True

    def store_states(
        self,
        path: list[Node],
        key: TokenKey,
        ns: str | None,
        candidates: dict[int, tuple[int, str]],
        cached: int,
        generation: int = 0,
    ) -> tuple[list[int], list[int]]:
        """Hand each candidate state (position -> (slot, reason)) to the tree, each of
        ``generation``; the slots of refused ones are freed. Returns the positions (stored,
        refused)."""
        stored: list[int] = []
        refused: list[int] = []
        for position in sorted(candidates):
            slot, reason = candidates[position]
            if self.store_state(path, key, ns, position, slot, reason, cached, generation):
                stored.append(position)
            else:
                refused.append(position)
                self.accounting.pool.free("recurrent", [slot])
        return stored, refused

    def cap_states(self, deepest: Node) -> set[int]:
        """Keep at most ``max_states_per_path`` states on the path to ``deepest`` (the deepest
        ones); shallower unpinned states go. Returns the positions whose state went."""
        if self.max_states_per_path is None:
            return set()
        holders = [n for n in deepest.path_from_root() if self.recurrent.has(n)]
        capped: set[int] = set()
        for node in holders[: max(0, len(holders) - self.max_states_per_path)]:
            if not self.eviction.pinned(node, self.recurrent):
                self.counters.states_capped += 1
                capped.add(node.end)
                self.tree.release(node, self.recurrent)
                self.notes.state_gone(node)
        return capped
