"""The real radix tree behind the scenario interface (what `hycache conformance` runs)."""

from __future__ import annotations

from collections.abc import Sequence

from hycache.components.base import Component
from hycache.components.full import FullComponent
from hycache.components.recurrent import RecurrentComponent
from hycache.components.swa import SlidingWindowComponent
from hycache.conformance.reference import GroupConfig, Slide
from hycache.errors import CacheUsageError, IntegrityError
from hycache.memory.unbounded import UnboundedStore
from hycache.tree.node import Node
from hycache.tree.radix import RadixTree
from hycache.tree.tiers import TierSources, copy_path, tier_sources
from hycache.tree.window import plan_slide


def build_components(groups: Sequence[GroupConfig], store: UnboundedStore) -> list[Component]:
    """One component per group, all drawing ids from ``store``."""
    components: list[Component] = []
    for i, group in enumerate(groups):
        name = f"{group.kind}{i}"
        if group.kind == "full":
            components.append(FullComponent(store, name=name))
        elif group.kind == "swa":
            if group.window is None:
                raise IntegrityError("group.window missing")
            components.append(SlidingWindowComponent(store, group.window, name=name))
        elif group.kind == "recurrent":
            components.append(RecurrentComponent(store, name=name))
        else:
            raise CacheUsageError(f"unknown group kind {group.kind!r}")
    return components


class TreeTarget:
    """Adapts :class:`RadixTree` to the scenario operations; checks integrity after each."""

    def __init__(
        self, page_size: int, groups: Sequence[GroupConfig], tiers: Sequence[str] = ("device",)
    ) -> None:
        """``tiers``: tier names, fastest first (DESIGN.md section 4b); one store serves all."""
        if not tiers:
            raise CacheUsageError("a target needs at least one tier")
        self.store = UnboundedStore()
        self.tier_names = tuple(tiers)
        lower = [build_components(groups, self.store) for _ in tiers[1:]]
        self.tree = RadixTree(page_size, build_components(groups, self.store), lower_tiers=lower)
        self._locks: dict[int, Node] = {}
        self._next_lock = 0

    def _tier(self, tier: int) -> tuple[Component, ...]:
        if not 0 <= tier < len(self.tree.tiers):
            raise CacheUsageError(f"no tier {tier}")
        return self.tree.tiers[tier]

    def _of_kind(self, kind: str, tier: int = 0) -> list[Component]:
        found = [c for c in self._tier(tier) if c.kind == kind]
        if not found:
            raise CacheUsageError(f"no {kind} group")
        return found

    def insert(
        self,
        tokens: Sequence[int],
        states_at: Sequence[int] = (),
        namespace: str | None = None,
        slide: Slide | None = None,
        tier: int = 0,
    ) -> None:
        """Insert ``tokens`` into tier ``tier`` and put states at ``states_at`` there.
        ``slide``: slide windows as a finishing request does (``plan_slide``; None: a plain
        insert; single-tier trees only)."""
        page = self.tree.page_size
        cached = len(tokens) - len(tokens) % page
        components = self._tier(tier)
        if slide is not None and len(self.tree.tiers) > 1:
            raise CacheUsageError("a sliding insert needs a single-tier tree")
        recurrent = [c for c in components if isinstance(c, RecurrentComponent)]
        for p in states_at:  # validate everything before mutating anything
            if p <= 0 or p % page or p > cached or not recurrent:
                raise CacheUsageError(f"cannot put a state at {p} (cached {cached})")
        if slide is not None and any(p < 0 or p % page for p in (slide.start, slide.prefix)):
            raise CacheUsageError(f"{slide}: positions must be page-aligned")
        token_list = list(tokens)
        if slide is None:
            path = self.tree.insert(token_list, namespace, tier=tier)
        else:
            found = self.tree.match(token_list, namespace)
            plan = plan_slide(
                self.tree,
                found,
                cached,
                start=slide.start,
                anchors=states_at,
                prefix=slide.prefix,
            )
            pages = self.store.pages_in_use
            path = self.tree.insert(token_list, namespace, slide=plan)
            taken = self.store.pages_in_use - pages
            if taken != sum(plan.units):
                raise IntegrityError(f"slide plan said {plan.units} units, the insert took {taken}")
        for p in states_at:
            node = self.tree.split_at(token_list, p, namespace)
            for component in recurrent:
                component.put(node)
        if path:
            # Without a KV component nothing fills the path: the part past the last state is
            # an empty leaf (the reference keeps nothing there either), so prune it.
            self.tree.prune(path[-1])
        self.check()

    def match(self, tokens: Sequence[int], namespace: str | None = None) -> tuple[int, int]:
        result = self.tree.match(list(tokens), namespace)
        return result.hit, result.kv_hit

    def sources(self, tokens: Sequence[int], namespace: str | None = None) -> TierSources:
        """Where the hit of ``tokens`` comes from, per tier (fastest holder wins)."""
        result = self.tree.match(list(tokens), namespace)
        return tier_sources(self.tree.tiers, result.path, result.hit)

    def copy(
        self,
        tokens: Sequence[int],
        target: int,
        source: int,
        kinds: Sequence[str] | None = None,
        namespace: str | None = None,
    ) -> None:
        """Copy to tier ``target`` what tier ``source`` holds on the path of ``tokens`` (the
        groups of ``kinds``; None: every group)."""
        first = self._tier(0)
        groups = [g for g, c in enumerate(first) if kinds is None or c.kind in kinds]
        copy_path(self.tree, list(tokens), namespace, source, target, groups)
        self.check()

    def drop_recurrent(
        self, tokens: Sequence[int], at: int, namespace: str | None = None, tier: int = 0
    ) -> None:
        components = self._of_kind("recurrent", tier)
        if at <= 0 or at % self.tree.page_size or at > len(tokens):
            raise CacheUsageError(f"no state can sit at {at} of {len(tokens)} tokens")
        for node in self.tree.nodes_on(list(tokens)[:at], namespace):
            if node.end == at and node.lock_ref and any(c.has(node) for c in components):
                raise CacheUsageError(f"state at {at} is locked")
        for component in components:
            self.tree.release_state_at(component, tokens, at, namespace)
        self.check()

    def drop_swa(
        self,
        tokens: Sequence[int],
        start: int,
        end: int,
        namespace: str | None = None,
        tier: int = 0,
    ) -> None:
        self._drop_range("swa", tokens, start, end, namespace, tier)

    def drop_full(
        self, tokens: Sequence[int], start: int, namespace: str | None = None, tier: int = 0
    ) -> None:
        self._drop_range("full", tokens, start, None, namespace, tier)

    def _drop_range(
        self,
        kind: str,
        tokens: Sequence[int],
        start: int,
        end: int | None,
        ns: str | None,
        tier: int = 0,
    ) -> None:
        components = self._of_kind(kind, tier)
        if len(components) > 1:  # all-or-nothing across groups of this kind: check locks first
            # Refuse only when a locked node in [start, stop) holds data of one of them (as
            # release_range does per component): a lock over already-dropped data is no
            # obstacle. Locks sit at node boundaries, so a locked node is locked as a whole.
            found = self.tree.match(tokens, ns)
            stop = found.matched if end is None else min(end, found.matched)
            if start < stop and any(
                n.start < stop
                and n.end > start
                and n.lock_ref
                and any(c.has(n) for c in components)
                for n in found.path
            ):
                raise CacheUsageError("drop touches a locked position")
        for component in components:
            self.tree.release_range(component, tokens, start, end, ns)
        self.check()

    # ------------------------------------------------------------------ locks (fuzzing)
    def lock(self, tokens: Sequence[int], length: int, namespace: str | None = None) -> int:
        node = self.tree.split_at(list(tokens), length, namespace)
        self.tree.lock(node)
        handle = self._next_lock
        self._next_lock += 1
        self._locks[handle] = node
        self.check()
        return handle

    def unlock(self, handle: int) -> None:
        self.tree.unlock(self._locks.pop(handle))
        self.check()

    def check(self) -> None:
        self.tree.check_integrity()
        self.store.check_integrity()
        held = sum(
            len(n.data[c.slot]) if c.kind != "recurrent" else 1
            for n in self.tree.iter_nodes()
            for c in self.tree.components
            if n.data[c.slot] is not None
        )
        if held != self.store.pages_in_use + self.store.slots_in_use:
            raise IntegrityError("ids leaked: the tree holds other ids than the store lent")
