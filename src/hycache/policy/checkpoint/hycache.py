"""hycache's checkpoint planner: states where the next request is likely to resume, learned
from the match ends it sees, moved onto the recurrent kernel's grid, skipped when rarely
reused. Pure apart from what it learns."""

from __future__ import annotations

import bisect
import math

from hycache.policy.checkpoint.base import (
    ROOM,
    Checkpoint,
    CheckpointPolicy,
    PlanInput,
    PrefillPlan,
)
from hycache.policy.checkpoint.chunks import (
    chunk_ends,
    floor_to,
    in_kernel,
    onto_kernel_grid,
    settle_ends,
)
from hycache.policy.checkpoint.thresholds import DEFAULT_THRESHOLDS, PlannerThresholds

REASON_PREFERENCE = ("branch", "tail", "prompt_end", "interval", ROOM)


class HycachePlanner(CheckpointPolicy):
    """hycache: checkpoint where the next request is likely to resume.

    * the branch point (attention matched past the last state: a shared prefix);
    * the prompt end, and the prompt end rounded down to the *divergence grid*: the coarsest
      power-of-two grid (up to ``max_grid`` tokens) that at least ``grid_share`` of the observed
      divergence points (where attention matches end) fall on. Traces built from hashed blocks
      (Mooncake: 512) diverge only on block boundaries, so a state at the last block boundary
      is what the next turn can use;
    * the end of the request (input + output, rounded down to a page): the next turn of a
      conversation resumes there;
    * the *tail* point (with ``tail_checkpoint``): the prompt end less a step back chosen from
      the unique tails of recent prompts that shared a prefix (``tail_length``);
    * optionally one every ``interval`` prompt tokens.

    A prefill checkpoint is moved down onto the kernel grid of its chunk (``kernel_chunk``,
    hycache.policy.base), where it is copied out of the forward pass; one that cannot be (no
    kernel grid, or within the first grid step) ends a chunk, i.e. costs one more forward pass.
    With ``skip_first_step`` one within the first grid step past the state a prefill resumes
    from is not a candidate (it would save a later request less than a grid step over that
    state); the choice goes to the other kinds.
    Chunks are at most the token budget long; with ``decode_room`` a token shorter for every
    request in flight (``_chunk_budget``), so a step that also decodes them runs a chunk whole.
    At most ``max_prefill_checkpoints`` (default 1) are taken per prefill (each holds a state's
    memory): the kinds reused most so far. With ``proven_first`` a kind never resumed from
    ranks below every kind resumed from, and such kinds keep the fixed order branch, tail,
    prompt end among themselves (without it, a rate with one prior hit and miss,
    ``(hits + 1) / (stored + 2)``, ranks them: an untried kind outranks a tried one that
    has not paid yet, so the first states of a stream alternate between kinds).
    It learns which of these pay: once ``warmup`` states of a reason were stored, a reason
    reused less than once per ``reuse_ratio`` stored states is skipped, except on every
    ``retry_every``-th request, ``early_retry_every``-th before the prompt end (to keep
    learning); the donated end-of-request state (no copy, no slot held while the request runs)
    is kept down to once per ``donated_reuse_ratio``. With ``keep_best`` the kind reused at the
    highest rate is never skipped (when memory thrashes every kind falls below the bar, and
    skipping the best one leaves room only to kinds reused less). The thresholds are
    ``PlannerThresholds``.
    With ``free_room``, when the candidates this left out, a point every ``spacing`` tokens
    (``_free_room_grid``) and the planned states all fit into the memory free after the
    request's working set, they are taken too, as reason ``room`` (their own reuse record: the
    adaptive record of the other reasons stays as without them), each only where a chunk ends
    or the kernel copies it out (never a forward pass more). They displace nothing now;
    the eviction ranks them later like any other state. The cache offers free room only until
    memory first runs short (``PlanInput.free_states``): after that, free memory is the churn
    of evictions, and the rules above decide alone.
    """

    def __init__(
        self,
        interval: int = 0,
        *,
        learn_grid: bool = True,
        adaptive: bool = True,
        max_prefill_checkpoints: int = 1,
        free_room: bool = True,
        tail_checkpoint: bool = True,
        keep_best: bool = True,
        proven_first: bool = True,
        skip_first_step: bool = True,
        decode_room: bool = True,
        thresholds: PlannerThresholds = DEFAULT_THRESHOLDS,
    ) -> None:
        self.interval = interval
        self.free_room = free_room
        self.tail_checkpoint = tail_checkpoint
        self.max_prefill_checkpoints = max_prefill_checkpoints
        self.learn_grid = learn_grid
        self.adaptive = adaptive
        self.thresholds = thresholds
        #: the largest power of two within ``max_grid``: the coarsest grid a count can be on
        self._grid_cap = 1 << (thresholds.max_grid.bit_length() - 1)
        self.keep_best = keep_best
        self.proven_first = proven_first
        self.skip_first_step = skip_first_step
        self.decode_room = decode_room
        self._grid_counts: dict[int, int] = {}
        self._observed = 0
        self._plans = 0
        self._tails: list[int] = []  # in arrival order
        self._sorted_tails: list[int] = []  # the same, sorted
        self._grid_memo: tuple[int, int, int] | None = None  # (page, observed, grid)

    def divergence_grid(self, page: int) -> int:
        """The learned grid (>= page); ``page`` until ``grid_warmup`` divergences were seen."""
        t = self.thresholds
        if not self.learn_grid or self._observed < t.grid_warmup:
            return page
        memo = self._grid_memo
        if memo is not None and memo[0] == page and memo[1] == self._observed:
            return memo[2]
        # the counts are keyed by the largest power of two dividing a match end (at most
        # ``_grid_cap``): a power-of-two grid holds the keys at least as large (a running
        # sum over them, ascending); a grid of any other size holds none
        grid = page
        candidate = page * 2
        counts = sorted(self._grid_counts.items())
        below = 0  # counts keyed below ``candidate``
        index = 0
        while candidate <= t.max_grid and page & (page - 1) == 0:
            while index < len(counts) and counts[index][0] < candidate:
                below += counts[index][1]
                index += 1
            if self._observed - below < t.grid_share * self._observed:
                break
            grid = candidate
            candidate *= 2
        self._grid_memo = (page, self._observed, grid)
        return grid

    def tail_length(self, prompt_len: int) -> int:
        """How far before its end (``prompt_len`` tokens) to checkpoint a prompt so a later one
        sharing all but a unique tail resumes there, learned from the unique tails (prompt
        length - attention match) of the last ``tail_memory`` prompts that shared a prefix:
        the ``tail_quantile`` of them, or by default the tail ``t`` that maximises the tokens a
        later prompt is expected to reuse, ``(prompt_len - t) * P(its tail <= t)``, over the
        observed tails. ``default_tail`` until ``tail_warmup`` were seen."""
        t = self.thresholds
        if len(self._tails) < t.tail_warmup:
            return t.default_tail
        ordered = self._sorted_tails
        if t.tail_quantile is not None:
            return ordered[min(len(ordered) - 1, int(t.tail_quantile * len(ordered)))]
        best, best_reused = ordered[0], 0
        count = len(ordered)
        for index, tail in enumerate(ordered):
            covered = prompt_len - tail
            if covered * count <= best_reused:
                break  # no larger tail can reuse more: it covers less with at most all
            if covered * (index + 1) > best_reused:
                best, best_reused = tail, covered * (index + 1)
        return best

    def _observe(self, kv_hit: int, prompt_len: int) -> None:
        if kv_hit <= 0:
            return
        tail = prompt_len - kv_hit
        self._tails.append(tail)
        bisect.insort(self._sorted_tails, tail)
        if len(self._tails) > self.thresholds.tail_memory:
            oldest = self._tails.pop(0)
            del self._sorted_tails[bisect.bisect_left(self._sorted_tails, oldest)]
        power = kv_hit & -kv_hit  # largest power of two dividing kv_hit
        power = min(power, self._grid_cap)
        self._grid_counts[power] = self._grid_counts.get(power, 0) + 1
        self._observed += 1

    def _pays(self, reason: str, request: PlanInput, ratio: int, retry_every: int) -> bool:
        """Whether states of ``reason`` are worth taking: fewer than ``warmup`` stored so far,
        or one in ``ratio`` reused, or this is a re-try plan (every ``retry_every``-th)."""
        if not self.adaptive:
            return True
        stored, reused = request.reason_record.get(reason, (0, 0))
        return (
            stored < self.thresholds.warmup
            or reused * ratio >= stored
            or self._plans % retry_every == 0
            or (self.keep_best and self._best_reused(reason, request))
        )

    def _best_reused(self, reason: str, request: PlanInput) -> bool:
        """Whether no other trusted reason (``warmup`` states stored, ``room`` aside) was
        reused at a higher rate than ``reason``: skipping the best kind frees room only for
        kinds reused less."""
        warmup = self.thresholds.warmup
        stored, reused = request.reason_record.get(reason, (0, 0))
        return all(
            other_reused * stored <= reused * other_stored
            for other, (other_stored, other_reused) in request.reason_record.items()
            if other != reason and other != ROOM and other_stored >= warmup
        )

    def plan(self, request: PlanInput) -> PrefillPlan:
        n, start, page = request.prompt_len, request.start, request.page_size
        t = self.thresholds
        self._observe(request.kv_hit, n)
        self._plans += 1
        wanted: dict[int, str] = {}
        if self.interval:
            grid = max(page, floor_to(self.interval, page))
            for p in range(floor_to(start, grid) + grid, n, grid):
                wanted[p] = "interval"
        # the prompt end on the divergence grid: where a later prompt sharing this one's whole
        # blocks diverges (the exact end only serves an identical prompt, and the last token
        # is always recomputed, so only a coarse grid makes it reusable)
        position = floor_to(n, self.divergence_grid(page))
        if position > start:
            wanted[position] = "prompt_end"
        if self.tail_checkpoint:  # a later prompt sharing all but its tail diverges there
            tail = floor_to(n - self.tail_length(n), page)
            if tail > start and tail not in wanted:
                wanted[tail] = "tail"
        branch = floor_to(request.kv_hit, page)
        if branch > start:
            wanted[branch] = "branch"
        kernel: int | None = request.kernel_chunk  # (typed: mypyc infers None otherwise)
        budget = self._chunk_budget(request)
        ends = chunk_ends(start, n, budget)
        if kernel is not None:
            # onto the kernel grid of its chunk (at most kernel_chunk - 1 tokens earlier):
            # copied out of the forward pass instead of ending a chunk
            moved: dict[int, str] = {}
            for p, r in sorted(wanted.items(), key=lambda pr: REASON_PREFERENCE.index(pr[1])):
                moved.setdefault(onto_kernel_grid(start, ends, p, kernel, page), r)
            wanted = moved
            if self.skip_first_step and start > 0:
                # what stays off the grid lies within the first grid step past the state this
                # prefill resumes from: a forward pass more now, to save a later request less
                # than one grid step over that state, which nearly is that checkpoint already.
                # Not a candidate, so the choice below goes to the other kinds
                step = start + math.lcm(kernel, page)
                wanted = {
                    p: r
                    for p, r in wanted.items()
                    if p >= step or in_kernel(start, ends, p, kernel)
                }
        # a state before the prompt end (a forward pass more, or a slot held through the
        # prefill) is re-tried more rarely
        kept = {
            p: r
            for p, r in wanted.items()
            if self._pays(
                r, request, t.reuse_ratio, t.retry_every if p == n else t.early_retry_every
            )
        }
        if len(kept) > self.max_prefill_checkpoints:
            ranked = sorted(kept.items(), key=lambda pr: self._rank(pr[1], request))
            kept = dict(ranked[: self.max_prefill_checkpoints])
        ends = settle_ends(start, n, budget, tuple(kept), kernel)
        if self.free_room:
            candidates = [*wanted, *self._free_room_grid(request)]
            if kernel is not None:
                # onto the kernel grid of the chunks just settled: a room state rides along
                # only where a chunk ends or the kernel copies it out, never costing a pass
                projected = (onto_kernel_grid(start, ends, p, kernel, page) for p in candidates)
                candidates = [p for p in projected if in_kernel(start, ends, p, kernel)]
            room = self._room_states(request, candidates, kept)
            kept.update(room)
            if room and kernel is None:  # no kernel grid: a state is copied at a chunk end
                ends = settle_ends(start, n, budget, tuple(kept), kernel)
        total = n + request.max_new_tokens
        final = floor_to(total, page)
        donate = False
        # a donated end state holds no slot while the request runs: a lower bar than a copy
        ratio = t.donated_reuse_ratio if final == total else t.reuse_ratio
        pays = self._pays("final", request, ratio, t.retry_every)
        if request.max_new_tokens and final > n and pays:
            if final == total:
                donate = True  # the running state at the end: no copy, no extra slot
            else:
                kept[final] = "final"  # taken during decode: no extra prefill chunk
        points = tuple(Checkpoint(p, r) for p, r in sorted(kept.items()))
        return PrefillPlan(tuple(ends), points, keep_final_state=donate)

    def _chunk_budget(self, request: PlanInput) -> int | None:
        """The longest prefill chunk planned: the token budget, less (with ``decode_room`` and
        a kernel grid) a token for every request in flight, which decodes one per step beside
        this prefill, floored to the grid step (lcm of kernel chunk and page) so the chunks
        after it keep the grid. A chunk the step cannot hold whole would leave a sliver to its
        planned end for the next step: a forward pass more for a few tokens."""
        budget, kernel = request.token_budget, request.kernel_chunk
        if not self.decode_room or budget is None or kernel is None:
            return budget
        step = math.lcm(kernel, request.page_size)
        return max(step, floor_to(budget - request.in_flight, step))

    def _free_room_grid(self, request: PlanInput) -> range:
        """A point every ``spacing`` tokens of the prompt past its start: the divergence grid,
        at least the KV tokens one state weighs (so such states at most double the memory of
        what they cover). Empty when the room or the weight is unknown."""
        weight = request.state_kv_tokens
        if request.free_states is None or weight is None:
            return range(0)
        grid = self.divergence_grid(request.page_size)
        spacing = max(grid, -(-weight // grid) * grid)
        return range(floor_to(request.start, spacing) + spacing, request.prompt_len, spacing)

    def _room_states(
        self, request: PlanInput, candidates: list[int], kept: dict[int, str]
    ) -> dict[int, str]:
        """The ``candidates`` not in ``kept``, as reason ``room``, if they, ``kept`` and the end
        state all fit into free memory now; else none."""
        room = request.free_states
        extra = set(candidates) - set(kept)
        if room is None or not extra or len(kept) + len(extra) + 1 > room:
            return {}
        return dict.fromkeys(extra, ROOM)

    def _rank(self, reason: str, request: PlanInput) -> tuple[float, int]:
        """Sort key, best first: the reason's reuse rate so far, then a fixed preference; with
        ``proven_first``, a reason never resumed from after every reason resumed from."""
        stored, reused = request.reason_record.get(reason, (0, 0))
        preference = REASON_PREFERENCE.index(reason)
        if self.proven_first and not reused:
            return (0.0, preference)
        return (-(reused + 1) / (stored + 2), preference)
