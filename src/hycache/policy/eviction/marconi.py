"""Marconi's FLOP-aware eviction and its one-time bootstrap search of alpha.

Candidates are nodes with at most one child. Utility = alpha * norm(FLOPs saved / bytes) +
norm(recency), min-max normalised over the candidates; the lowest goes. Evicting a leaf
removes it (KV and state); evicting a single-child node drops its state (its KV stays, the
child needs it).

Recency is a logical stamp per node, kept the way the Marconi artifact's V2/V3 keep
``TreeNode.last_access_time`` (``radix_cache_hybrid.py`` at 0801661, logical timestamps):

* a node is stamped when it is created (``_insert_helper`` stamps a new leaf,
  ``_split_node`` the new upper node of a split, whose lower part keeps its stamp); here, the
  first time the node gets data, and whenever it gets a state (a node that had none: the
  artifact creates a node there, every artifact node holding a state);
* an insert walking over nodes it already finds does not re-stamp them (``_insert_helper``
  leaves them alone under V2/V3), except that ``insert`` first runs ``match_prefix`` on the
  whole sequence, which refreshes the deepest node the sequence covers whole: here
  ``on_cover`` refreshes the deepest covered node that holds a state, before room is made;
* a lookup (``match_prefix``) refreshes only the deepest matched node (``on_hit``);
* evicting a single-child node's state merges it into its child in the artifact
  (``_evict_intermediate_node``), the merged node taking the larger of the two stamps; here
  the node and the nodes below it down to the next one that holds a state (or branches, or
  is a leaf) all take the largest of their stamps.
"""

from __future__ import annotations

from collections.abc import Sequence

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
        super().__init__()
        self.alpha = alpha
        self._stamp: dict[Node, int] = {}
        self._ranked: list[tuple[Node, Component]] = []
        self._ranked_for: str | None = None
        self._flops_memo: dict[tuple[int, int], float] = {}

    def pinned(self, node: Node, component: Component) -> bool:
        """Everything on a locked path stays (Marconi has no requests in flight to tell
        passing locks from ending ones)."""
        return node.lock_ref > 0

    def stamp(self, node: Node) -> int:
        """The logical time ``node`` was last stamped (0: never)."""
        return self._stamp.get(node, 0)

    def on_insert(self, node: Node, component: Component) -> None:
        if isinstance(component, RecurrentComponent) or node not in self._stamp:
            self._stamp[node] = self.context.clock

    def on_hit(self, path: list[Node], used: Node | None) -> None:
        if path:
            self._stamp[path[-1]] = self.context.clock

    def on_cover(self, path: Sequence[Node], covered: int) -> None:
        recurrent = self.context.recurrent
        if recurrent is None:
            return
        for node in reversed(path):
            if node.end <= covered and recurrent.has(node):
                self._stamp[node] = self.context.clock
                return

    def _merge_stamps(self, node: Node) -> None:
        """``node``'s state is about to go while it has one child: it and the chain below it,
        down to the next node holding a state, take the largest stamp among them."""
        recurrent = self.context.recurrent
        chain = [node]
        below = node
        while len(below.children) == 1:
            below = next(iter(below.children.values()))
            chain.append(below)
            if recurrent is None or recurrent.has(below):
                break
        newest = max(self._stamp.get(n, 0) for n in chain)
        for n in chain:
            self._stamp[n] = newest

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
            if node.children:
                self._merge_stamps(node)
            return node, component
        self._ranked_for = None
        return None

    def end_round(self) -> None:
        self._ranked = []
        self._ranked_for = None


def pick_alpha(grid: Sequence[float], scores: Sequence[float]) -> int:
    """Marconi's one-time bootstrap rule: given the FLOPs saved by a replay of the bootstrap
    window with each alpha of ``grid``, the index of the best alpha (ties: the smallest)."""
    return max(range(len(grid)), key=lambda i: (scores[i], -grid[i]))
