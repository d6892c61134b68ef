"""Heap-based eviction, the base of the LRU, GDSF and value policies.

Every cached entry is a (node, component) pair. A policy gives each entry a *key*; the entry
with the smallest key goes first. Keys live in one lazy min-heap per pool resource: updating a
key pushes a new heap entry and the old one is skipped when popped. An entry that cannot go now
(locked node) is set aside until the round ends; attention KV popped on a node that still has
children is *parked* with its node until the node loses its last child (the tree says when), so
a chain's inner KV is not popped and pushed back in every round. A parked entry comes back
exactly where the lazy heap would have offered it: at once if this round has not yet popped
past it, else when the round ends.

Eligibility is shared by all: attention KV only leaves a leaf (removing the node with all its
data); a state can leave any node (an internal node keeps its KV: a tombstone).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import KeysView

from hycache.components.base import Component
from hycache.components.recurrent import RecurrentComponent
from hycache.policy.eviction.base import EvictionContext, EvictionPolicy
from hycache.tree.node import Node

Key = tuple[float, ...]
Entry = tuple[Key, int, Node, int]

#: heap entries allowed beyond ``compact_factor`` times the live ones before a compaction
COMPACT_SLACK = 256
#: ``compact_factor`` of a policy whose victims do not depend on the heaps' layout (see
#: ``HeapEviction.compact_factor``)
LAYOUT_FREE_COMPACT_FACTOR = 4


class HeapEviction(EvictionPolicy):
    """Base: subclasses define ``key(node, component)`` and which entries a hit refreshes."""

    #: refresh the whole hit path (True) or only the node whose state was used (False) for
    #: recurrent entries; attention KV entries on the path are always refreshed.
    refresh_state_path: bool = True
    #: a compaction runs once the heaps hold more than this many times the live entries (plus
    #: ``COMPACT_SLACK``); its cost per push is about ``factor / (factor - 1)`` scans of an
    #: entry, its memory ``factor`` times the live entries. The pops do not depend on when it
    #: runs (it keeps each live entry's first heap entry), but where entries sit in a heap does:
    #: 2 for policies that read the layout (the aging clocks' sampler) or keep records a
    #: compaction forgets and a later key reads (GDSF's frequencies); subclasses whose victims
    #: depend on neither use ``LAYOUT_FREE_COMPACT_FACTOR``.
    compact_factor: int = 2

    def __init__(self, *, session_aware: bool = False, pins_published_state: bool = True) -> None:
        super().__init__()
        self.session_aware = session_aware
        self.pins_published_state = pins_published_state
        self._heaps: dict[str, list[Entry]] = {}
        self._current: dict[tuple[Node, int], Key] = {}
        self._stash: list[tuple[str, Entry]] = []
        #: attention KV entries popped on a node with children, by node (see the module doc)
        self._parked: dict[Node, list[tuple[str, Entry]]] = {}
        #: per resource, the largest entry popped in this round (None: none yet)
        self._round_top: dict[str, Entry | None] = {}
        self._seq = itertools.count()
        self._entries = 0  # heap entries pushed since the last compaction, plus those kept
        self._kept = 0  # live entries kept by the last compaction

    def attach(self, context: EvictionContext) -> None:
        super().attach(context)
        self._view = context  # ``context`` without the property's check, on hot paths
        self._components = context.tree.components
        self._resource = {c.slot: context.resource_of(c.kind) for c in self._components}
        self._is_kv = tuple(not isinstance(c, RecurrentComponent) for c in self._components)
        for resource in self._resource.values():
            self._heaps.setdefault(resource, [])
            self._round_top[resource] = None
        self._bind_heaps()
        context.tree.watch_leaves(self._unpark)

    def _bind_heaps(self) -> None:
        """Per component slot, the heap its entries go to (after every swap of ``_heaps``)."""
        self._slot_heap = [self._heaps[self._resource[c.slot]] for c in self._components]

    # ------------------------------------------------------------------ keys
    def key(self, node: Node, component: Component) -> Key:
        raise NotImplementedError

    def _full_key(self, node: Node, component: Component) -> Key:
        base = self.key(node, component)
        if self.session_aware:
            return (1.0 if self._view.is_live(node) else 0.0, *base)
        return base

    def _push(self, node: Node, component: Component) -> None:
        slot = component.slot
        key = self._full_key(node, component) if self.session_aware else self.key(node, component)
        self._current[(node, slot)] = key
        heapq.heappush(self._slot_heap[slot], (key, next(self._seq), node, slot))
        self._entries += 1
        if self._entries > self.compact_factor * self._kept + COMPACT_SLACK and not self._stash:
            self._compact()

    def _compact(self) -> None:
        """Drop superseded heap entries and every record of entries that are gone (nodes
        pruned or removed with their data, states dropped by a cap): without this the heaps
        and the per-entry dicts grow with every request ever served and keep dead nodes,
        with their token keys, alive. Amortised O(1) per push."""
        live = self.live_keys()
        heaps: dict[str, list[Entry]] = {}
        for resource, heap in self._heaps.items():
            # keep, per live entry, the heap entry a pop would return first (current key,
            # lowest sequence number): the eviction order does not change
            first: dict[tuple[Node, int], Entry] = {}
            for entry in heap:
                key, seq, node, slot = entry
                ident = (node, slot)
                if live.get(ident) == key and (ident not in first or seq < first[ident][1]):
                    first[ident] = entry
            heaps[resource] = list(first.values())
            heapq.heapify(heaps[resource])
        parked: dict[Node, list[tuple[str, Entry]]] = {}
        for node, entries in self._parked.items():
            kept = [(r, e) for r, e in entries if live.get((node, e[3])) == e[0]]
            if kept:
                parked[node] = kept
        self._current, self._heaps, self._parked = live, heaps, parked
        self._bind_heaps()
        self._kept = self._entries = len(live)
        self.forget(live.keys())

    def live_keys(self) -> dict[tuple[Node, int], Key]:
        """Every stored entry's current key, by (node, slot) (a copy; for checks)."""
        components = self._components
        return {
            ident: key
            for ident, key in self._current.items()
            if ident[0].parent is not None and components[ident[1]].has(ident[0])
        }

    def forget(self, live: KeysView[tuple[Node, int]]) -> None:
        """Drop per-entry records (recency, frequency) of entries not in ``live``."""

    # ------------------------------------------------------------------ hooks
    def on_insert(self, node: Node, component: Component) -> None:
        self._push(node, component)

    def on_hit(self, path: list[Node], used: Node | None) -> None:
        components = self._components
        every_state = self.refresh_state_path
        for node in path:
            data = node.data
            for component in components:
                if data[component.slot] is None:
                    continue
                if not (every_state or node is used) and isinstance(component, RecurrentComponent):
                    continue
                self.touch(node, component)
                self._push(node, component)

    def on_liveness_change(self, nodes: list[Node]) -> None:
        """Re-file the entries of ``nodes`` under their new liveness, same base key: a stale
        live key would keep them at the back of the heap, protected, until everything else
        was gone."""
        if not self.session_aware:
            return
        for node in nodes:
            live = 1.0 if self._view.is_live(node) else 0.0
            for component in self._components:
                ident = (node, component.slot)
                key = self._current.get(ident)
                if key is None or key[0] == live:
                    continue
                refiled = (live, *key[1:])
                self._current[ident] = refiled
                heap = self._heaps[self._resource[component.slot]]
                heapq.heappush(heap, (refiled, next(self._seq), node, component.slot))

    def touch(self, node: Node, component: Component) -> None:
        """Update what ``key`` depends on for a refreshed entry (recency, frequency)."""

    def evicted(self, node: Node, component: Component, key: Key) -> None:
        """Called after an entry was chosen (GDSF inflates its clock here)."""

    def _unpark(self, node: Node) -> None:
        """``node`` lost its last child: its parked entries go back in, each where the lazy
        heap would have it (not yet reached in this round: the heap; passed: the stash)."""
        entries = self._parked.pop(node, None)
        if entries is None:
            return
        for resource, entry in entries:
            top = self._round_top[resource]
            if top is not None and entry < top:
                self._stash.append((resource, entry))
            else:
                heapq.heappush(self._heaps[resource], entry)

    def next_victim(self, resource: str) -> tuple[Node, Component] | None:
        heap = self._heaps.get(resource)
        top = self._round_top.get(resource)
        try:
            while heap:
                entry = heapq.heappop(heap)
                if top is None or entry > top:
                    top = entry
                if self._may_go(resource, entry):
                    key, _, node, slot = entry
                    component = self._components[slot]
                    del self._current[(node, slot)]
                    self.evicted(node, component, key)
                    return node, component
            return None
        finally:
            self._round_top[resource] = top

    def _may_go(self, resource: str, entry: Entry) -> bool:
        """Whether the popped ``entry`` may go now; if not, it is dropped (superseded or
        gone), re-filed, parked or stashed."""
        key, _, node, slot = entry
        ident = (node, slot)
        current_of = self._current
        current = current_of.get(ident)
        if current is None or current != key:
            return False  # superseded by a newer key, or already gone
        if node.parent is None or node.data[slot] is None:
            del current_of[ident]
            return False
        session_aware = self.session_aware
        live = self._view.is_live(node) if session_aware else False
        if session_aware and (key[0] == 1.0) != live:
            # liveness changed: re-file with the same base key (re-computing it would
            # count as a fresh access: GDSF's aging clock has moved on since)
            refiled = (1.0 if live else 0.0, *key[1:])
            self._current[ident] = refiled
            heapq.heappush(self._heaps[resource], (refiled, next(self._seq), node, slot))
            return False
        if self._is_kv[slot] and node.children:
            self._parked.setdefault(node, []).append((resource, entry))
            return False
        if self.pinned(node, self._components[slot]):
            self._stash.append((resource, entry))
            return False
        return True

    def end_round(self) -> None:
        for resource, entry in self._stash:
            heapq.heappush(self._heaps[resource], entry)
        self._stash.clear()
        for resource in self._round_top:
            self._round_top[resource] = None
