"""SGLang's checkpoint placement for hybrid models (no_buffer / extra_buffer).

Pure: given a request the planner returns its chunk ends and checkpoints.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from hycache.policy.checkpoint.base import Checkpoint, CheckpointPolicy, PlanInput, PrefillPlan
from hycache.policy.checkpoint.chunks import chunk_ends, floor_to, settle_ends


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
