"""``Accounting``: the memory side of the cache.

It accounts what the pool is charged for and for whom (entries pinned by requests in flight,
their working sets), runs the eviction rounds that make a demand fit, registers node splits
and inserts with the eviction policy, and sizes a working set and an insert in pool units.

Contract: ``ensure`` evicts only unpinned entries, and nothing at all when eviction could not
make the demand fit.
"""

from __future__ import annotations

from collections.abc import Callable

from hycache.cache.registry import InFlight, NodeNotes
from hycache.cache.stats import Counters
from hycache.cache.windows import SlideArgs, window_pages
from hycache.components.base import Component
from hycache.components.full import FullComponent, PagedKVComponent
from hycache.components.recurrent import RecurrentComponent
from hycache.components.swa import SlidingWindowComponent
from hycache.errors import IntegrityError
from hycache.memory.pool import MemoryPool
from hycache.policy.eviction.base import EvictionPolicy
from hycache.tree.base import SlidePlan
from hycache.tree.keys import TokenKey
from hycache.tree.node import Node
from hycache.tree.radix import RadixTree
from hycache.tree.window import plan_slide


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


class Accounting:
    """Memory accounting and eviction driving over one tree and one pool."""

    def __init__(
        self,
        tree: RadixTree,
        pool: MemoryPool,
        eviction: EvictionPolicy,
        counters: Counters,
        in_flight: InFlight,
        notes: NodeNotes,
        *,
        running_slots: int,
    ) -> None:
        self.tree = tree
        self.pool = pool
        self.eviction = eviction
        self.counters = counters
        self.in_flight = in_flight
        self.notes = notes
        self.running_slots = running_slots
        self.page_size = tree.page_size
        #: called before an eviction drops data (a host tier demotes it; None: no tiers)
        self.on_evict: Callable[[Node, Component], None] | None = None
        #: whether memory ever fell short of a demand (once true, stays true)
        self.ever_short = False
        self.kv_components = [c for c in tree.components if isinstance(c, PagedKVComponent)]
        self.recurrent = next(
            (c for c in tree.components if isinstance(c, RecurrentComponent)), None
        )

    # ------------------------------------------------------------------ who holds what
    def locked_bytes(self) -> dict[str, int]:
        """Bytes per resource of cached entries that requests in flight pin."""
        held, undecided = self._locked_walk()
        return self._add_pinned(held, undecided)

    def _add_pinned(
        self, held: dict[str, int], undecided: list[tuple[Node, Component, str]]
    ) -> dict[str, int]:
        """``held`` plus the bytes of the ``undecided`` entries the eviction policy pins."""
        pinned = self.eviction.pinned
        for node, component, resource in undecided:
            if pinned(node, component):
                held[resource] += component.bytes_on(node)
        return held

    def _locked_walk(self) -> tuple[dict[str, int], list[tuple[Node, Component, str]]]:
        """One walk of the locked paths: the bytes per resource surely pinned (attention KV on
        a locked node: the tree's rule pins it, and a policy only adds pins), and the entries
        whose pin the eviction policy decides (states), with their resources. Absent data
        holds no bytes, pinned or not."""
        seen: set[Node] = set()
        held = dict.fromkeys(self.pool.budgets, 0)
        undecided: list[tuple[Node, Component, str]] = []
        resource_of = self.pool.resource_of
        charged = [(c, c.slot, resource_of(c.kind), c.pinned_on_path) for c in self.tree.components]
        for lease in self.in_flight:
            for node in (lease.kv_locked, lease.locked):
                while node is not None and node.parent is not None and node not in seen:
                    seen.add(node)
                    data = node.data
                    locked = node.lock_ref > 0
                    for c, slot, resource, on_path in charged:
                        if data[slot] is None:
                            continue
                        if locked and on_path:
                            held[resource] += c.bytes_on(node)
                        else:
                            undecided.append((node, c, resource))
                    node = node.parent
        return held, undecided

    def in_flight_bytes(self) -> dict[str, int]:
        """Bytes per resource that requests in flight hold privately."""
        held = dict.fromkeys(self.pool.budgets, 0)
        costs = self.pool.costs
        for lease in self.in_flight:
            for kind, ids in lease.working.items():
                cost = costs[kind]
                held[cost.resource] += len(ids) * cost.charged
            slots = len(lease.checkpoints) + len(lease.spare_slots)
            if slots:
                cost = costs["recurrent"]
                held[cost.resource] += slots * cost.charged
        return held

    def reclaimable(self) -> dict[str, int]:
        locked, flight = self.locked_bytes(), self.in_flight_bytes()
        return {r: self.pool.used[r] - locked[r] - flight[r] for r in self.pool.budgets}

    # ------------------------------------------------------------------ eviction
    def ensure(self, demand: dict[str, int]) -> dict[str, int]:
        """Evict until ``demand`` (units per kind) fits. Returns the bytes still short per
        resource (empty: it fits now). Evicts nothing if eviction could not make it fit."""
        short = self.pool.shortfall(demand)
        if not short:
            return short
        self.ever_short = True
        used, flight = self.pool.used, self.in_flight_bytes()
        if any(used[r] - flight[r] < missing for r, missing in short.items()):
            return short  # short even if nothing were locked: skip the walk of the locks
        locked, undecided = self._locked_walk()
        most = dict(locked)  # as if the policy pinned every entry it decides
        for node, component, resource in undecided:
            most[resource] += component.bytes_on(node)
        if any(used[r] - most[r] - flight[r] < missing for r, missing in short.items()):
            locked = self._add_pinned(locked, undecided)  # it may not fit: ask the policy
            if any(used[r] - locked[r] - flight[r] < missing for r, missing in short.items()):
                return short
        return self._evict_for(demand, short)

    def _evict_for(self, demand: dict[str, int], short: dict[str, int]) -> dict[str, int]:
        """Evict until ``demand`` fits or nothing is left."""
        while short:
            # One round ranks the candidates once; an entry that only became evictable during
            # the round (a parent whose last child went) waits for the next round.
            progress = False
            try:
                while short:
                    victim = self.eviction.next_victim(next(iter(short)))
                    if victim is None:
                        break
                    self.evict(*victim)
                    progress = True
                    short = self.pool.shortfall(demand)
            finally:
                self.eviction.end_round()
            if not progress:
                break
        return short

    def evict(self, node: Node, component: Component) -> None:
        """Drop ``component``'s data on ``node``: a state alone, or a KV leaf with all its data."""
        if self.on_evict is not None:
            self.on_evict(node, component)
        if isinstance(component, RecurrentComponent):
            self.counters.evictions[component.name] += 1
            self.counters.evicted_bytes += component.bytes_on(node)
            self.tree.release(node, component)
            self.notes.state_gone(node)
        else:
            if node.children or node.lock_ref:
                raise IntegrityError(f"eviction policy chose KV of {node}, not a free leaf")
            for c in self.tree.components:
                if c.has(node):
                    self.counters.evictions[c.name] += 1
                    self.counters.evicted_bytes += c.bytes_on(node)
            self.tree.remove_leaf(node)
        if node.parent is None:
            self.notes.drop_session(node)
        if not isinstance(component, RecurrentComponent) or node.parent is None:
            self.notes.drop_reason(node)

    # ------------------------------------------------------------------ tree edits
    def split_at(self, key: TokenKey, position: int, ns: str | None) -> Node:
        """``tree.split_at`` that registers a node the split creates (see ``register_split``)."""
        version = self.tree.version
        node = self.tree.split_at(key, position, ns)
        if self.tree.version != version:
            self.register_split(node)
        return node

    def register_split(self, upper: Node) -> None:
        """A split created ``upper``, holding KV pages the eviction policy has never seen:
        register them, or they could never be evicted."""
        for component in self.kv_components:
            if component.has(upper):
                self.eviction.on_insert(upper, component)

    def plan_insert(self, key: TokenKey, ns: str | None, length: int, args: SlideArgs) -> SlidePlan:
        """The plan of inserting ``key[:length]`` sliding windows (pure)."""
        found = self.tree.match(key, ns)
        return plan_slide(
            self.tree, found, length, start=args.start, anchors=args.anchors, prefix=args.prefix
        )

    def place(
        self, key: TokenKey, ns: str | None, length: int, args: SlideArgs
    ) -> SlidePlan | None:
        """Plan the insert of ``key[:length]`` and make room for it; None (nothing evicted
        beyond what a first try did) when eviction cannot. Plans again while eviction changed
        the tree under the plan: it may have removed path nodes the plan counted on. The
        eviction policy hears of the nodes the sequence covers whole before any room is made
        (``EvictionPolicy.on_cover``)."""
        plan = self.plan_insert(key, ns, length, args)
        self.eviction.on_cover(plan.found.path, min(plan.found.matched, length))
        while True:
            if self.ensure(plan.units_by_kind()):
                return None
            if plan.found.tree_version == self.tree.version:
                return plan
            plan = self.plan_insert(key, ns, length, args)

    def insert_path(self, key: TokenKey, ns: str | None, plan: SlidePlan) -> list[Node]:
        """Insert ``key`` as ``plan`` says (room already made) and register its KV entries."""
        path = self.tree.insert(key, ns, slide=plan)
        for node in path:
            for component in self.kv_components:
                self.eviction.on_insert(node, component)
        return path

    # ------------------------------------------------------------------ sizing
    def working_set(
        self, tokens: int, kv_in_place: int = 0, chunk: int | None = None, output: int = 0
    ) -> dict[str, int]:
        """Units per kind a running request needs for ``tokens`` new tokens, the first
        ``kv_in_place`` of which read cached full-attention KV in place (no pages of theirs)
        and the last ``output`` of which it decodes, prefilled in chunks of ``chunk`` tokens
        (None: one); sliding-window KV as ``hycache.cache.windows.window_pages`` says."""
        demand = {}
        page = self.page_size
        for c in self.kv_components:
            if isinstance(c, SlidingWindowComponent):
                demand[c.kind] = window_pages(
                    c.window, tokens, output, chunk, page, keeps_prompt=self.recurrent is None
                )
            else:
                in_place = kv_in_place if isinstance(c, FullComponent) else 0
                demand[c.kind] = _ceil_div(tokens - in_place, page)
        if self.recurrent is not None:
            demand["recurrent"] = self.running_slots
        return demand

    def occupancy(self) -> tuple[int, int]:
        """Bytes charged now for KV pages and for states (cached and in flight)."""
        pool = self.pool
        kv = sum(pool.units[k.kind] * pool.unit_bytes(k.kind) for k in self.kv_components)
        state = pool.units["recurrent"] * pool.unit_bytes("recurrent") if self.recurrent else 0
        return kv, state
