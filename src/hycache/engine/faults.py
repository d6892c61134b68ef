"""Counting injected faults: ``FaultCountingEngine.stored`` and ``.fired``.

``Engine(inject=...)`` (``hycache.engine.engine``) breaks the hit path on purpose, but whether
the fault ever reaches a computation depends on the preset and the workload: ``late-snapshot``
and ``off-grid`` corrupt only checkpoints the cache plans and keeps, ``stale-tail`` only a last
page that the extra token completes, and corrupted data matters only when a later hit reads
it. A run where that never happens proves nothing about the verifier, so ``hycache verify``
counts:

* ``stored``: each time the fault wrote wrong data where the cache will look for it: a state
  copied after it had moved past the position it is filed at (``late-snapshot``, ``off-grid``
  deferred by the engine, or filed below its position by a cache with ``offgrid="misplace"``),
  or a KV page cached with an unwritten tail (``stale-tail``: ``PageTensors.write_partial``,
  which only that fault calls);
* ``fired``: each request whose hit read such data (a corrupted state slot resumed from, or a
  corrupted page gathered) before anything rewrote it. This is what a verifier can catch.

The engine is observed from the outside (overrides of its checkpoint and transfer hooks, and
wrappers around the store's page reads and writes); what it computes is unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from hycache.engine.engine import Engine

if TYPE_CHECKING:
    from hycache.cache.facade import HybridPrefixCache
    from hycache.cache.lease import Lease
    from hycache.engine.checkpoints import _Deferred
    from hycache.engine.model import LoadedModel
    from hycache.engine.request import RequestResult
    from hycache.engine.store import PrefixTags


def _observe(obj: object, name: str, before: Callable[..., None]) -> None:
    """Call ``before(*args)`` ahead of every call of ``obj.name(*args)`` (this instance only)."""
    method = getattr(obj, name)

    def observed(*args: Any, **kwargs: Any) -> Any:
        before(*args, **kwargs)
        return method(*args, **kwargs)

    setattr(obj, name, observed)


class FaultCountingEngine(Engine):
    """An ``Engine`` that counts what its injected fault stored and how often hits read it."""

    def __init__(
        self,
        model: LoadedModel,
        cache: HybridPrefixCache,
        *,
        max_running: int = 1,
        inject: str | None = None,
        check_owners: bool = True,
        check_tree: bool = False,
    ) -> None:
        super().__init__(
            model,
            cache,
            max_running=max_running,
            inject=inject,
            check_owners=check_owners,
            check_tree=check_tree,
        )
        self.stored = 0
        self.fired = 0
        self._bad_slots: set[int] = set()
        self._bad_pages: dict[str, set[int]] = {kind: set() for kind in self.store.pages}
        self._last_slot: int | None = None
        self._flushing_at: int | None = None
        self._read_bad = False
        for kind, pages in self.store.pages.items():
            self._watch(pages, self._bad_pages[kind])

    # ------------------------------------------------------------------ pages (stale-tail)
    def _watch(self, pages: object, bad: set[int]) -> None:
        """Track which of ``pages``' ids hold a stale tail (``bad``) and flag reads of them."""
        _observe(pages, "write", lambda ids, *_: bad.difference_update(ids))
        _observe(pages, "write_partial", lambda page_id, *_: self._stale(bad, page_id))
        _observe(pages, "read", lambda ids: self._reading(bad, ids))

    def _stale(self, bad: set[int], page_id: int) -> None:
        bad.add(page_id)
        self.stored += 1

    def _reading(self, bad: set[int], ids: Sequence[int]) -> None:
        if not bad.isdisjoint(ids):
            self._read_bad = True

    # ------------------------------------------------------------------ hits
    def _restore(
        self, lease: Lease, dc: Any, tags: PrefixTags, violations: list[str]
    ) -> dict[str, int]:
        self._read_bad = lease.hit > 0 and lease.source_state in self._bad_slots
        try:
            return super()._restore(lease, dc, tags, violations)
        finally:
            self.fired += self._read_bad
            self._read_bad = False

    # ------------------------------------------------------------------ states
    def _write_state(self, dc: Any, slot: int, tag: bytes) -> None:
        super()._write_state(dc, slot, tag)
        self._bad_slots.discard(slot)
        self._last_slot = slot

    def _flush(
        self,
        lease: Lease,
        dc: Any,
        tags: PrefixTags,
        deferred: list[_Deferred],
        pos: int,
        result: RequestResult,
        *,
        after_forward: bool,
        force: bool = False,
    ) -> None:
        """Deferred checkpoints are recorded from here, with the state at ``pos``."""
        self._flushing_at = pos
        try:
            super()._flush(
                lease, dc, tags, deferred, pos, result, after_forward=after_forward, force=force
            )
        finally:
            self._flushing_at = None

    def _record(
        self,
        lease: Lease,
        dc: Any,
        tags: PrefixTags,
        position: int,
        reason: str,
        result: RequestResult,
    ) -> None:
        copied = len(result.checkpoints)
        misplaced = self.cache.counters.offgrid_misplaced
        self._last_slot = None
        super()._record(lease, dc, tags, position, reason, result)
        if len(result.checkpoints) == copied or self._last_slot is None:
            return  # the cache kept no state here
        late = self._flushing_at is not None and self._flushing_at != position
        if late or self.cache.counters.offgrid_misplaced > misplaced:
            self._bad_slots.add(self._last_slot)
            self.stored += 1
