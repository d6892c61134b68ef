"""Checkpoint placement: the rules of vLLM (align), SGLang (no_buffer / extra_buffer), Marconi
and hycache. Each planner is pure: given a request it returns its chunk ends and checkpoints."""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass

from hycache.policy.base import Checkpoint, CheckpointPolicy, PlanInput, PrefillPlan


def _floor(x: int, grid: int) -> int:
    return x - x % grid


def chunk_ends(
    start: int, end: int, budget: int | None, *, grid: int = 1, must_end_at: tuple[int, ...] = ()
) -> list[int]:
    """Cut ``[start, end)`` into chunks of at most ``budget`` tokens. A chunk that does not reach
    ``end`` is cut down to the ``grid`` (when that leaves it non-empty); chunks also end at every
    position of ``must_end_at`` inside the range."""
    ends: list[int] = []
    forced = sorted(p for p in set(must_end_at) if start < p < end)
    pos = start
    while pos < end:
        stop = end if budget is None else min(end, pos + budget)
        if stop < end and _floor(stop, grid) > pos:
            stop = _floor(stop, grid)
        for p in forced:
            if pos < p < stop:
                stop = p
                break
        ends.append(stop)
        pos = stop
    return ends


def in_kernel(start: int, ends: Sequence[int], position: int, kernel_chunk: int | None) -> bool:
    """Whether a state at ``position`` (start < position) of a prefill from ``start`` cut at
    ``ends`` is a chunk end or an in-kernel point: a multiple of ``kernel_chunk`` from the
    start of the chunk holding it (see hycache.policy.base)."""
    index = bisect.bisect_left(ends, position)
    if index < len(ends) and ends[index] == position:
        return True
    if kernel_chunk is None:
        return False
    chunk_start = ends[index - 1] if index else start
    return (position - chunk_start) % kernel_chunk == 0


def onto_kernel_grid(
    start: int, ends: Sequence[int], position: int, kernel_chunk: int, page: int
) -> int:
    """``position`` moved down to the nearest in-kernel point or chunk end of its chunk (a
    multiple of lcm(kernel_chunk, page) from the chunk's start); ``position`` itself when that
    is the prefill's start (nothing to move to) or not on the page grid."""
    index = bisect.bisect_left(ends, position)
    if index < len(ends) and ends[index] == position:
        return position
    chunk_start = ends[index - 1] if index else start
    moved = chunk_start + _floor(position - chunk_start, math.lcm(kernel_chunk, page))
    return moved if moved > start and moved % page == 0 else position


def settle_ends(
    start: int, end: int, budget: int | None, points: Sequence[int], kernel_chunk: int | None
) -> list[int]:
    """Chunk ends for ``[start, end)`` in chunks of at most ``budget`` such that every prefill
    point of ``points`` (start < p < end) is a chunk end or in-kernel: those that are not end a
    chunk (re-checked, since a forced end moves the chunks after it)."""
    inside = sorted({p for p in points if start < p < end})
    forced: set[int] = set()
    while True:
        ends = chunk_ends(start, end, budget, must_end_at=tuple(forced))
        missing = {p for p in inside if not in_kernel(start, ends, p, kernel_chunk)}
        if not missing:
            return ends
        forced |= missing


@dataclass
class VllmAlignPlanner(CheckpointPolicy):
    """vLLM ``mamba_cache_mode="align"``: a state is kept only where a prefill chunk ends on the
    block grid; the scheduler cuts chunks on ``scheduler_grid`` (the recurrent block, or by the
    #54076 bug the smallest block of all groups). ``retention_interval``: None keeps every
    chunk-end state (dense); 0 keeps the prompt-end block boundary and the shared-prefix
    boundary; N > 0 also one state per N tokens."""

    block: int
    scheduler_grid: int
    retention_interval: int | None

    def __post_init__(self) -> None:
        self.state_grid = self.block

    def plan(self, request: PlanInput) -> PrefillPlan:
        n, start = request.prompt_len, request.start
        prompt_end = _floor(n, self.scheduler_grid)
        forced = [prompt_end]
        shared = 0
        if self.retention_interval is not None and request.kv_hit > start:
            shared = _floor(request.kv_hit, self.block)  # shared-prefix boundary
            forced.append(shared)
        ends = chunk_ends(
            start, n, request.token_budget, grid=self.scheduler_grid, must_end_at=tuple(forced)
        )
        checkpoints: list[Checkpoint] = []
        previous = start
        for end in ends:
            if self.retention_interval is None:
                checkpoints.append(Checkpoint(end, "chunk"))
            elif end == shared and shared > start:
                checkpoints.append(Checkpoint(end, "branch"))
            elif end == _floor(n, self.block) and end > start:
                checkpoints.append(Checkpoint(end, "prompt_end"))
            elif self.retention_interval and end // self.retention_interval > (
                previous // self.retention_interval
            ):
                checkpoints.append(Checkpoint(end, "interval"))
            previous = end
        return PrefillPlan(tuple(ends), tuple(checkpoints), keep_final_state=False)


@dataclass
class SglangPlanner(CheckpointPolicy):
    """SGLang Mamba radix cache. ``no_buffer``: a state at every chunk end, and the running
    state donated at request end. ``extra_buffer``: one tracked state per prefill at
    ``start + floor(extend / grid) * grid`` (grid = lcm(kernel chunk, page), SGLang's
    ``mamba_cache_chunk_size``), the aligned branching length when the FULL hit is deeper than
    the MAMBA hit, and one every ``track_interval`` decode tokens. The prefill states are
    copied out of the kernel's intermediate states (``h[chunk]``), so they end no chunk unless
    they are off the kernel grid of their chunk."""

    strategy: str
    page_size: int
    track_interval: int

    def plan(self, request: PlanInput) -> PrefillPlan:
        n, start = request.prompt_len, request.start
        if self.strategy == "no_buffer":
            ends = chunk_ends(start, n, request.token_budget)
            chunks = tuple(Checkpoint(e, "chunk") for e in ends if e % self.page_size == 0)
            return PrefillPlan(tuple(ends), chunks, keep_final_state=True)
        grid = math.lcm(request.kernel_chunk or 64, self.page_size)
        wanted: dict[int, str] = {}
        tracked = start + _floor(n - start, grid)
        if tracked > start:
            wanted[tracked] = "prompt_end"
        branch = _floor(request.kv_hit, grid)
        if request.kv_hit > start and branch > start:
            wanted[branch] = "branch"
        ends = settle_ends(start, n, request.token_budget, tuple(wanted), request.kernel_chunk)
        total = n + request.max_new_tokens
        first = _floor(n, self.track_interval) + self.track_interval
        for p in range(first, total + 1, self.track_interval):
            wanted[p] = "decode"
        points = tuple(Checkpoint(p, r) for p, r in sorted(wanted.items()))
        return PrefillPlan(tuple(ends), points, keep_final_state=False)


@dataclass
class MarconiPlanner(CheckpointPolicy):
    """Marconi: at most two states per sequence: the branch point found by this lookup
    (speculative insertion, when the token match runs past the last state) and the state at
    the end of input + output."""

    def plan(self, request: PlanInput) -> PrefillPlan:
        n, start = request.prompt_len, request.start
        points: tuple[Checkpoint, ...] = ()
        branch = _floor(request.kv_hit, request.page_size)
        if branch > start:
            points = (Checkpoint(branch, "branch"),)
        ends = chunk_ends(start, n, request.token_budget, must_end_at=(branch,))
        return PrefillPlan(tuple(ends), points, keep_final_state=True)


REASON_PREFERENCE = ("branch", "tail", "prompt_end", "interval")
#: quantile of the observed unique tails the ``tail`` checkpoint steps back by, and how many
#: recent tails it remembers
TAIL_QUANTILE = 0.9
TAIL_MEMORY = 256
#: the step back before 8 tails were observed
DEFAULT_TAIL = 256


class HycachePlanner(CheckpointPolicy):
    """hycache: checkpoint where the next request is likely to resume.

    * the branch point (attention matched past the last state: a shared prefix);
    * the prompt end, and the prompt end rounded down to the *divergence grid*: the coarsest
      power-of-two grid (up to 4096 tokens) that at least 80% of the observed divergence points
      (where attention matches end) fall on. Traces built from hashed blocks (Mooncake: 512)
      diverge only on block boundaries, so a state at the last block boundary is what the next
      turn can use;
    * the end of the request (input + output, rounded down to a page): the next turn of a
      conversation resumes there;
    * optionally one every ``interval`` prompt tokens.

    A prefill checkpoint is moved down onto the kernel grid of its chunk (``kernel_chunk``,
    hycache.policy.base), where it is copied out of the forward pass; one that cannot be (no
    kernel grid, or within the first grid step) ends a chunk, i.e. costs one more forward pass.
    At most ``max_prefill_checkpoints`` (default 1) are taken per prefill (each holds a state's
    memory): the kinds reused most so far.
    It learns which of these pay: once 8 states of a reason were stored, a reason reused less
    than once per 10 stored states is skipped, except on every 16th request (to keep learning);
    the donated end-of-request state (no copy, no slot held while the request runs) is kept
    down to once per 20.
    """

    def __init__(
        self,
        interval: int = 0,
        *,
        learn_grid: bool = True,
        adaptive: bool = True,
        max_prefill_checkpoints: int = 1,
    ) -> None:
        self.interval = interval
        self.max_prefill_checkpoints = max_prefill_checkpoints
        self.learn_grid = learn_grid
        self.adaptive = adaptive
        self.warmup = 8  # states of a reason stored before its reuse rate is trusted
        self.reuse_ratio = 10  # a reason pays if one in this many of its states is reused
        self.donated_reuse_ratio = 20  # ... one in this many for the donated end state
        self.retry_every = 16  # a reason that does not pay is still tried every N-th plan
        self.early_retry_every = 32  # ... every N-th if it lies before the prompt end
        self._grid_counts: dict[int, int] = {}
        self._observed = 0
        self._plans = 0
        self._tails: list[int] = []

    def divergence_grid(self, page: int) -> int:
        """The learned grid (>= page); ``page`` until 20 divergences were observed."""
        if not self.learn_grid or self._observed < 20:
            return page
        grid = page
        candidate = page * 2
        while candidate <= 4096:
            on_grid = sum(n for g, n in self._grid_counts.items() if g % candidate == 0)
            if on_grid < 0.8 * self._observed:
                break
            grid = candidate
            candidate *= 2
        return grid

    def tail_length(self) -> int:
        """How far before its end a prompt is likely to diverge from a later one: the
        ``TAIL_QUANTILE`` of the unique tails (prompt length - attention match) of recent
        prompts that shared a prefix; ``DEFAULT_TAIL`` until 8 were seen."""
        if len(self._tails) < 8:
            return DEFAULT_TAIL
        ordered = sorted(self._tails)
        return ordered[min(len(ordered) - 1, int(TAIL_QUANTILE * len(ordered)))]

    def _observe(self, kv_hit: int, prompt_len: int) -> None:
        if kv_hit <= 0:
            return
        self._tails.append(prompt_len - kv_hit)
        if len(self._tails) > TAIL_MEMORY:
            del self._tails[0]
        power = kv_hit & -kv_hit  # largest power of two dividing kv_hit
        power = min(power, 4096)
        self._grid_counts[power] = self._grid_counts.get(power, 0) + 1
        self._observed += 1

    def _pays(self, reason: str, request: PlanInput, ratio: int, retry_every: int = 0) -> bool:
        """Whether states of ``reason`` are worth taking: fewer than ``warmup`` stored so far,
        or one in ``ratio`` reused, or this is a re-try plan (every ``retry_every``-th,
        default ``self.retry_every``)."""
        if not self.adaptive:
            return True
        stored, reused = request.reason_record.get(reason, (0, 0))
        return (
            stored < self.warmup
            or reused * ratio >= stored
            or self._plans % (retry_every or self.retry_every) == 0
        )

    def plan(self, request: PlanInput) -> PrefillPlan:
        n, start, page = request.prompt_len, request.start, request.page_size
        self._observe(request.kv_hit, n)
        self._plans += 1
        wanted: dict[int, str] = {}
        if self.interval:
            grid = max(page, _floor(self.interval, page))
            for p in range(_floor(start, grid) + grid, n, grid):
                wanted[p] = "interval"
        # the prompt end on the divergence grid: where a later prompt sharing this one's whole
        # blocks diverges (the exact end only serves an identical prompt, and the last token
        # is always recomputed, so only a coarse grid makes it reusable)
        position = _floor(n, self.divergence_grid(page))
        if position > start:
            wanted[position] = "prompt_end"
        tail = _floor(n - self.tail_length(), page)  # a later prompt sharing all but its tail
        if tail > start and tail not in wanted:
            wanted[tail] = "tail"
        branch = _floor(request.kv_hit, page)
        if branch > start:
            wanted[branch] = "branch"
        budget, kernel = request.token_budget, request.kernel_chunk
        ends = chunk_ends(start, n, budget)
        if kernel is not None:
            # onto the kernel grid of its chunk (at most kernel_chunk - 1 tokens earlier):
            # copied out of the forward pass instead of ending a chunk
            moved: dict[int, str] = {}
            for p, r in sorted(wanted.items(), key=lambda pr: REASON_PREFERENCE.index(pr[1])):
                moved.setdefault(onto_kernel_grid(start, ends, p, kernel, page), r)
            wanted = moved
        # a state before the prompt end (a forward pass more, or a slot held through the
        # prefill) is re-tried more rarely
        kept = {
            p: r
            for p, r in wanted.items()
            if self._pays(
                r, request, self.reuse_ratio, self.retry_every if p == n else self.early_retry_every
            )
        }
        if len(kept) > self.max_prefill_checkpoints:
            ranked = sorted(kept.items(), key=lambda pr: self._rank(pr[1], request))
            kept = dict(ranked[: self.max_prefill_checkpoints])
        ends = settle_ends(start, n, budget, tuple(kept), kernel)
        total = n + request.max_new_tokens
        final = _floor(total, page)
        donate = False
        # a donated end state holds no slot while the request runs: a lower bar than a copy
        ratio = self.donated_reuse_ratio if final == total else self.reuse_ratio
        if request.max_new_tokens and final > n and self._pays("final", request, ratio):
            if final == total:
                donate = True  # the running state at the end: no copy, no extra slot
            else:
                kept[final] = "final"  # taken during decode: no extra prefill chunk
        points = tuple(Checkpoint(p, r) for p, r in sorted(kept.items()))
        return PrefillPlan(tuple(ends), points, keep_final_state=donate)

    def _rank(self, reason: str, request: PlanInput) -> tuple[float, int]:
        """Sort key, best first: the reason's reuse rate so far, then a fixed preference."""
        stored, reused = request.reason_record.get(reason, (0, 0))
        return (-(reused + 1) / (stored + 2), REASON_PREFERENCE.index(reason))
