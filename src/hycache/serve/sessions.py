"""Sessions of a server: who is talking, and when a conversation has gone quiet.

A request names its session with the ``X-Session-Id`` header or the body's ``user`` field
(the header wins). The cache learns the session at admission (session-aware eviction protects
its entries while it is live: the ``session_aware`` knob of the sglang and hycache presets).
A session with no request in flight and none started for ``idle_s`` seconds is ended with
``cache.end_session``: its entries lose their protection. ``begin``/``end`` run on the
event loop, ``expire`` on the scheduler thread (it touches the cache); a lock keeps the
bookkeeping consistent between them.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from hycache.errors import ConfigError

#: the longest session id accepted (the cache keeps it per entry)
MAX_SESSION_ID = 256


@dataclass
class _Session:
    in_flight: int = 0
    last: float = 0.0


class SessionTracker:
    """Live sessions, their requests in flight and last activity."""

    def __init__(self, idle_s: float, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.idle_s = idle_s
        self.clock = clock
        self._lock = threading.Lock()
        self._sessions: dict[str, _Session] = {}
        self._next_scan = 0.0
        self.ended = 0

    @staticmethod
    def pick(header: str | None, user: str | None) -> str | None:
        """The session of a request: the header, else ``user``, else None. ConfigError when
        it is empty or too long."""
        session = header if header is not None else user
        if session is None:
            return None
        session = session.strip()
        if not session or len(session) > MAX_SESSION_ID:
            raise ConfigError(f"a session id must have 1 to {MAX_SESSION_ID} characters")
        return session

    def begin(self, session: str) -> None:
        with self._lock:
            entry = self._sessions.setdefault(session, _Session())
            entry.in_flight += 1
            entry.last = self.clock()

    def end(self, session: str) -> None:
        with self._lock:
            entry = self._sessions.get(session)
            if entry is not None:
                entry.in_flight = max(0, entry.in_flight - 1)
                entry.last = self.clock()

    def active(self) -> int:
        with self._lock:
            return len(self._sessions)

    def due(self) -> list[str]:
        """Sessions idle past the gap, forgotten here (at most one scan per tenth of the gap)."""
        now = self.clock()
        if now < self._next_scan:
            return []
        self._next_scan = now + self.idle_s / 10
        with self._lock:
            idle = [
                name
                for name, s in self._sessions.items()
                if s.in_flight == 0 and now - s.last >= self.idle_s
            ]
            for name in idle:
                del self._sessions[name]
        return idle

    def expire(self, end_session: Callable[[str], None]) -> int:
        """End every session idle past the gap through ``end_session``; how many."""
        idle = self.due()
        for name in idle:
            end_session(name)
        self.ended += len(idle)
        return len(idle)
