"""``Tiering``: the host tier in the cache — demotion on device eviction, the match over
device ∪ host and load-back into the device before an admission.

Contract: a device eviction hands the entry to the movement policy first (``on_evict``); a
demoted KV page or state is held by the host until the host's own LRU drops it. ``load_back``
runs before the device admission: it finds the longest prefix (whole pages, before the
prompt's last token) whose FULL KV sits on the device or the host and, with a recurrent group,
ends at a state on either; when that beats the device's own hit it inserts the missing pages
and the state into the device, allocating room like any insert (evicting device entries,
which may demote in turn), with the device path and the host entries pinned meanwhile. If the
device cannot make room nothing is loaded. Tokens of each hit are then counted by the tier
their KV came from.
"""

from __future__ import annotations

from dataclasses import dataclass

from hycache.cache.accounting import Accounting
from hycache.cache.host import HostTier, page_hashes
from hycache.cache.registry import NodeNotes
from hycache.cache.windows import SlideArgs
from hycache.components.base import Component
from hycache.components.full import FullComponent
from hycache.components.recurrent import RecurrentComponent
from hycache.policy.movement.base import MovementPolicy
from hycache.tree.keys import TOKEN_BYTES
from hycache.tree.node import Node


@dataclass(frozen=True)
class LoadBack:
    """What one load-back moved: KV from ``device_kv`` to ``end`` (tokens) and the state at
    ``end`` (when ``state``), ``bytes`` host->device."""

    device_kv: int
    end: int
    state: bool
    bytes: int


class Tiering:
    """The device tier's link to a host tier."""

    def __init__(
        self,
        accounting: Accounting,
        host: HostTier,
        movement: MovementPolicy,
        notes: NodeNotes,
    ) -> None:
        self.accounting = accounting
        self.tree = accounting.tree
        self.host = host
        self.movement = movement
        self.notes = notes
        self.page = accounting.page_size
        self.full = next(
            (c for c in accounting.kv_components if isinstance(c, FullComponent)), None
        )
        self.recurrent = accounting.recurrent
        self.hit_tokens = {"device": 0, "host": 0}
        accounting.on_evict = self.on_evict

    # ------------------------------------------------------------------ demotion
    def _digests(self, node: Node) -> list[bytes]:
        key = b"".join(n.key for n in node.path_from_root())
        return page_hashes(key, node.namespace, node.end // self.page, self.page)

    def on_evict(self, node: Node, component: Component) -> None:
        """The device is about to drop ``component``'s data on ``node`` (a state alone, or a
        KV leaf with all its data): demote what the movement policy says."""
        if node.parent is None:
            return
        state = self.recurrent is not None and self.recurrent.has(node)
        if isinstance(component, RecurrentComponent):
            interior = bool(node.children) or node.lock_ref > 0
            if not self.movement.demotes("recurrent", interior=interior):
                return
            self.host.put("recurrent", self._digests(node)[-1])
            return
        digests = self._digests(node)
        if (
            self.full is not None
            and self.full.has(node)
            and self.movement.demotes("full", interior=False)
        ):
            for d in reversed(digests[node.start // self.page :]):
                self.host.put("full", d)
        if state and self.movement.demotes("recurrent", interior=False):
            self.host.put("recurrent", digests[-1])

    def write_through(self, path: list[Node]) -> None:
        """Copy the KV pages and states on ``path`` (just inserted) to the host."""
        if not path:
            return
        digests = self._digests(path[-1])
        for node in reversed(path):
            if self.recurrent is not None and self.recurrent.has(node):
                self.host.put("recurrent", digests[node.end // self.page - 1])
            if self.full is not None and self.full.has(node):
                for d in reversed(digests[node.start // self.page : node.end // self.page]):
                    self.host.put("full", d)

    # ------------------------------------------------------------------ load-back
    def _target(
        self, key: bytes, ns: str | None, limit: int, digests: list[bytes]
    ) -> tuple[int, int, bool]:
        """(device kv_hit, union hit, whether the state at the union hit comes from host)."""
        found = self.tree.match(key[: limit * TOKEN_BYTES], ns)
        device_kv = found.kv_hit if self.full is not None else found.hit
        end = device_kv
        while end < limit and self.host.has("full", digests[end // self.page]):
            end += self.page
        if self.recurrent is None:
            return device_kv, end if end > found.hit else 0, False
        on_device = {n.end for n in found.path if n.end <= found.matched and self.recurrent.has(n)}
        for p in range(end, found.hit, -self.page):
            if p in on_device:
                return device_kv, p, False
            if self.host.has("recurrent", digests[p // self.page - 1]):
                return device_kv, p, True
        return device_kv, 0, False

    def load_back(self, key: bytes, ns: str | None) -> LoadBack | None:
        """Load what the host adds to the device's hit on ``key`` (see module docstring)."""
        n = len(key) // TOKEN_BYTES
        limit = (n - 1) // self.page * self.page
        if limit <= 0:
            return None
        digests = page_hashes(key, ns, limit // self.page, self.page)
        device_kv, end, state_up = self._target(key, ns, limit, digests)
        if end <= 0:
            return None
        acc, tree = self.accounting, self.tree
        wanted = digests[device_kv // self.page : end // self.page]
        state_digest = digests[end // self.page - 1]
        self.host.pinned.update(wanted)
        if state_up:
            self.host.pinned.add(state_digest)
        anchor = acc.split_at(key, device_kv, ns) if device_kv else None
        if anchor is not None:
            tree.lock(anchor, hold_state=False)
        slot: int | None = None
        try:
            if state_up:
                if acc.ensure({"recurrent": 1}):
                    return None
                slot = acc.pool.alloc("recurrent", 1)[0]
            plan = acc.place(key, ns, end, SlideArgs(0, (), 0))
            if plan is None:
                return None
            pages = plan.units_by_kind().get("full", 0)
            path = acc.insert_path(key, ns, plan)
            moved = self.host.loaded("full", pages) if pages else 0
            if slot is not None and self.recurrent is not None:
                version = tree.version
                node = tree.boundary_on_path(path, end)
                if tree.version != version:
                    acc.register_split(node)
                if self.recurrent.adopt(node, slot):
                    acc.eviction.on_insert(node, self.recurrent)
                    self.notes.note_reason(node, "host")
                    moved += self.host.loaded("recurrent", 1)
                    slot = None
            self.host.touch("full", list(reversed(wanted)))
            return LoadBack(device_kv, end, state_up, moved)
        finally:
            if slot is not None:
                acc.pool.free("recurrent", [slot])
            if anchor is not None:
                tree.unlock(anchor, hold_state=False)
            self.host.pinned.clear()

    def count_hit(self, hit: int, loaded: LoadBack | None) -> int:
        """Count a lease's ``hit`` tokens per tier; returns the tokens from the host."""
        host = 0
        if loaded is not None:
            host = max(0, min(hit, loaded.end) - loaded.device_kv)
        self.hit_tokens["host"] += host
        self.hit_tokens["device"] += hit - host
        return host
