"""Replaying requests through a ``HybridPrefixCache`` in ``engine`` mode, resumable:
:class:`EngineReplay` (``serial`` mode: ``hycache.sim.serial``; what both share:
``hycache.sim.outcome``).

``engine``: a discrete-event model of one serving instance. Requests arrive at their trace
times and wait in FIFO order; a step admits what memory allows, decodes one token for every
decoding request and fills the rest of the token budget with prefill chunks, each cut at the
chunk ends the cache planned (a state is copied there before the next chunk runs; one planned
inside a piece, on the recurrent kernel's grid from the piece's start, is copied out of the
kernel's intermediate states, any other stops the piece there; a ``room`` state, taken only
because it displaced nothing, is dropped instead of costing a forward pass). A piece the step
budget cuts short of its planned chunk end is floored onto its chunk's kernel grid while a
planned state lies ahead in that chunk, so the next piece passes it on the grid. When a
request's prefill ends its prompt and prefill states join the cache (``publish``). Requests in
flight hold their locks and memory; a request that does not fit waits; one no cache of this
size could hold runs alone and uncached once the batch has drained. A step lasts
``CostModel.step_time``; while only decodes run, steps are advanced in bulk up to the next
event (an arrival, a finish or a planned checkpoint). With tiers below the device, a
request's loads add to its TTFT what its prefill does not hide (``CostModel.exposed_load``,
``hycache.sim.prefetch``), after the loads admitted before it: the load link is one resource.

Both modes end a session once it has been idle (nothing waiting or running, its last request
finished) for more than ``session_idle_s`` seconds of trace time (``hycache.sim.sessions``;
serial mode: a request finishes at its arrival), so session-aware eviction stops protecting
it; None (SGLang's default) never ends one.
"""

from __future__ import annotations

import bisect
import time
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from hycache.cache.facade import HybridPrefixCache
from hycache.cache.lease import Lease, Wait
from hycache.errors import CapacityError, IntegrityError
from hycache.policy.checkpoint.base import ROOM
from hycache.policy.checkpoint.chunks import chunk_start_of, in_kernel
from hycache.sim.cost import CostModel
from hycache.sim.metrics import PolicyResult, Recorder
from hycache.sim.outcome import Tick, account_prefill, policy_result, reject_uncached, sample_usage
from hycache.sim.prefetch import Prefetch
from hycache.sim.request import Request
from hycache.sim.sessions import DEFAULT_IDLE_S, SessionClock


def _serve_alone(
    cache: HybridPrefixCache, rec: Recorder, request: Request, cost: CostModel, now: float
) -> float:
    """Engine mode: a request larger than the whole cache runs uncached and alone (it needs
    every byte of the instance), prefill in token-budget chunks then its decode steps.
    Returns the time it finishes; its TTFT counts the wait for the batch to drain."""
    reject_uncached(cache, rec, request)
    budget = cache.config.token_budget or 8192
    done = 0
    while done < request.prompt_len:
        chunk = min(budget, request.prompt_len - done)
        now += cost.step_time([(done, chunk)], [])
        done += chunk
    rec.ttft_s.append(now - request.arrival_s)
    if request.output_len > 1:
        middle = request.prompt_len + request.output_len // 2
        now += (request.output_len - 1) * cost.decode_time([middle])
    return now


#: ``_Flight.due_at`` once every planned checkpoint is recorded
NEVER = 1 << 60


@dataclass(slots=True, eq=False)
class _Flight:
    """A request in the engine loop; compared by identity (``running.remove`` finds it by
    that, not by comparing every field)."""

    request: Request
    lease: Lease
    position: int  # tokens with KV so far (prompt prefix, then prompt + generated)
    checkpoints: list[int]
    reasons: dict[int, str]
    chunk_ends: list[int]
    generated: int = 0
    done_prefill: bool = False
    next_checkpoint: int = 0
    pieces: list[tuple[int, int]] = field(default_factory=list)
    load_s: float = 0.0  # host -> device load-back before its prefill (host tier)
    #: the next planned checkpoint's position (``NEVER``: none left): the step loop calls
    #: ``record_due`` only once ``position`` reaches it
    due_at: int = 0

    def record_due(self, cache: HybridPrefixCache) -> None:
        """Copy states at every planned checkpoint the request has reached (the chunk just run
        ended there, or passed it on the kernel grid: see ``piece_end``)."""
        checkpoints = self.checkpoints
        while (
            self.next_checkpoint < len(checkpoints)
            and checkpoints[self.next_checkpoint] <= self.position
        ):
            point = checkpoints[self.next_checkpoint]
            cache.record_checkpoint(self.lease, point, self.reasons[point])
            self.next_checkpoint += 1
        following = self.next_checkpoint
        self.due_at = checkpoints[following] if following < len(checkpoints) else NEVER

    def piece_end(self, target: int, kernel_chunk: int | None) -> int:
        """Where this step's prefill piece, planned to run to ``target``, must stop: at the
        first planned checkpoint inside it that is not on the kernel grid of the piece (a
        multiple of ``kernel_chunk`` from its start; those are copied out of the kernel).
        A ``room`` checkpoint that would stop it is dropped from the plan instead."""
        checkpoints = self.checkpoints
        index = self.next_checkpoint
        while index < len(checkpoints):
            point = checkpoints[index]
            if point >= target:
                break
            if not in_kernel(self.position, (target,), point, kernel_chunk):
                if self.reasons[point] != ROOM:
                    return point
                del checkpoints[index]
                del self.reasons[point]
                continue
            index += 1
        return target

    def budget_end(self, limit: int, chunk_end: int, kernel_chunk: int | None) -> int:
        """Where a piece the token budget cuts at ``limit`` (before its planned ``chunk_end``)
        stops: floored onto the recurrent kernel's grid of its planned chunk when a planned
        checkpoint lies past ``limit`` in that chunk, so the next piece starts on that grid
        and the point is still copied out of the kernel (a piece off the grid would have to
        stop at it: a forward pass more). ``limit`` itself when no such point is ahead, with no
        kernel grid, or when the grid leaves nothing to run this step."""
        if kernel_chunk is None:
            return limit
        checkpoints = self.checkpoints
        index = bisect.bisect_right(checkpoints, limit, self.next_checkpoint)
        if index == len(checkpoints) or checkpoints[index] >= chunk_end:
            return limit
        chunk_start, _ = chunk_start_of(self.lease.hit, self.chunk_ends, limit)
        floored = limit - (limit - chunk_start) % kernel_chunk
        return floored if floored > self.position else limit

    def steps_to_next_checkpoint(self) -> int:
        if self.next_checkpoint < len(self.checkpoints):
            return self.checkpoints[self.next_checkpoint] - self.position
        return 1 << 60


class EngineReplay:
    """One discrete-event replay of ``requests`` through ``cache`` (see the module docstring),
    run in stages: :meth:`run_until` stops once that many requests have left the queue
    (admitted, or served alone), :meth:`result` runs it to the end. Stopping changes nothing:
    the result is the one an uninterrupted run gives, so the simulator carries a bootstrap's
    winning replay of a trace's head on instead of replaying the head again.
    ``prefetch``: with tiers, what storage delivers while a request waits. ``publish``: a
    request's prompt and prefill states join the cache when its prefill ends
    (``HybridPrefixCache.publish``), as in vLLM and SGLang; else only when it finishes.
    ``tick`` (settable between stages) is called each time a request finishes."""

    def __init__(
        self,
        cache: HybridPrefixCache,
        requests: Iterable[Request],
        cost: CostModel,
        *,
        token_budget: int = 8192,
        max_running: int = 256,
        reject_oversized: bool = False,
        publish: bool = True,
        session_idle_s: float | None = DEFAULT_IDLE_S,
        prefetch: Prefetch | None = None,
        tick: Tick | None = None,
    ) -> None:
        self.cache = cache
        self.cost = cost
        self.token_budget = token_budget
        self.max_running = max_running
        self.reject_oversized = reject_oversized
        self.publish = publish
        self.prefetch = prefetch
        self.tick = tick
        #: requests finished so far
        self.finished = 0
        self._rec = Recorder()
        self._sessions = SessionClock(cache, session_idle_s)
        self._served = 0
        self._busy_s = 0.0
        self._steps = self._loop(iter(requests))

    @property
    def served(self) -> int:
        """Requests that have left the queue so far (admitted, or served alone)."""
        return self._served

    @property
    def rejected(self) -> int:
        """Requests served uncached so far because the whole cache could not hold them."""
        return self._rec.rejected

    def run_until(self, served: int | None) -> EngineReplay:
        """Run until ``served`` requests have left the queue (None: to the end)."""
        start = time.perf_counter()
        try:
            while served is None or self._served < served:
                next(self._steps)
        except StopIteration:
            pass  # the loop has run to its end
        finally:
            self._busy_s += time.perf_counter() - start
        return self

    def result(self, knobs: dict[str, object] | None = None) -> PolicyResult:
        """Run to the end; its result (``wall_s``: the time spent running)."""
        self.run_until(None)
        return policy_result(self.cache, self._rec, "engine", self._busy_s, knobs or {})

    def _loop(self, source: Iterator[Request]) -> Iterator[None]:
        """The event loop over ``source``; yields each time a request leaves the queue."""
        cache, cost, rec, sessions = self.cache, self.cost, self._rec, self._sessions
        token_budget, max_running = self.token_budget, self.max_running
        publish, prefetch = self.publish, self.prefetch
        pending = next(source, None)
        waiting: deque[Request] = deque()
        running: list[_Flight] = []
        now = 0.0
        link_free = 0.0  # when the link loading tiers' data into the device is idle again
        while pending is not None or waiting or running:
            while pending is not None and pending.arrival_s <= now:
                sessions.advance(pending.arrival_s)
                sessions.begin(pending.session, pending.arrival_s)
                waiting.append(pending)
                pending = next(source, None)
            sessions.advance(now)
            if not waiting and not running:
                if pending is None:
                    raise IntegrityError("pending missing")
                now = pending.arrival_s
                continue
            while waiting and len(running) < max_running:
                request = waiting[0]
                waited = now - request.arrival_s
                try:
                    lease = cache.admit(
                        request.prompt,
                        max_new_tokens=request.output_len,
                        namespace=request.namespace,
                        session=request.session,
                        token_budget=token_budget,
                        slow_tier_tokens=None if prefetch is None else prefetch.slow_limit(waited),
                    )
                except CapacityError:
                    if not self.reject_oversized:  # read here: a carried replay may change it
                        raise
                    if running:
                        break  # it needs the whole instance: wait until the batch drained
                    waiting.popleft()
                    now = _serve_alone(cache, rec, request, cost, now)
                    sessions.end(request.session, now)
                    self._served += 1
                    self.finished += 1
                    if self.tick is not None:
                        self.tick()
                    yield
                    continue
                if isinstance(lease, Wait):
                    break
                waiting.popleft()
                points = sorted({p.position for p in lease.plan.checkpoints})
                reasons = {p.position: p.reason for p in lease.plan.checkpoints}
                flight = _Flight(
                    request, lease, lease.hit, points, reasons, list(lease.plan.chunk_ends)
                )
                if lease.loaded_bytes_by_tier:
                    alone = cost.prefill_time(lease.hit, lease.prompt_len - lease.hit)
                    moved = cost.load_time(lease.loaded_bytes_by_tier)
                    # the load link is one resource: a load queues behind the ones before it
                    queued = max(0.0, link_free - now)
                    link_free = max(now, link_free) + moved
                    if prefetch is not None:
                        flight.load_s = queued + prefetch.ttft_s(cost, lease, alone, waited)
                    else:
                        flight.load_s = queued + cost.exposed_load(moved, alone)
                flight.record_due(cache)
                running.append(flight)
                account_prefill(cost, rec, lease)
                self._served += 1
                yield
            if not running:
                if not waiting:
                    continue
                raise IntegrityError("nothing runs yet requests wait: memory accounting leaked")
            prefill: list[tuple[int, int]] = []
            decoding = [f for f in running if f.done_prefill]
            budget = token_budget - len(decoding)
            prefilling = [f for f in running if not f.done_prefill]
            for flight in prefilling:
                if budget <= 0:
                    break
                ends = flight.chunk_ends
                nxt = ends[bisect.bisect_right(ends, flight.position)]
                limit = flight.position + budget
                if limit < nxt:
                    limit = flight.budget_end(limit, nxt, cache.kernel_chunk)
                target = flight.piece_end(min(nxt, limit), cache.kernel_chunk)
                prefill.append((flight.position, target - flight.position))
                budget -= target - flight.position
                flight.position = target
                flight.record_due(cache)
            bulk = 1
            if not prefill:
                horizon = min(
                    min(f.request.output_len - f.generated for f in decoding),
                    min(f.steps_to_next_checkpoint() for f in decoding),
                )
                bulk = max(1, horizon)
            contexts = [f.position for f in decoding]
            if bulk > 1:  # decodes only, in bulk: priced at the middle of the run of steps
                mid = [c + bulk // 2 for c in contexts]
                step = cost.step_time([], mid)
                if pending is not None and not waiting:
                    bulk = max(1, min(bulk, int((pending.arrival_s - now) / step) + 1))
            else:
                step = cost.step_time(prefill, contexts)
            now += step * bulk
            sessions.advance(now)  # before this step's publishes and finishes insert
            finished: list[_Flight] = []
            for flight in decoding:
                flight.generated += bulk
                flight.position += bulk
                if flight.position >= flight.due_at:
                    flight.record_due(cache)
                if flight.generated >= flight.request.output_len:
                    finished.append(flight)
            for flight in prefilling:
                if flight.position >= flight.lease.prompt_len and not flight.done_prefill:
                    flight.done_prefill = True
                    if publish:
                        cache.publish(flight.lease)
                    flight.generated = 1 if flight.request.output_len else 0
                    rec.ttft_s.append(now - flight.request.arrival_s + flight.load_s)
                    if flight.request.output_len:
                        flight.position += 1
                        flight.record_due(cache)
                    if flight.generated >= flight.request.output_len:
                        finished.append(flight)
            for flight in finished:
                if flight.request.output_len:
                    cache.extend(flight.lease, flight.request.output)
                cache.finish(flight.lease)
                sessions.end(flight.request.session, now)
                running.remove(flight)
                self.finished += 1
                if self.tick is not None:
                    self.tick()
            sample_usage(cache, rec, now, True)


def replay_engine(
    cache: HybridPrefixCache,
    requests: Iterable[Request],
    cost: CostModel,
    *,
    token_budget: int = 8192,
    max_running: int = 256,
    knobs: dict[str, object] | None = None,
    tick: Tick | None = None,
    reject_oversized: bool = False,
    publish: bool = True,
    session_idle_s: float | None = DEFAULT_IDLE_S,
    prefetch: Prefetch | None = None,
) -> PolicyResult:
    """An :class:`EngineReplay` of ``requests`` run to the end."""
    return EngineReplay(
        cache,
        requests,
        cost,
        token_budget=token_budget,
        max_running=max_running,
        reject_oversized=reject_oversized,
        publish=publish,
        session_idle_s=session_idle_s,
        prefetch=prefetch,
        tick=tick,
    ).result(knobs)
