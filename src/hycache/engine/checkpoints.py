"""``Checkpointer``: planned checkpoints and the faults injected into them.

Contract: ``checkpoint`` is called right after the forward that brought the state to a planned
position and before anything extends it; it asks ``record_checkpoint`` for a slot and copies
the state into it. With ``late-snapshot`` or ``off-grid`` (unless the cache itself misplaces)
the copy is deferred (``Deferred``) and ``flush`` makes it later, filed at the planned
position; the fault log learns of every state so filed in the wrong place.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hycache.cache.facade import HybridPrefixCache
    from hycache.cache.lease import Lease
    from hycache.engine.faults import FaultLog
    from hycache.engine.request import RequestResult
    from hycache.engine.store import PrefixTags
    from hycache.engine.transfer import Transfer


@dataclass
class Deferred:
    """A checkpoint the injected bugs copy later than they should."""

    position: int
    reason: str
    due: int  # copy once this many tokens have been consumed (-1: after the next forward)


class Checkpointer:
    """Copying the state into checkpoint slots, on time or (injected faults) late."""

    def __init__(
        self,
        cache: HybridPrefixCache,
        transfer: Transfer,
        faults: FaultLog,
        *,
        inject: str | None,
    ) -> None:
        self.cache = cache
        self.transfer = transfer
        self.faults = faults
        self.inject = inject
        self.page_size = cache.page_size

    def cache_misplaces(self) -> bool:
        """Whether the cache itself files off-grid states below their position (#54076)."""
        return self.cache.checkpoint_policy.offgrid == "misplace"

    def checkpoint(
        self,
        lease: Lease,
        dc: Any,
        tags: PrefixTags,
        position: int,
        reason: str,
        deferred: list[Deferred],
        result: RequestResult,
    ) -> None:
        """The state is at ``position`` now: copy it before anything extends it."""
        if self.transfer.store.slots is None:
            return
        if self.inject == "late-snapshot":
            deferred.append(Deferred(position, reason, -1))
            return
        if self.inject == "off-grid" and not self.cache_misplaces():
            deferred.append(Deferred(position, reason, position + max(1, self.page_size // 2)))
            return
        self.record(lease, dc, tags, position, reason, result, late=False)

    def record(
        self,
        lease: Lease,
        dc: Any,
        tags: PrefixTags,
        position: int,
        reason: str,
        result: RequestResult,
        *,
        late: bool,
    ) -> None:
        """Copy the current state into a slot for ``position`` (which is where the engine
        believes it is; ``late``: the state has moved on, an injected fault)."""
        slot = self.cache.record_checkpoint(lease, position, reason)
        if slot is None:
            if not late and self.transfer.tiers is not None:
                # the device keeps no state here; the tiers may
                self.transfer.write_state(dc, None, tags, position)
            return
        self.transfer.write_state(dc, slot, tags, position, exact=not late)
        result.checkpoints.append(position)
        policy = self.cache.checkpoint_policy
        grid = policy.state_grid or self.page_size
        if late or (self.cache_misplaces() and position % grid):
            self.faults.slot_corrupted(slot)

    def flush(
        self,
        lease: Lease,
        dc: Any,
        tags: PrefixTags,
        deferred: list[Deferred],
        pos: int,
        result: RequestResult,
        *,
        after_forward: bool,
        force: bool = False,
    ) -> None:
        """Copy the deferred (faulty) checkpoints that are due, with the state at ``pos``."""
        for d in list(deferred):
            due = force or (d.due == -1 and after_forward) or (d.due != -1 and pos >= d.due)
            if due:
                deferred.remove(d)
                self.record(lease, dc, tags, d.position, d.reason, result, late=pos != d.position)
