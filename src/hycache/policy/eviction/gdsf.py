"""GreedyDual-Size-Frequency eviction over the prefill compute an entry saves."""

from __future__ import annotations

from collections.abc import KeysView

from hycache.components.base import Component
from hycache.components.recurrent import RecurrentComponent
from hycache.policy.eviction.heap import HeapEviction, Key
from hycache.tree.node import Node


class GDSFEviction(HeapEviction):
    """GreedyDual-Size-Frequency: key = L + frequency * cost / size, where cost is the prefill
    compute the entry saves (the edge's tokens for KV; for a state, the tokens back to the
    previous state on the path), size its bytes, and L the key of the last victim (aging)."""

    def __init__(
        self,
        *,
        session_aware: bool = False,
        use_frequency: bool = True,
        pins_published_state: bool = True,
    ) -> None:
        super().__init__(session_aware=session_aware, pins_published_state=pins_published_state)
        self.use_frequency = use_frequency
        self._clock = 0.0
        self._freq: dict[tuple[Node, int], int] = {}

    def touch(self, node: Node, component: Component) -> None:
        if self.use_frequency:
            ident = (node, component.slot)
            self._freq[ident] = self._freq.get(ident, 1) + 1

    def key(self, node: Node, component: Component) -> Key:
        cache = self.context
        size = component.bytes_on(node)
        if isinstance(component, RecurrentComponent):
            above = component.holder_above(node)
            previous = 0 if above is None else above.end
            cost = cache.prefill_flops(previous, node.end - previous)
        else:
            cost = cache.prefill_flops(node.start, node.length)
        frequency = self._freq.get((node, component.slot), 1)
        return (self._clock + frequency * cost / max(size, 1),)

    def evicted(self, node: Node, component: Component, key: Key) -> None:
        self._clock = max(self._clock, key[-1])
        self._freq.pop((node, component.slot), None)

    def forget(self, live: KeysView[tuple[Node, int]]) -> None:
        self._freq = {ident: n for ident, n in self._freq.items() if ident in live}
