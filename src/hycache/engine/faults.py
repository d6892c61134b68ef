"""What an injected fault did: ``FaultLog.stored`` and ``.fired``.

``Engine(inject=...)`` breaks the hit path on purpose, but whether the fault ever reaches a
computation depends on the preset and the workload: ``late-snapshot`` and ``off-grid`` corrupt
only checkpoints the cache plans and keeps, ``stale-tail`` only a last page that the extra
token completes, ``unwritten-publish`` only published pages that another request reads while
their owner still decodes; and corrupted data matters only when a later hit reads it. A run
where that never happens proves nothing about the verifier, so the engine counts:

* ``stored``: each time the fault left wrong data where the cache will look for it (a state
  copied after it had moved past the position it is filed at, a KV page cached with an
  unwritten tail, a published page left unwritten);
* ``fired``: each request that read such data (a corrupted state slot resumed from, or a
  corrupted page read) before anything rewrote it. This is what a verifier can catch.

``wrong-accept-step`` corrupts the running request's own state (speculative decoding copies
back the wrong draft step): stored when it is copied back, fired when the request's next
forward computes on it.
"""

from __future__ import annotations

from collections.abc import Iterable

#: the faults ``Engine(inject=...)`` can inject (module docstring of ``hycache.engine.engine``;
#: ``wrong-accept-step``: ``hycache.engine.spec_decode``)
INJECTS = ("late-snapshot", "off-grid", "stale-tail", "unwritten-publish", "wrong-accept-step")


class FaultLog:
    """Which state slots and KV pages hold data an injected fault corrupted, and the counts.

    Reads are attributed to the request (its lease's id) until ``end_request``: requests run
    interleaved, so several may be reading at once."""

    def __init__(self) -> None:
        self.stored = 0
        self.fired = 0
        self._slots: set[int] = set()
        self._pages: dict[str, set[int]] = {}
        self._read_corrupted: set[int] = set()

    # ------------------------------------------------------------------ writes
    def slot_corrupted(self, slot: int) -> None:
        self._slots.add(slot)
        self.stored += 1

    def slot_written(self, slot: int) -> None:
        self._slots.discard(slot)

    def pages_corrupted(self, kind: str, ids: Iterable[int]) -> None:
        bad = self._pages.setdefault(kind, set())
        for page_id in ids:
            bad.add(page_id)
            self.stored += 1

    def pages_written(self, kind: str, ids: Iterable[int]) -> None:
        bad = self._pages.get(kind)
        if bad:
            bad.difference_update(ids)

    # ------------------------------------------------------------------ reads
    def slot_read(self, request: int, slot: int) -> None:
        if slot in self._slots:
            self._read_corrupted.add(request)

    def pages_read(self, request: int, kind: str, ids: Iterable[int]) -> None:
        bad = self._pages.get(kind)
        if bad and not bad.isdisjoint(ids):
            self._read_corrupted.add(request)

    def own_state_corrupted(self) -> None:
        """A running request's own state was overwritten with a wrong one (``wrong-accept-step``
        copied back the step after the accepted one)."""
        self.stored += 1

    def own_state_read(self, request: int) -> None:
        """The request computed on from its corrupted state (counted at ``end_request``)."""
        self._read_corrupted.add(request)

    def end_request(self, request: int) -> None:
        """The request's reads are over: it fired the fault if any read corrupted data."""
        if request in self._read_corrupted:
            self._read_corrupted.discard(request)
            self.fired += 1
