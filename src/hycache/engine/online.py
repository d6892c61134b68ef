"""``OnlineEngine``: the engine as a long-running service fed by other threads.

One scheduler thread owns the engine and its cache: it steps a ``Scheduler`` over a
thread-safe queue (``submit``), streams every token to the request's ``Listener`` as the
engine picks it, and between steps runs what other threads asked of it (``call``: read the
stats, check integrity, end a session) and the aborts they filed (``abort``: a client went
away; the lease is aborted, the memory it held released, then the cache's integrity is
checked). Nothing but this thread touches the cache, so the cache needs no lock.

Bounds: at most ``max_queue`` requests wait to be admitted; ``submit`` beyond that raises
``Overloaded`` (a server answers 429 with Retry-After) instead of growing without bound.
``shutdown(drain=True)`` stops admitting (``Draining``), lets every queued and running request
finish, then stops the thread. An error escaping a step fails the requests in flight (their
leases are aborted) and the loop goes on serving.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from typing import TYPE_CHECKING, Protocol, TypeVar

from hycache.engine.request import EngineRequest, RequestResult
from hycache.engine.scheduler import Scheduler, Step
from hycache.errors import CapacityError, ConfigError, HycacheError

if TYPE_CHECKING:
    from hycache.engine.engine import Engine

T = TypeVar("T")
log = logging.getLogger("hycache.engine.online")


class Overloaded(CapacityError):
    """The admission queue is full; retry after ``retry_after`` seconds."""

    def __init__(self, message: str, *, retry_after: float) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class Draining(HycacheError):
    """The engine is shutting down and admits no new request."""


class Listener(Protocol):
    """Told about one request, on the scheduler thread (keep both calls short)."""

    def on_token(self, result: RequestResult, token: int) -> bool:
        """A token was generated (``result.output`` ends with it); True ends the request."""

    def on_end(self, result: RequestResult) -> None:
        """The request ended: done, failed, or aborted."""


class _Feed:
    """The ``RequestSource`` the scheduler pulls from: the queue ``submit`` fills."""

    def __init__(self, owner: OnlineEngine) -> None:
        self.owner = owner

    def next_ready(self) -> EngineRequest | None:
        return self.owner._pop()

    def done(self, result: RequestResult) -> None:
        self.owner._ended(result)

    @property
    def exhausted(self) -> bool:
        return self.owner._exhausted()


class OnlineEngine:
    """Runs ``engine`` on its own thread for as long as the service lives."""

    def __init__(
        self,
        engine: Engine,
        *,
        max_queue: int = 64,
        retry_after: float = 1.0,
        idle_wait: float = 0.05,
        on_round: Callable[[], None] | None = None,
    ) -> None:
        if max_queue < 1:
            raise ConfigError(f"max_queue must be >= 1, got {max_queue}")
        if engine.on_token is not None:
            raise ConfigError("the engine already has an on_token callback")
        self.engine = engine
        self.max_queue = max_queue
        self.retry_after = retry_after
        self.idle_wait = idle_wait
        self.on_round = on_round
        self._cond = threading.Condition()
        self._queue: deque[tuple[EngineRequest, Listener]] = deque()
        self._listeners: dict[str, Listener] = {}
        self._aborts: set[str] = set()
        self._calls: deque[tuple[Callable[[Engine], object], Future[object]]] = deque()
        self._closing = False
        self._stopped = False
        self._scheduler = Scheduler(engine, _Feed(self), keep_results=False)
        self._thread = threading.Thread(target=self._loop, name="hycache-scheduler", daemon=True)
        self.errors = 0
        engine.on_token = self._token

    # ------------------------------------------------------------------ other threads
    def start(self) -> None:
        self._thread.start()

    def submit(self, request: EngineRequest, listener: Listener) -> None:
        """Queue ``request`` (its ``rid`` must be unique among requests not yet ended).
        ``Overloaded`` when the queue is full, ``Draining`` after ``shutdown``, ConfigError
        when the request cannot run on the model (checked here, not on the scheduler thread)."""
        self.engine.check_request(request)
        with self._cond:
            if self._closing:
                raise Draining("the server is shutting down")
            if len(self._queue) >= self.max_queue:
                raise Overloaded(
                    f"{len(self._queue)} requests are waiting (the bound is {self.max_queue})",
                    retry_after=self.retry_after,
                )
            if request.rid in self._listeners or any(r.rid == request.rid for r, _ in self._queue):
                raise ConfigError(f"request id {request.rid!r} is already in flight")
            self._queue.append((request, listener))
            self._cond.notify_all()

    def abort(self, rid: str) -> None:
        """Abort request ``rid`` at the next step (no-op once it has ended)."""
        with self._cond:
            self._aborts.add(rid)
            self._cond.notify_all()

    def call(self, fn: Callable[[Engine], T], timeout: float = 30.0) -> T:
        """Run ``fn(engine)`` on the scheduler thread between two steps; its result (or its
        exception). After the loop has stopped, runs ``fn`` on the calling thread."""
        future: Future[object] = Future()
        with self._cond:
            if self._stopped:
                return fn(self.engine)
            self._calls.append((fn, future))
            self._cond.notify_all()
        value: T = future.result(timeout)  # type: ignore[assignment]
        return value

    def shutdown(self, *, drain: bool = True, timeout: float = 60.0) -> bool:
        """Stop admitting; with ``drain`` let queued and running requests finish, else abort
        them. Returns whether the thread stopped within ``timeout``."""
        with self._cond:
            self._closing = True
            if not drain:
                self._aborts.update(r.rid for r, _ in self._queue)
                self._aborts.update(self._listeners)
            self._cond.notify_all()
        if self._thread.is_alive():
            self._thread.join(timeout)
        return not self._thread.is_alive()

    @property
    def queued(self) -> int:
        """Requests submitted and not yet pulled by the scheduler."""
        return len(self._queue)

    @property
    def draining(self) -> bool:
        return self._closing

    # ------------------------------------------------------------------ scheduler thread
    def running(self) -> int:
        """Requests admitted and not ended (scheduler thread, or through ``call``)."""
        return self._scheduler.in_flight

    def waiting(self) -> int:
        """Requests pulled but waiting for memory (scheduler thread, or through ``call``)."""
        return len(self._scheduler.waiting)

    def _loop(self) -> None:
        try:
            while True:
                try:
                    self._service()
                    step = self._scheduler.step()
                except Exception as exc:  # a bug or a broken invariant: fail what is in flight
                    self._fail_in_flight(exc)
                    continue
                if step is Step.DONE:
                    break
                if step is Step.IDLE:
                    with self._cond:
                        if not (self._queue or self._calls or self._aborts or self._closing):
                            self._cond.wait(self.idle_wait)
        finally:
            with self._cond:
                self._stopped = True
                calls = list(self._calls)
                self._calls.clear()
            for fn, future in calls:
                self._run_call(fn, future)

    def _service(self) -> None:
        with self._cond:
            calls = list(self._calls)
            self._calls.clear()
            aborts = set(self._aborts)
            self._aborts.clear()
            queued = [(r, lis) for r, lis in self._queue if r.rid in aborts]
            for entry in queued:
                self._queue.remove(entry)
        for request, listener in queued:
            listener.on_end(RequestResult(request, "aborted", finish_reason="abort"))
        aborted = False
        for rid in aborts:
            aborted |= self._scheduler.abort(rid) is not None
        if aborted:
            self.engine.cache.check_integrity()
        for fn, future in calls:
            self._run_call(fn, future)
        if self.on_round is not None:
            self.on_round()

    def _run_call(self, fn: Callable[[Engine], object], future: Future[object]) -> None:
        try:
            future.set_result(fn(self.engine))
        except BaseException as exc:
            future.set_exception(exc)

    def _fail_in_flight(self, exc: Exception) -> None:
        self.errors += 1
        log.exception("engine step failed; failing the requests in flight")
        failed = self._scheduler.close()
        while self._scheduler.waiting:
            request = self._scheduler.waiting.popleft()
            failed.append(RequestResult(request, "failed"))
        for result in failed:
            result.status = "failed"
            result.error = f"internal error: {type(exc).__name__}: {exc}"
            self._ended(result)

    def _token(self, result: RequestResult, token: int) -> bool:
        listener = self._listeners.get(result.request.rid)
        return listener is not None and listener.on_token(result, token)

    def _pop(self) -> EngineRequest | None:
        with self._cond:
            if not self._queue:
                return None
            request, listener = self._queue.popleft()
            self._listeners[request.rid] = listener
            return request

    def _ended(self, result: RequestResult) -> None:
        with self._cond:
            listener = self._listeners.pop(result.request.rid, None)
        if listener is not None:
            listener.on_end(result)

    def _exhausted(self) -> bool:
        with self._cond:
            return self._closing and not self._queue
