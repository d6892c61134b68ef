"""Ending idle sessions in a replay: ``SessionClock`` calls ``end_session`` after an idle gap.

A trace names each request's session but never says when a session is over. The replay ends a
session once nothing of it is waiting or running and its last request finished more than
``idle_s`` seconds ago (trace time); a later request of the same session opens it again
(``HybridPrefixCache.admit`` marks its session live).

What SGLang does (``python/sglang/srt/managers/session_controller.py``): a session lives until
the client closes it, or, when it was opened with a ``timeout`` (``OpenSessionReqInput.timeout``,
default None: no timeout), until the scheduler's reaper (``SessionController.maybe_reap``, run
at most once a second) finds ``now - last_active_time > timeout``; ``last_active_time`` is set
when a request of the session arrives, and closing a streaming session whose request is still
running waits for that request to finish. ``DEFAULT_IDLE_S`` is therefore None, SGLang's
default: sessions never time out. The clock here measures the gap from the last *finish*
(a session with a request in flight never ends), which is never earlier than SGLang's, and it
checks at every replay event instead of once a second.
"""

from __future__ import annotations

import heapq
from typing import Protocol

from hycache.errors import ConfigError

#: SGLang's default session timeout (``OpenSessionReqInput.timeout``): none.
DEFAULT_IDLE_S: float | None = None


class SessionSink(Protocol):
    """What the clock ends sessions on (``HybridPrefixCache``, the reference ``Engine``)."""

    def end_session(self, session: str) -> None: ...


class SessionClock:
    """Tracks, per session, the requests in flight and the last finish; ``advance(now)`` ends
    every session idle for more than ``idle_s``. ``idle_s=None``: never ends a session.

    Contract: call ``begin`` when a request of a session arrives (it waits or runs from then
    on), ``end`` when it finished, and ``advance`` as time goes on; a time earlier than one
    already seen counts as that one (a trace whose arrivals are out of order)."""

    def __init__(self, sink: SessionSink, idle_s: float | None = DEFAULT_IDLE_S) -> None:
        if idle_s is not None and not idle_s >= 0:
            raise ConfigError(f"session_idle_s must be >= 0 or None, got {idle_s!r}")
        self.sink = sink
        self.idle_s = idle_s
        self.ended = 0  # end_session calls made
        self._busy: dict[str, int] = {}  # requests waiting or running, per session
        self._last: dict[str, float] = {}  # last finish of an idle, still open session
        self._due: list[tuple[float, str]] = []  # (deadline, session); stale ones skipped
        self._now = float("-inf")

    def begin(self, session: str | None, now: float) -> None:
        """A request of ``session`` arrived at ``now``."""
        if session is None:
            return
        now = self._tick(now)
        self._busy[session] = self._busy.get(session, 0) + 1
        self._last.pop(session, None)

    def end(self, session: str | None, now: float) -> None:
        """A request of ``session`` finished (or was served and dropped) at ``now``."""
        if session is None:
            return
        now = self._tick(now)
        left = self._busy.get(session, 0) - 1
        if left < 0:
            raise ConfigError(f"session {session!r}: a request ended that never began")
        if left:
            self._busy[session] = left
            return
        del self._busy[session]
        self._last[session] = now
        if self.idle_s is not None:
            heapq.heappush(self._due, (now + self.idle_s, session))

    def advance(self, now: float) -> None:
        """End every session whose idle gap exceeds ``idle_s`` by ``now``."""
        now = self._tick(now)
        due = self._due
        while due and due[0][0] < now:
            deadline, session = heapq.heappop(due)
            last = self._last.get(session)
            if last is None or last + (self.idle_s or 0.0) != deadline:
                continue  # busy again, or idle since a later finish (a later deadline)
            del self._last[session]
            self.ended += 1
            self.sink.end_session(session)

    def open_sessions(self) -> set[str]:
        """Sessions not ended: with a request in flight, or idle for at most ``idle_s``."""
        return set(self._busy) | set(self._last)

    def _tick(self, now: float) -> float:
        self._now = max(self._now, now)
        return self._now
