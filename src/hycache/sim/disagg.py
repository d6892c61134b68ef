"""The simulator's ``disagg`` replay: disaggregated prefill/decode over two caches of one
preset, with the reference engine's rules (``hycache.engine.disagg``).

Requests run in arrival order (serial semantics: logical time, nothing overlaps), each through
both instances:

1. The decode instance admits the whole prompt (N tokens) on its own cache first and lacks
   (``transfer_for``): the full-attention KV of ``[start, N-1)`` with ``start = max(hit,
   min(kv_read_end, N-1))`` (its hit, or the end of the cached KV it reads in place); a
   sliding window's KV for the positions of ``[hit, N-1)`` within ``window`` tokens of N-1;
   and one state (recurrent + conv, ``spec.state_bytes``) at N-1 unless its hit ends there.
2. Unless it lacks nothing, the prefill instance runs ``prompt[:N-1]`` on its own cache (its
   own hit shortens that prefill; the prompt and planned states up to N-1 join its cache) and
   sends exactly what was lacked: bytes moved is the analytic minimum above, no padding,
   whatever either side's page size.
3. The decode instance computes the last prompt token and decodes. Its cache records only the
   states it computes itself (planned positions >= N): the state received at N-1 is not one
   of its checkpoints, as in the engine. Then its prompt and output are inserted.

TTFT = the prefill instance's ``prefill_time(p_hit, N-1 - p_hit)`` (0 when it did not run) +
the transfer, ``bytes / Hardware.remote_bandwidth`` (after the prefill, not overlapped with
it) + the decode instance's one-token step ``prefill_time(N-1, 1)``.

Under that rule the decode cache holds no state inside any prompt (N-1 is off its grid, and
it records none there), so it hits only where a later prompt extends a whole earlier request
(its end state). ``pull="grid"`` measures the alternative: the decode instance resumes at
the last checkpoint its own plan places in ``(hit, N-1]`` (N-1 when none): everything above
with that point in place of N-1 (the prefill instance runs ``prompt[:point]``, the KV and the
state are pulled up to it, the decode instance computes ``[point, N)`` itself), and it keeps
the pulled state as that checkpoint. A request that a cache
can never hold is served uncached on that side (counted as rejected there); the other side
proceeds as if it had no hit there. No lower tiers.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterable
from dataclasses import dataclass

from hycache.cache.facade import HybridPrefixCache
from hycache.cache.lease import Lease, Wait
from hycache.errors import CapacityError, ConfigError, IntegrityError
from hycache.sim.cost import CostModel
from hycache.sim.metrics import DisaggStats, PolicyResult, Recorder, percentile
from hycache.sim.outcome import (
    Tick,
    account_prefill,
    policy_result,
    reject_uncached,
    sample_usage,
)
from hycache.sim.request import Request
from hycache.sim.sessions import DEFAULT_IDLE_S, SessionClock
from hycache.spec.model import ModelSpec
from hycache.tree.keys import TOKEN_BYTES

#: where the decode instance resumes (``resume_point``)
PULLS = ("last", "grid")


@dataclass(frozen=True)
class Transfer:
    """What the decode instance lacks for one request: full-attention KV positions
    ``[kv_from, kv_to)`` (``kv_to = N - 1``), their bytes plus a sliding window's, and the
    state's bytes (0: its own hit ends at N-1, or the model has no recurrent layers)."""

    kv_from: int
    kv_to: int
    kv_bytes: int
    state_bytes: int

    @property
    def total_bytes(self) -> int:
        return self.kv_bytes + self.state_bytes

    @property
    def empty(self) -> bool:
        """The decode instance lacks nothing: the prefill instance does not run."""
        return self.total_bytes == 0


def transfer_for(
    spec: ModelSpec, hit: int, kv_read_end: int, prompt_len: int, upto: int | None = None
) -> Transfer:
    """The analytic minimum the decode instance pulls (see the module docstring) when it
    resumes at ``upto`` (default N-1: it computes the last prompt token alone)."""
    end = prompt_len - 1 if upto is None else upto
    if not 0 <= hit <= end <= max(0, prompt_len - 1):
        raise IntegrityError(
            f"decode hit {hit} / resume point {end} outside [0, N-1] for a "
            f"{prompt_len}-token prompt"
        )
    start = max(hit, min(kv_read_end, end))
    full, swa = spec.full, spec.swa
    kv = (end - start) * full.kv_bytes_per_token if full is not None else 0
    if swa is not None:
        kv += max(0, end - max(hit, end - swa.window)) * swa.kv_bytes_per_token
    state = spec.state_bytes if hit < end else 0
    return Transfer(start, end, kv, state)


def _admit(
    cache: HybridPrefixCache, request: Request, new: int, rec: Recorder, reject: bool
) -> Lease | None:
    """``request`` admitted on ``cache``; None when no cache of its size could hold it
    (served uncached there, counted) and ``reject``."""
    try:
        lease = cache.admit(
            request.prompt,
            max_new_tokens=new,
            namespace=request.namespace,
            session=request.session,
            kernel_grid=False,  # nothing is prefilled: a state may sit anywhere
        )
    except CapacityError:
        if not reject:
            raise
        reject_uncached(cache, rec, request)
        return None
    if isinstance(lease, Wait):
        raise IntegrityError("a serial replay holds nothing in flight")
    return lease


def resume_point(lease: Lease | None, prompt_len: int, pull: str) -> int:
    """Where the decode instance resumes: N-1 (``last``, the engine's rule), or with ``grid``
    the last checkpoint its own plan places in ``(hit, N-1]`` (on its state grid, so it can
    keep the pulled state), N-1 when there is none."""
    if pull not in PULLS:
        raise ConfigError(f"pull must be one of {', '.join(PULLS)}, got {pull!r}")
    last = prompt_len - 1
    if pull == "last" or lease is None:
        return last
    points = [p.position for p in lease.plan.checkpoints if lease.hit < p.position <= last]
    return max(points, default=last)


def _prefill_side(
    cache: HybridPrefixCache,
    request: Request,
    n: int,
    cost: CostModel,
    rec: Recorder,
    reject: bool,
) -> float:
    """Run ``prompt[:n]`` on the prefill instance (one token to generate, which it never
    feeds back); returns the seconds of its prefill."""
    mine = dataclasses.replace(request, prompt=request.prompt[: n * TOKEN_BYTES], output=b"")
    lease = _admit(cache, mine, 1, rec, reject)
    if lease is None:
        return cost.prefill_time(0, n)
    cache.record_planned(lease, up_to=n)
    cache.finish(lease)
    account_prefill(cost, rec, lease)
    return cost.prefill_time(lease.hit, n - lease.hit)


def _decode_side(cache: HybridPrefixCache, lease: Lease, request: Request, keep_from: int) -> None:
    """The decode instance computed the rest of the prompt and decoded: the states it holds
    (planned at ``keep_from`` or later), then its prompt and output join its cache."""
    for point in lease.plan.checkpoints:
        if point.position >= keep_from:
            cache.record_checkpoint(lease, point.position, point.reason)
    if request.output_len:
        cache.extend(lease, request.output)
    cache.finish(lease)


def replay_disagg(
    prefill: HybridPrefixCache,
    decode: HybridPrefixCache,
    requests: Iterable[Request],
    cost: CostModel,
    *,
    knobs: dict[str, object] | None = None,
    tick: Tick | None = None,
    timeline_every: int = 1,
    reject_oversized: bool = False,
    session_idle_s: float | None = DEFAULT_IDLE_S,
    pull: str = "last",
) -> PolicyResult:
    """Every request through the decode instance's cache, the prefill instance when the
    decode side lacks anything, and back (see the module docstring). The result's main fields
    describe the prefill instance, ``disagg`` the transfer and the decode instance."""
    spec = prefill.spec
    rec, drec = Recorder(), Recorder()
    clocks = (SessionClock(prefill, session_idle_s), SessionClock(decode, session_idle_s))
    bandwidth = cost.hw.remote_bandwidth
    moved: list[int] = []
    seconds: list[float] = []
    kv_moved = state_moved = decode_hit = prompt_tokens = skipped = computed = 0
    start = time.perf_counter()
    for index, request in enumerate(requests):
        now = request.arrival_s
        for clock in clocks:
            clock.advance(now)
            clock.begin(request.session, now)
        n = request.prompt_len
        lease = _admit(decode, request, request.output_len, drec, reject_oversized)
        hit = lease.hit if lease is not None else 0
        at = resume_point(lease, n, pull)
        move = transfer_for(spec, hit, lease.kv_read_end if lease is not None else 0, n, at)
        ttft = 0.0
        if move.empty:
            skipped += 1
        else:
            ttft += _prefill_side(prefill, request, at, cost, rec, reject_oversized)
        transfer_s = move.total_bytes / bandwidth
        ttft += transfer_s + cost.prefill_time(at, n - at)
        rec.prefill_flops += spec.prefill_flops(at, n - at)
        computed += n - at
        if lease is not None:
            # the engine's rule keeps no state at N-1 (it computes from there); ``grid``
            # keeps the pulled one, which sits where its own plan wanted a checkpoint
            _decode_side(decode, lease, request, at if pull == "grid" else at + 1)
        for clock in clocks:
            clock.end(request.session, now)
        rec.ttft_s.append(ttft)
        moved.append(move.total_bytes)
        seconds.append(transfer_s)
        kv_moved += move.kv_bytes
        state_moved += move.state_bytes
        decode_hit += hit
        prompt_tokens += n
        sample_usage(prefill, rec, float(index), index % timeline_every == 0)
        sample_usage(decode, drec, float(index), False)
        if tick is not None:
            tick()
    result = policy_result(prefill, rec, "disagg", time.perf_counter() - start, knobs or {})
    ds = decode.stats()
    stats = DisaggStats(
        decode_capacity_bytes=ds.budget_bytes,
        bytes_moved=kv_moved + state_moved,
        kv_bytes_moved=kv_moved,
        state_bytes_moved=state_moved,
        transfers=sum(1 for m in moved if m),
        prefill_skipped=skipped,
        decode_hit_tokens=decode_hit,
        prompt_tokens=prompt_tokens,
        decode_peak_bytes=max(drec.used_bytes_peak, ds.peak_bytes),
        decode_overrun_bytes=max(0, drec.overrun_bytes, ds.peak_bytes - ds.budget_bytes),
        decode_evictions=sum(ds.evictions.values()),
        decode_rejected=drec.rejected,
        transfer_p50_s=percentile(seconds, 50),
        transfer_p95_s=percentile(seconds, 95),
        moved_samples=tuple(moved),
        pull=pull,
        decode_prefill_tokens=computed,
    )
    return dataclasses.replace(result, requests=len(moved), disagg=stats)
