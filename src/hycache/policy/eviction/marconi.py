"""Marconi's FLOP-aware eviction and its one-time bootstrap search of alpha.

Candidates are nodes with at most one child. Utility = alpha * norm(FLOPs saved / bytes) +
norm(recency), min-max normalised over the candidates; the lowest goes. Evicting a leaf
removes it (KV and state); evicting a single-child node drops its state (its KV stays, the
child needs it). A lookup refreshes only the deepest matched node.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from hycache.components.base import Component
from hycache.components.recurrent import RecurrentComponent
from hycache.errors import IntegrityError
from hycache.policy.eviction.base import EvictionPolicy
from hycache.tree.node import Node

ALPHA_GRID: tuple[float, ...] = tuple(round(0.1 * i, 1) for i in range(21))


def _normalise(values: list[float]) -> list[float]:
    lo, hi = min(values), max(values)
    if hi <= lo:
        return [0.0 for _ in values]
    return [(v - lo) / (hi - lo) for v in values]


class MarconiEviction(EvictionPolicy):
    """One scan per eviction round ranks every candidate; the round evicts in that order."""

    def __init__(self, alpha: float = 1.0) -> None:
        self.alpha = alpha
        self._stamp: dict[Node, int] = {}
        self._ranked: list[tuple[Node, Component]] = []
        self._ranked_for: str | None = None
        self._flops_memo: dict[tuple[int, int], float] = {}

    def pinned(self, node: Node, component: Component) -> bool:
        """Everything on a locked path stays (Marconi has no requests in flight to tell
        passing locks from ending ones)."""
        return node.lock_ref > 0

    def on_insert(self, node: Node, component: Component) -> None:
        self._stamp[node] = self.context.clock

    def on_hit(self, path: list[Node], used: Node | None) -> None:
        if path:
            self._stamp[path[-1]] = self.context.clock

    def _flops(self, start: int, length: int) -> float:
        key = (start, length)
        flops = self._flops_memo.get(key)
        if flops is None:
            flops = self.context.prefill_flops(start, length)
            self._flops_memo[key] = flops
        return flops

    def _rank(self, resource: str) -> list[tuple[Node, Component]]:
        """Every candidate that frees ``resource``, lowest utility first. One pass over the
        tree (the hot loop of this policy: kept free of per-node method calls)."""
        cache = self.context
        recurrent = cache.recurrent
        rec_slot = -1 if recurrent is None else recurrent.slot
        rec_bytes = 0 if recurrent is None else recurrent.bytes_per_state
        kv = [(c, c.slot, c.bytes_per_page) for c in cache.kv_components]
        kv_frees = {c.slot: cache.resource_of(c.kind) == resource for c in cache.kv_components}
        rec_frees = recurrent is not None and cache.resource_of(recurrent.kind) == resource
        stamp, flops = self._stamp, self._flops
        nodes: list[Node] = []
        victims: list[Component] = []
        efficiency: list[float] = []
        recency: list[float] = []
        stack = [c for root in cache.tree.roots() for c in root.children.values()]
        while stack:
            node = stack.pop()
            children = node.children
            if children:
                stack.extend(children.values())
            if node.lock_ref or len(children) > 1:
                continue
            data = node.data
            has_state = rec_slot >= 0 and data[rec_slot] is not None
            victim: Component | None = None
            size = rec_bytes if has_state else 0
            frees = has_state and rec_frees
            for component, slot, per_page in kv:
                pages = data[slot]
                if pages is not None:
                    size += len(pages) * per_page
                    if victim is None and not children:
                        victim = component
                        frees = frees or kv_frees[slot]
            if victim is None:
                if not has_state:
                    continue
                if not (recurrent is not None):
                    raise IntegrityError("broken invariant: recurrent is not None")
                victim = recurrent
            if not frees:
                continue
            nodes.append(node)
            victims.append(victim)
            efficiency.append(flops(node.start, node.end - node.start) / (size or 1))
            recency.append(float(stamp.get(node, 0)))
        if not nodes:
            return []
        utility = [
            self.alpha * e + r
            for e, r in zip(_normalise(efficiency), _normalise(recency), strict=True)
        ]
        order = sorted(range(len(nodes)), key=lambda i: (utility[i], -nodes[i].end))
        return [(nodes[i], victims[i]) for i in order]

    def next_victim(self, resource: str) -> tuple[Node, Component] | None:
        if self._ranked_for != resource:
            self._ranked = self._rank(resource)[::-1]
            self._ranked_for = resource
        while self._ranked:
            node, component = self._ranked.pop()
            if node.parent is None or not component.has(node) or node.lock_ref:
                continue
            if not isinstance(component, RecurrentComponent) and node.children:
                continue
            return node, component
        self._ranked_for = None
        return None

    def end_round(self) -> None:
        self._ranked = []
        self._ranked_for = None


def tune_alpha(
    replay: Callable[[float], float], grid: Sequence[float] = ALPHA_GRID
) -> tuple[float, dict[float, float]]:
    """Marconi's one-time bootstrap: ``replay(alpha)`` replays the bootstrap window with that
    alpha and returns the FLOPs saved; the best alpha wins (ties: the smallest). Returns the
    chosen alpha and every alpha's score."""
    scores = {alpha: replay(alpha) for alpha in grid}
    best = max(scores, key=lambda a: (scores[a], -a))
    return best, scores
