"""Planned checkpoints and the faults injected into them (a mixin of ``Engine``).

Contract: ``_checkpoint`` is called right after the forward that brought the state to a planned
position and before anything extends it; it asks ``record_checkpoint`` for a slot and copies
the state into it. With ``late-snapshot`` or ``off-grid`` (unless the cache itself misplaces)
the copy is deferred (``_Deferred``) and ``_flush`` makes it later, published at the planned
position. Needs ``cache``, ``store``, ``inject`` and ``page_size`` set by ``Engine.__init__``;
the state copy itself is ``StoreTransferMixin._write_state``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hycache.engine.transfer import StoreTransferMixin

if TYPE_CHECKING:
    from hycache.cache.lease import Lease
    from hycache.engine.request import RequestResult
    from hycache.engine.store import PrefixTags


@dataclass
class _Deferred:
    """A checkpoint the injected bugs copy later than they should."""

    position: int
    reason: str
    due: int  # copy once this many tokens have been consumed (-1: after the next forward)


class CheckpointMixin(StoreTransferMixin):
    """Copying the state into checkpoint slots, on time or (injected faults) late."""

    inject: str | None

    def _cache_misplaces(self) -> bool:
        return self.cache.checkpoint_policy.offgrid == "misplace"

    # ------------------------------------------------------------------ checkpoints
    def _checkpoint(
        self,
        lease: Lease,
        dc: Any,
        tags: PrefixTags,
        position: int,
        reason: str,
        deferred: list[_Deferred],
        result: RequestResult,
    ) -> None:
        """The state is at ``position`` now: copy it before anything extends it."""
        if self.store.slots is None:
            return
        if self.inject == "late-snapshot":
            deferred.append(_Deferred(position, reason, -1))
            return
        if self.inject == "off-grid" and not self._cache_misplaces():
            deferred.append(_Deferred(position, reason, position + max(1, self.page_size // 2)))
            return
        self._record(lease, dc, tags, position, reason, result)

    def _record(
        self,
        lease: Lease,
        dc: Any,
        tags: PrefixTags,
        position: int,
        reason: str,
        result: RequestResult,
    ) -> None:
        """Copy the current state into a slot for ``position`` (which is where the engine
        believes it is; the injected faults call this when the state has moved on)."""
        slot = self.cache.record_checkpoint(lease, position, reason)
        if slot is not None:
            self._write_state(dc, slot, tags.tag(position))
            result.checkpoints.append(position)

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
        """Copy the deferred (faulty) checkpoints that are due."""
        for d in list(deferred):
            due = force or (d.due == -1 and after_forward) or (d.due != -1 and pos >= d.due)
            if due:
                deferred.remove(d)
                self._record(lease, dc, tags, d.position, d.reason, result)
