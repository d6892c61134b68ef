"""``Tiering``: the tiers below the device in the cache — demotion on device eviction, the
match over device ∪ lower tiers and load-back into the device before an admission.

Contract: a device eviction asks the movement policy first (``on_evict``); a demoted KV page
or state is written to every lower tier (the host from the device, storage through from the
host) and held by each until that tier's own LRU drops it. ``load_back`` runs before the
device admission: it finds the longest prefix, in whole host pages before the prompt's last
token, whose FULL KV sits on the device or a lower tier (per page, the fastest holder wins)
and, with a recurrent group, ends at a state on any tier; when that beats the device's own
hit (in tokens) it inserts the missing pages and the state into the device, allocating room
like any insert (evicting device entries, which may demote in turn), with the device path and
the entries to load pinned meanwhile. If the device cannot make room nothing is loaded.
Tokens of each hit are then counted by the tier their KV came from.
"""

from __future__ import annotations

from dataclasses import dataclass

from hycache.cache.accounting import Accounting
from hycache.cache.lowertier import LowerTier
from hycache.cache.registry import NodeNotes
from hycache.cache.tierkeys import base_of, chain, state_key
from hycache.cache.windows import SlideArgs
from hycache.components.base import Component
from hycache.components.full import FullComponent
from hycache.components.recurrent import RecurrentComponent
from hycache.policy.movement.base import MovementPolicy
from hycache.tree.keys import TOKEN_BYTES, concat
from hycache.tree.node import Node


@dataclass(frozen=True)
class LoadBack:
    """What one load-back moved: ``segments``, the token ranges of KV loaded and the tier
    each came from, and the bytes moved up to the device per tier."""

    segments: tuple[tuple[str, int, int], ...]
    bytes_by_tier: tuple[tuple[str, int], ...]

    @property
    def bytes(self) -> int:
        return sum(b for _, b in self.bytes_by_tier)


@dataclass(frozen=True)
class _Target:
    device_kv: int
    end: int
    pages: tuple[LowerTier, ...]  # the holder of each host page from device_kv // page on
    state: LowerTier | None
    state_key: bytes | None


class Tiering:
    """The device tier's link to the tiers below it, fastest first."""

    def __init__(
        self,
        accounting: Accounting,
        tiers: list[LowerTier],
        movement: MovementPolicy,
        notes: NodeNotes,
        page: int,
    ) -> None:
        self.accounting = accounting
        self.tree = accounting.tree
        self.tiers = tiers
        self.movement = movement
        self.notes = notes
        self.page = page
        self.full = next(
            (c for c in accounting.kv_components if isinstance(c, FullComponent)), None
        )
        self.kv_bytes_per_token = tiers[0].unit["full"] // page
        self.recurrent = accounting.recurrent
        self.hit_tokens = {"device": 0, **{t.name: 0 for t in tiers}}
        accounting.on_evict = self.on_evict

    # ------------------------------------------------------------------ demotion
    def _links(self, node: Node) -> tuple[bytes, list[bytes]]:
        key = bytes(concat(n.key for n in node.path_from_root()))
        return key, chain(key, node.namespace, node.end // self.page, self.page)

    def _put_state(self, key: bytes, links: list[bytes], ns: str | None, end: int) -> None:
        base = base_of(links, ns, end, self.page)
        digest = state_key(key, base, end, self.page)
        for tier in self.tiers:
            tier.put_state(digest, base, end)

    def on_evict(self, node: Node, component: Component) -> None:
        """The device is about to drop ``component``'s data on ``node`` (a state alone, or a
        KV leaf with all its data): demote what the movement policy says."""
        if node.parent is None:
            return
        state = self.recurrent is not None and self.recurrent.has(node)
        if isinstance(component, RecurrentComponent):
            interior = bool(node.children) or node.lock_ref > 0
            if self.movement.demotes("recurrent", interior=interior):
                key, links = self._links(node)
                self._put_state(key, links, node.namespace, node.end)
            return
        full = self.full is not None and self.full.has(node)
        kv = full and self.movement.demotes("full", interior=False)
        demote_state = state and self.movement.demotes("recurrent", interior=False)
        if not (kv or demote_state):
            return
        key, links = self._links(node)
        if kv:
            pages = links[node.start // self.page :]
            for tier in self.tiers:
                tier.put_pages(pages)
        if demote_state:
            self._put_state(key, links, node.namespace, node.end)

    def write_through(self, path: list[Node]) -> None:
        """Copy the KV pages and states on ``path`` (just inserted) to every lower tier."""
        if not path:
            return
        key, links = self._links(path[-1])
        ns = path[-1].namespace
        if self.full is not None and self.full.has(path[-1]):
            start = next(n.start for n in path if self.full.has(n)) // self.page
            for tier in self.tiers:
                tier.put_pages(links[start:])
        if self.recurrent is not None and self.movement.demotes("recurrent", interior=True):
            for node in path:
                if self.recurrent.has(node):
                    self._put_state(key, links, ns, node.end)

    # ------------------------------------------------------------------ load-back
    def _holder(self, digest: bytes) -> LowerTier | None:
        return next((t for t in self.tiers if t.has_page(digest)), None)

    def _lower_state(
        self, key: bytes, ns: str | None, links: list[bytes], low: int, high: int
    ) -> tuple[int, LowerTier, bytes] | None:
        """The last state below the device in ``(low, high]``: (position, fastest holder,
        key), walking one probe per host page from ``high`` down."""
        page = self.page
        for whole in range(high // page, low // page - 1, -1):
            base = base_of(links, ns, whole * page, page)
            best: tuple[int, LowerTier, bytes] | None = None
            for tier in self.tiers:
                for p in tier.state_positions(base) or ():
                    if low < p <= high and (best is None or p > best[0]):
                        digest = state_key(key, base, p, page)
                        if tier.has_state(digest):
                            best = (p, tier, digest)
            if best is not None:
                return best
        return None

    def _target(
        self, key: bytes, ns: str | None, links: list[bytes], slow_limit: int | None
    ) -> _Target | None:
        page, n = self.page, len(key) // TOKEN_BYTES
        found = self.tree.match(key[: (n - 1) * TOKEN_BYTES], ns)
        device_kv = found.kv_hit if self.full is not None else found.hit
        end, holders, slow = device_kv, [], 0
        if self.full is not None:
            for j in range(device_kv // page, len(links)):
                holder = self._holder(links[j])
                if holder is None:
                    break
                if holder is not self.tiers[0] and slow_limit is not None:
                    slow += (j + 1) * page - max(device_kv, j * page)
                    if slow > slow_limit:
                        break
                holders.append(holder)
                end = (j + 1) * page
        else:
            end = n - 1
        if self.recurrent is None:
            return _Target(device_kv, end, tuple(holders), None, None) if end > found.hit else None
        on_device = max(
            (
                x.end
                for x in found.path
                if found.hit < x.end <= min(found.matched, end) and self.recurrent.has(x)
            ),
            default=0,
        )
        lower = self._lower_state(key, ns, links, max(found.hit, on_device), end)
        if lower is not None and lower[1] is not self.tiers[0] and slow_limit == 0:
            lower = None  # nothing may come from the slow tiers
        if lower is not None:
            p, tier, digest = lower
            return _Target(device_kv, p, tuple(holders), tier, digest)
        if on_device > found.hit:
            return _Target(device_kv, on_device, tuple(holders), None, None)
        return None

    def load_back(
        self, key: bytes, ns: str | None, slow_limit: int | None = None
    ) -> LoadBack | None:
        """Load what the lower tiers add to the device's hit on ``key`` (module docstring);
        at most ``slow_limit`` tokens of KV (None: any) from the tiers below the first, and
        their state only when it may be more than 0 (a storage prefetch that stops early)."""
        n = len(key) // TOKEN_BYTES
        if n <= 1:
            return None
        page = self.page
        links = chain(key, ns, (n - 1) // page, page)
        target = self._target(key, ns, links, slow_limit)
        if target is None:
            return None
        device_kv, end = target.device_kv, target.end
        first = device_kv // page
        used = [
            (links[first + i], holder)
            for i, holder in enumerate(target.pages)
            if (first + i) * page < end
        ]
        for digest, holder in used:
            holder.pinned.add(digest)
        if target.state is not None and target.state_key is not None:
            target.state.pinned.add(target.state_key)
        try:
            return self._insert(key, ns, target, used)
        finally:
            for tier in self.tiers:
                tier.pinned.clear()

    def _insert(
        self, key: bytes, ns: str | None, target: _Target, used: list[tuple[bytes, LowerTier]]
    ) -> LoadBack | None:
        acc, tree, page = self.accounting, self.tree, self.page
        device_kv, end = target.device_kv, target.end
        anchor = acc.split_at(key, device_kv, ns) if device_kv else None
        if anchor is not None:
            tree.lock(anchor, hold_state=False)
        slot: int | None = None
        try:
            if target.state is not None:
                if acc.ensure({"recurrent": 1}):
                    return None
                slot = acc.pool.alloc("recurrent", 1)[0]
            plan = acc.place(key, ns, end, SlideArgs(0, (), 0))
            if plan is None:
                return None
            path = acc.insert_path(key, ns, plan)
            moved: dict[str, int] = {}
            segments: list[tuple[str, int, int]] = []
            first = device_kv // page
            for i, (_, holder) in enumerate(used):
                lo, hi = max(device_kv, (first + i) * page), min(end, (first + i + 1) * page)
                nbytes = (hi - lo) * self.kv_bytes_per_token
                holder.loaded("full", nbytes, 1)
                moved[holder.name] = moved.get(holder.name, 0) + nbytes
                if segments and segments[-1][0] == holder.name and segments[-1][2] == lo:
                    segments[-1] = (holder.name, segments[-1][1], hi)
                else:
                    segments.append((holder.name, lo, hi))
            if slot is not None and self.recurrent is not None and target.state is not None:
                version = tree.version
                node = tree.boundary_on_path(path, end)
                if tree.version != version:
                    acc.register_split(node)
                if self.recurrent.adopt(node, slot):
                    acc.eviction.on_insert(node, self.recurrent)
                    self.notes.note_reason(node, target.state.name)
                    nbytes = target.state.unit["recurrent"]
                    target.state.loaded("recurrent", nbytes, 1)
                    moved[target.state.name] = moved.get(target.state.name, 0) + nbytes
                    slot = None
            for tier in self.tiers:
                tier.touch_pages([d for d, h in used if h is tier])
            return LoadBack(tuple(segments), tuple(moved.items()))
        finally:
            if slot is not None:
                acc.pool.free("recurrent", [slot])
            if anchor is not None:
                tree.unlock(anchor, hold_state=False)

    def count_hit(self, hit: int, loaded: LoadBack | None) -> dict[str, int]:
        """Count a lease's ``hit`` tokens per tier; returns the tokens from each lower tier."""
        below: dict[str, int] = {}
        if loaded is not None:
            for name, lo, hi in loaded.segments:
                tokens = max(0, min(hit, hi) - lo)
                if tokens:
                    below[name] = below.get(name, 0) + tokens
        for name, tokens in below.items():
            self.hit_tokens[name] += tokens
        self.hit_tokens["device"] += hit - sum(below.values())
        return below
