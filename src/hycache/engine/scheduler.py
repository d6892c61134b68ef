"""``Scheduler``: the engine's interleaved schedule over a request source, one step at a time.

One ``step()`` admits what fits (up to ``max_running`` in flight; a request the cache answers
with ``Wait`` waits at the head of the line, and once nothing else runs it is admitted with
``idle=True``, which may clear the cache) and then advances every running request by one
prefill chunk or one decode token. ``Engine.run`` steps until the source is exhausted; the
online loop (``hycache.engine.online``) steps forever and calls ``abort`` for requests whose
client went away. The scheduler never touches tensors: it drives the runner's per-request
generators and tells the source when each request ends. It works against the small
``Runner`` protocol, not the engine class (no import cycle).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Generator
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Protocol

from hycache.cache.lease import Lease, Wait
from hycache.engine.request import EngineRequest, RequestResult, RequestSource

if TYPE_CHECKING:
    from hycache.cache.facade import HybridPrefixCache


class Step(Enum):
    """What a ``Scheduler.step`` found: work was done (BUSY), nothing is running and the source
    has nothing ready yet (IDLE), or the source is exhausted and nothing is left (DONE)."""

    BUSY = "busy"
    IDLE = "idle"
    DONE = "done"


class Runner(Protocol):
    """What the scheduler needs of the engine."""

    max_running: int
    cache: HybridPrefixCache

    def admit_request(
        self, request: EngineRequest, *, idle: bool
    ) -> Lease | Wait | RequestResult: ...

    def process(
        self, request: EngineRequest, lease: Lease, result: RequestResult
    ) -> Generator[None, None, None]: ...

    def request_ended(self, result: RequestResult) -> None: ...


@dataclass(eq=False)
class Flight:
    """A request in flight: its result so far, its step generator and its lease. Compared by
    identity."""

    result: RequestResult
    steps: Generator[None, None, None]
    lease: Lease


class Scheduler:
    """Interleaves the requests of ``source`` on ``runner``. ``results`` collects every ended
    request in end order unless ``keep_results`` is False (a long-running server)."""

    def __init__(self, runner: Runner, source: RequestSource, *, keep_results: bool = True) -> None:
        self.runner = runner
        self.source = source
        self.keep_results = keep_results
        self.running: list[Flight] = []
        self.waiting: deque[EngineRequest] = deque()
        self.results: list[RequestResult] = []
        self._waits: dict[int, int] = {}

    def step(self) -> Step:
        """Admit what fits, then advance every running request once."""
        running = self.running
        while len(running) < self.runner.max_running:
            request = self.waiting[0] if self.waiting else self.source.next_ready()
            if request is None:
                break
            outcome = self.runner.admit_request(request, idle=not running)
            if isinstance(outcome, Wait):
                self._waits[id(request)] = self._waits.get(id(request), 0) + 1
                if not self.waiting:
                    self.waiting.append(request)
                break
            if self.waiting and self.waiting[0] is request:
                self.waiting.popleft()
            if isinstance(outcome, RequestResult):  # failed cleanly
                outcome.waits = self._waits.pop(id(request), 0)
                self._ended(outcome, finished=False)
                continue
            result = RequestResult(request, "running", outcome.hit, outcome.kv_hit)
            result.waits = self._waits.pop(id(request), 0)
            steps = self.runner.process(request, outcome, result)
            running.append(Flight(result, steps, outcome))
        if not running:
            if self.waiting:
                return Step.BUSY  # idle now: the next admit runs with idle=True
            return Step.DONE if self.source.exhausted else Step.IDLE
        for flight in list(running):
            try:
                next(flight.steps)
            except StopIteration:
                running.remove(flight)
                self._ended(flight.result, finished=True)
        return Step.BUSY

    def abort(self, rid: str) -> RequestResult | None:
        """Stop request ``rid`` (running or waiting for memory): its lease is aborted (nothing
        of it is cached, everything it held is released) and the source is told. None when no
        such request is here."""
        for flight in self.running:
            if flight.result.request.rid == rid:
                self.running.remove(flight)
                self._close(flight)
                flight.result.status = "aborted"
                flight.result.finish_reason = "abort"
                self._ended(flight.result, finished=True)
                return flight.result
        if self.waiting and self.waiting[0].rid == rid:
            request = self.waiting.popleft()
            result = RequestResult(request, "aborted", finish_reason="abort")
            result.waits = self._waits.pop(id(request), 0)
            self._ended(result, finished=False)
            return result
        return None

    def close(self) -> list[RequestResult]:
        """Abort everything in flight without telling the source (an error stopped the run);
        returns the results of the requests aborted."""
        aborted = []
        while self.running:
            flight = self.running.pop()
            self._close(flight)
            flight.result.status = "aborted"
            flight.result.finish_reason = "abort"
            aborted.append(flight.result)
        return aborted

    @property
    def in_flight(self) -> int:
        return len(self.running)

    def _close(self, flight: Flight) -> None:
        flight.steps.close()
        if flight.lease.active:  # closed before its first step: the generator never ran
            self.runner.cache.abort(flight.lease)

    def _ended(self, result: RequestResult, *, finished: bool) -> None:
        if finished:
            self.runner.request_ended(result)
        if self.keep_results:
            self.results.append(result)
        self.source.done(result)
