"""A brute-force reference model of the cache's match semantics (DESIGN.md section 4).

Obviously correct and slow: every cached position is a key in a plain set per component, every
state a key ``(namespace, tokens[:p])``. No tree, no splits. A position q is identified by its
prefix (DESIGN.md section 4) taken to the end of q's page, ``tokens[:page_end(q)]``: KV is cached
and dropped in whole pages, so two paths that diverge inside a page hold two different pages.
Used by the differential tests to check :class:`hycache.tree.radix.RadixTree`.

Choices the format leaves open, made here and in the tree alike:
* dropping FULL KV keeps the other components' data on those positions;
* a drop that touches a position covered by a lock raises CacheUsageError and changes nothing.

An insert that slides windows (``slide``: the position the request computed from) adds SWA
KV only where the window rule of :mod:`hycache.components.swa` keeps it, computed here
position by position from the content before the insert.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from hycache.errors import CacheUsageError, IntegrityError
from hycache.tree.tiers import TierSources

Key = tuple[str | None, tuple[int, ...]]


@dataclass(frozen=True)
class GroupConfig:
    """One layer group of a scenario: kind "full" | "swa" | "recurrent", window for swa."""

    kind: str
    window: int | None = None


@dataclass(frozen=True)
class Slide:
    """How an insert slides windows: the request computed its tokens from ``start`` on; every
    page boundary below ``prefix`` is a point a later request may resume at."""

    start: int = 0
    prefix: int = 0


class ReferenceCache:
    def __init__(
        self, page_size: int, groups: Sequence[GroupConfig], tiers: Sequence[str] = ("device",)
    ) -> None:
        """``tiers``: tier names, fastest first (DESIGN.md section 4b)."""
        if not tiers:
            raise CacheUsageError("a model needs at least one tier")
        self.page_size = page_size
        self.groups = tuple(groups)
        self.tier_names = tuple(tiers)
        # KV / state per tier, per group; ``live`` is the first tier's
        self.tier_live: list[list[set[Key]]] = [[set() for _ in self.groups] for _ in tiers]
        self.live: list[set[Key]] = self.tier_live[0]
        self.locks: dict[int, tuple[Key, int]] = {}
        self._next_lock = 0

    @staticmethod
    def _key(namespace: str | None, tokens: Sequence[int], length: int) -> Key:
        return (namespace, tuple(tokens[:length]))

    def _pos(self, namespace: str | None, tokens: Sequence[int], q: int) -> Key:
        """The key of position ``q``: its prefix to the end of its page."""
        return self._key(namespace, tokens, (q // self.page_size + 1) * self.page_size)

    def _aligned(self, n: int) -> int:
        return n - n % self.page_size

    def insert(
        self,
        tokens: Sequence[int],
        states_at: Sequence[int] = (),
        namespace: str | None = None,
        slide: Slide | None = None,
        tier: int = 0,
    ) -> None:
        live_of = self._tier(tier)
        if slide is not None and len(self.tier_live) > 1:
            raise CacheUsageError("a sliding insert needs a single tier")
        limit = self._aligned(len(tokens))
        has_recurrent = any(g.kind == "recurrent" for g in self.groups)
        for p in states_at:
            if p <= 0 or p % self.page_size or p > limit or not has_recurrent:
                raise CacheUsageError(f"cannot put a state at {p}")
        if slide is not None and any(
            p < 0 or p % self.page_size for p in (slide.start, slide.prefix)
        ):
            raise CacheUsageError(f"{slide}: positions must be page-aligned")
        anchors = None if slide is None else self._anchors(tokens, limit, states_at, namespace)
        for q in range(limit):
            key = self._pos(namespace, tokens, q)
            for group, live in zip(self.groups, live_of, strict=True):
                if group.kind == "recurrent":
                    continue
                if anchors is None or group.kind != "swa" or self._kept(group, q, anchors, slide):
                    live.add(key)
        for p in states_at:
            for group, live in zip(self.groups, live_of, strict=True):
                if group.kind == "recurrent":
                    live.add(self._key(namespace, tokens, p))

    def _tier(self, tier: int) -> list[set[Key]]:
        if not 0 <= tier < len(self.tier_live):
            raise CacheUsageError(f"no tier {tier}")
        return self.tier_live[tier]

    def _has(self, index: int, key: Key) -> bool:
        """Whether any tier holds group ``index``'s data at ``key``."""
        return any(key in live[index] for live in self.tier_live)

    def _fastest(self, index: int, key: Key) -> int:
        return min(t for t, live in enumerate(self.tier_live) if key in live[index])

    def sources(self, tokens: Sequence[int], namespace: str | None = None) -> TierSources:
        """Where the hit of ``tokens`` comes from: per position of ``[0, hit)`` the FULL page
        from the slowest of the FULL groups' fastest holders; the state at the hit likewise."""
        hit, _ = self.match(tokens, namespace)
        full = [i for i, g in enumerate(self.groups) if g.kind == "full"]
        recurrent = [i for i, g in enumerate(self.groups) if g.kind == "recurrent"]
        kv_from: dict[int, int] = {}
        if full:
            for q in range(hit):
                key = self._pos(namespace, tokens, q)
                tier = max(self._fastest(i, key) for i in full)
                kv_from[tier] = kv_from.get(tier, 0) + 1
        state_from = None
        if recurrent and hit:
            key = self._key(namespace, tokens, hit)
            state_from = max(self._fastest(i, key) for i in recurrent)
        return TierSources(kv_from, state_from)

    def copy(
        self,
        tokens: Sequence[int],
        target: int,
        source: int,
        kinds: Sequence[str] | None = None,
        namespace: str | None = None,
    ) -> None:
        """Copy to tier ``target`` what tier ``source`` holds on ``tokens``' path."""
        dst, src = self._tier(target), self._tier(source)
        if target == source:
            raise CacheUsageError("copy onto the same tier")
        limit = self._aligned(len(tokens))
        for i, group in enumerate(self.groups):
            if kinds is not None and group.kind not in kinds:
                continue
            if group.kind == "recurrent":
                ends = range(self.page_size, limit + 1, self.page_size)
                keys = [self._key(namespace, tokens, p) for p in ends]
            else:
                keys = [self._pos(namespace, tokens, q) for q in range(limit)]
            dst[i].update(k for k in keys if k in src[i])

    # ------------------------------------------------------------------ sliding windows
    def _anchors(
        self, tokens: Sequence[int], limit: int, states_at: Sequence[int], ns: str | None
    ) -> set[int]:
        """Resume points of an insert of ``tokens[:limit]``, from the content before it: the
        end, the states (existing and ``states_at``) and the branch points on the path."""
        page = self.page_size
        anchors = {limit} if limit else set()
        anchors.update(states_at)
        for i, group in enumerate(self.groups):
            if group.kind == "recurrent":
                anchors.update(
                    s
                    for s in range(page, limit + 1, page)
                    if self._key(ns, tokens, s) in self.live[i]
                )
        tracked = [k for live in self.live for k in live] + [k for k, _ in self.locks.values()]
        for p in range(page, limit, page):
            stem, step = tuple(tokens[:p]), tuple(tokens[p : p + page])
            if any(
                kns == ns and len(k) >= p + page and k[:p] == stem and k[p : p + page] != step
                for kns, k in tracked
            ):
                anchors.add(p)
        return anchors

    def _kept(self, group: GroupConfig, q: int, anchors: set[int], slide: Slide | None) -> bool:
        """Whether a sliding insert keeps SWA KV at position ``q``: computed by the request
        (``q`` at or past ``slide.start`` rounded up to a page) and below ``slide.prefix`` or
        within ``max(W - 1, 1)`` before an anchor, rounded out to pages."""
        if group.window is None or slide is None:
            raise CacheUsageError("a sliding insert of an SWA group needs its window and slide")
        page = self.page_size
        if q < -(-slide.start // page) * page:
            return False
        if q < slide.prefix:
            return True
        reach = max(group.window - 1, 1)
        for a in anchors:
            lo = max(0, a - reach)
            if lo - lo % page <= q < a:
                return True
        return False

    def _accepts(self, index: int, tokens: Sequence[int], p: int, ns: str | None) -> bool:
        group = self.groups[index]
        if p == 0 or group.kind == "full":
            return True  # FULL is checked through kv_hit
        if group.kind == "recurrent":
            return self._has(index, self._key(ns, tokens, p))
        if group.window is None:
            raise IntegrityError("group.window missing")
        return all(
            self._has(index, self._pos(ns, tokens, q))
            for q in range(max(0, p - group.window + 1), p)
        )

    def match(self, tokens: Sequence[int], namespace: str | None = None) -> tuple[int, int]:
        """(hit, kv_hit) for ``tokens``; a pure query."""
        full = [i for i, g in enumerate(self.groups) if g.kind == "full"]
        kv_hit = 0
        for q in range(self._aligned(len(tokens))):
            key = self._pos(namespace, tokens, q)
            present = all(self._has(i, key) for i in full) if full else self._known(key)
            if not present:
                break
            kv_hit = q + 1
        kv_hit = self._aligned(kv_hit)
        for p in range(kv_hit, -1, -self.page_size):
            if all(self._accepts(i, tokens, p, namespace) for i in range(len(self.groups))):
                return p, kv_hit
        raise AssertionError("p = 0 always qualifies")

    def _known(self, key: Key) -> bool:
        """Without FULL, the attention-only length is the token path the cache still tracks:
        a position is tracked while some data or lock sits at or below it on its path."""
        ns, prefix = key
        n = len(prefix)
        for live in (group for tier in self.tier_live for group in tier):
            for lns, lprefix in live:
                if lns == ns and len(lprefix) >= n and lprefix[:n] == prefix:
                    return True
        return any(
            lns == ns and len(lprefix) >= n and lprefix[:n] == prefix
            for (lns, lprefix), _ in self.locks.values()
        )

    # ------------------------------------------------------------------ locks
    def lock(self, tokens: Sequence[int], length: int, namespace: str | None = None) -> int:
        """Pin positions ``[0, length)`` of ``tokens``; returns a handle for unlock.

        ``length`` must be a positive page-aligned prefix length of ``tokens`` whose positions
        the cache still tracks (else CacheUsageError, nothing pinned)."""
        if length <= 0 or length % self.page_size or length > len(tokens):
            raise CacheUsageError(f"cannot lock prefix length {length}")
        if not self._known(self._key(namespace, tokens, length)):
            raise CacheUsageError(f"prefix length {length} is not cached")
        handle = self._next_lock
        self._next_lock += 1
        self.locks[handle] = (self._key(namespace, tokens, length), length)
        return handle

    def unlock(self, handle: int) -> None:
        del self.locks[handle]

    def _locked(self, key: Key) -> bool:
        ns, prefix = key
        return any(
            lns == ns and len(prefix) <= n and lprefix[: len(prefix)] == prefix
            for (lns, lprefix), n in self.locks.values()
        )

    # ------------------------------------------------------------------ drops
    def _drop(self, kind: str, keys: list[Key], tier: int = 0) -> None:
        live = self._tier(tier)
        indices = [i for i, g in enumerate(self.groups) if g.kind == kind]
        if not indices:
            raise CacheUsageError(f"no {kind} group")
        hit = [k for k in keys if any(k in live[i] for i in indices)]
        if any(self._locked(k) for k in hit):
            raise CacheUsageError("drop touches a locked position")
        for i in indices:
            live[i].difference_update(keys)

    def _check_aligned(self, *positions: int) -> None:
        if any(p < 0 or p % self.page_size for p in positions):
            raise CacheUsageError(f"positions {positions} are not page-aligned")

    def drop_recurrent(
        self, tokens: Sequence[int], at: int, namespace: str | None = None, tier: int = 0
    ) -> None:
        self._check_aligned(at)
        if at == 0 or at > len(tokens):
            raise CacheUsageError(f"no state can sit at {at} of {len(tokens)} tokens")
        self._drop("recurrent", [self._key(namespace, tokens, at)], tier)

    def drop_swa(
        self,
        tokens: Sequence[int],
        start: int,
        end: int,
        namespace: str | None = None,
        tier: int = 0,
    ) -> None:
        self._check_aligned(start, end)
        if end < start:
            raise CacheUsageError(f"range [{start}, {end}) is reversed")
        end = min(end, self._aligned(len(tokens)))
        self._drop("swa", [self._pos(namespace, tokens, q) for q in range(start, end)], tier)

    def drop_full(
        self, tokens: Sequence[int], start: int, namespace: str | None = None, tier: int = 0
    ) -> None:
        self._check_aligned(start)
        end = self._aligned(len(tokens))
        self._drop("full", [self._pos(namespace, tokens, q) for q in range(start, end)], tier)
