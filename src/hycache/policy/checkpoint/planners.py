"""Checkpoint placement: the rules of vLLM (align), SGLang (no_buffer / extra_buffer) and
Marconi (hycache's own is in hycache.policy.checkpoint.hycache). Each planner is pure: given a
request it returns its chunk ends and checkpoints."""

from __future__ import annotations

import math
from dataclasses import dataclass

from hycache.policy.base import Checkpoint, CheckpointPolicy, PlanInput, PrefillPlan
from hycache.policy.checkpoint.chunks import chunk_ends, floor_to, settle_ends


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
        prompt_end = floor_to(n, self.scheduler_grid)
        forced = [prompt_end]
        shared = 0
        if self.retention_interval is not None and request.kv_hit > start:
            shared = floor_to(request.kv_hit, self.block)  # shared-prefix boundary
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
            elif end == floor_to(n, self.block) and end > start:
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
        tracked = start + floor_to(n - start, grid)
        if tracked > start:
            wanted[tracked] = "prompt_end"
        branch = floor_to(request.kv_hit, grid)
        if request.kv_hit > start and branch > start:
            wanted[branch] = "branch"
        ends = settle_ends(start, n, request.token_budget, tuple(wanted), request.kernel_chunk)
        total = n + request.max_new_tokens
        first = floor_to(n, self.track_interval) + self.track_interval
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
        branch = floor_to(request.kv_hit, request.page_size)
        if branch > start:
            points = (Checkpoint(branch, "branch"),)
        ends = chunk_ends(start, n, request.token_budget, must_end_at=(branch,))
        return PrefillPlan(tuple(ends), points, keep_final_state=True)
