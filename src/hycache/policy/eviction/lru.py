"""Least-recently-used eviction: vLLM's global LRU and SGLang's per-component LRU."""

from __future__ import annotations

from collections.abc import KeysView

from hycache.components.base import Component
from hycache.components.recurrent import RecurrentComponent
from hycache.policy.eviction.heap import LAYOUT_FREE_COMPACT_FACTOR, HeapEviction, Key
from hycache.tree.node import Node


class LRUEviction(HeapEviction):
    """Least recently used first; ties go tail-first (deeper entries first), as vLLM's free
    queue frees a request's blocks in reverse order. ``refresh_state_path=False`` refreshes
    only the state actually used (SGLang's per-component LRU; vLLM, whose hit holds only the
    state block at the hit). ``states_first``: among ties, states go before attention KV
    (vLLM frees a request's Mamba groups' blocks before its attention group's)."""

    def __init__(
        self,
        *,
        refresh_state_path: bool = True,
        session_aware: bool = False,
        pins_published_state: bool = True,
        states_first: bool = False,
    ) -> None:
        super().__init__(session_aware=session_aware, pins_published_state=pins_published_state)
        # a key reads only the stamp its own insert or hit just wrote
        self.compact_factor = LAYOUT_FREE_COMPACT_FACTOR
        self.refresh_state_path = refresh_state_path
        self.states_first = states_first
        self._stamp: dict[tuple[Node, int], int] = {}

    def touch(self, node: Node, component: Component) -> None:
        self._stamp[(node, component.slot)] = self.context.clock

    def on_insert(self, node: Node, component: Component) -> None:
        self.touch(node, component)
        super().on_insert(node, component)

    def key(self, node: Node, component: Component) -> Key:
        stamp = self._stamp.get((node, component.slot), 0)
        if self.states_first:
            rank = 0.0 if isinstance(component, RecurrentComponent) else 1.0
            return (float(stamp), rank, float(-node.end))
        return (float(stamp), float(-node.end))

    def evicted(self, node: Node, component: Component, key: Key) -> None:
        self._stamp.pop((node, component.slot), None)

    def forget(self, live: KeysView[tuple[Node, int]]) -> None:
        self._stamp = {ident: t for ident, t in self._stamp.items() if ident in live}
