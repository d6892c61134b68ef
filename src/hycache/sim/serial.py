"""Serial replay (Marconi's simulator semantics), resumable: :class:`SerialReplay`.

Each request looks up, then its input and output are inserted at once; logical time; TTFT =
the prefill time of the non-reused tokens alone. No prefill runs, so cutting one costs
nothing: states are planned at their exact positions, not on the recurrent kernel's grid
(``admit(kernel_grid=False)``).

A :class:`SerialReplay` is fed requests in one or more calls and gives its result whenever
asked: feeding a trace's first ``n`` requests and then the rest ends where feeding the whole
trace at once does (same cache, same counters, same timeline). The simulator uses that to
carry a bootstrap's winning replay of a trace's head on to its end instead of replaying the
head again (``hycache.sim.simulate``). :func:`replay_serial` feeds everything once.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from hycache.cache.facade import HybridPrefixCache
from hycache.cache.lease import Wait
from hycache.errors import CapacityError, IntegrityError
from hycache.sim.cost import CostModel
from hycache.sim.metrics import PolicyResult, Recorder
from hycache.sim.outcome import account_prefill, policy_result, reject_uncached, sample_usage
from hycache.sim.prefetch import Prefetch
from hycache.sim.request import Request
from hycache.sim.sessions import DEFAULT_IDLE_S, SessionClock

Tick = Callable[[], None]


class SerialReplay:
    """One serial replay through ``cache``, fed in order by :meth:`feed`.

    ``reject_oversized``: a request larger than the whole cache is served uncached and counted
    (else its CapacityError propagates). ``session_idle_s``: see ``hycache.sim.sessions``.
    With tiers, ``prefetch`` says what storage delivers (None: all of it, as it is loaded).
    ``timeline_every``: keep a timeline point every that many requests.
    """

    def __init__(
        self,
        cache: HybridPrefixCache,
        cost: CostModel,
        *,
        reject_oversized: bool = False,
        session_idle_s: float | None = DEFAULT_IDLE_S,
        prefetch: Prefetch | None = None,
        timeline_every: int = 1,
    ) -> None:
        self.cache = cache
        self.cost = cost
        self.reject_oversized = reject_oversized
        self.session_idle_s = session_idle_s
        self.prefetch = prefetch
        self.timeline_every = timeline_every
        self._rec = Recorder()
        self._sessions = SessionClock(cache, session_idle_s)
        self._served = 0
        self._busy_s = 0.0

    @property
    def served(self) -> int:
        """Requests fed so far."""
        return self._served

    @property
    def rejected(self) -> int:
        """Requests served uncached so far because the whole cache could not hold them."""
        return self._rec.rejected

    def feed(self, requests: Iterable[Request], tick: Tick | None = None) -> SerialReplay:
        """Replay ``requests`` after those fed before; ``tick`` is called after each."""
        start = time.perf_counter()
        try:
            for request in requests:
                self._one(request)
                if tick is not None:
                    tick()
        finally:
            self._busy_s += time.perf_counter() - start
        return self

    def result(self, knobs: dict[str, object] | None = None) -> PolicyResult:
        """The result of everything fed so far; ``wall_s`` is the time spent feeding."""
        return policy_result(self.cache, self._rec, "serial", self._busy_s, knobs or {})

    def _one(self, request: Request) -> None:
        cache, rec, sessions, cost = self.cache, self._rec, self._sessions, self.cost
        index = self._served
        self._served += 1
        now = request.arrival_s
        sessions.advance(now)
        sessions.begin(request.session, now)
        prefetch = self.prefetch
        try:
            lease = cache.admit(
                request.prompt,
                max_new_tokens=request.output_len,
                namespace=request.namespace,
                session=request.session,
                kernel_grid=False,  # nothing is prefilled: a state may sit anywhere
                slow_tier_tokens=None if prefetch is None else prefetch.slow_limit(0.0),
            )
        except CapacityError:
            if not self.reject_oversized:
                raise
            reject_uncached(cache, rec, request)
            rec.ttft_s.append(cost.prefill_time(0, request.prompt_len))
            sessions.end(request.session, now)
            return
        if isinstance(lease, Wait):
            raise IntegrityError("serial replay holds nothing in flight")
        cache.record_planned(lease, up_to=request.prompt_len)
        if request.output_len:
            cache.extend(lease, request.output)
            cache.record_planned(lease)
        cache.finish(lease)
        sessions.end(request.session, now)
        account_prefill(cost, rec, lease)
        ttft = cost.prefill_time(lease.hit, lease.prompt_len - lease.hit)
        if prefetch is not None:
            ttft += prefetch.ttft_s(cost, lease, ttft, 0.0)
        elif lease.loaded_bytes_by_tier:
            ttft += cost.exposed_load(cost.load_time(lease.loaded_bytes_by_tier), ttft)
        rec.ttft_s.append(ttft)
        sample_usage(cache, rec, float(index), index % self.timeline_every == 0)


def replay_serial(
    cache: HybridPrefixCache,
    requests: Iterable[Request],
    cost: CostModel,
    *,
    knobs: dict[str, object] | None = None,
    tick: Tick | None = None,
    timeline_every: int = 1,
    reject_oversized: bool = False,
    session_idle_s: float | None = DEFAULT_IDLE_S,
    prefetch: Prefetch | None = None,
) -> PolicyResult:
    """Replay ``requests`` from the start through ``cache`` (see :class:`SerialReplay`)."""
    replay = SerialReplay(
        cache,
        cost,
        reject_oversized=reject_oversized,
        session_idle_s=session_idle_s,
        prefetch=prefetch,
        timeline_every=timeline_every,
    )
    return replay.feed(requests, tick).result(knobs)
