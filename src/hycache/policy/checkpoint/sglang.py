"""SGLang's checkpoint placement for hybrid models (no_buffer / extra_buffer).

Pure: given a request the planner returns its chunk ends and checkpoints.
"""

from __future__ import annotations

import math

from hycache.policy.checkpoint.base import Checkpoint, CheckpointPolicy, PlanInput, PrefillPlan
from hycache.policy.checkpoint.chunks import chunk_ends, floor_to, in_kernel


class SglangPlanner(CheckpointPolicy):
    """SGLang Mamba radix cache (0.5.23). ``no_buffer``: a state at every chunk end, and the
    running state donated at request end. ``extra_buffer``: every prefill chunk (an extend of
    ``[s, e)``) tracks one state, at ``s + floor((e - s) / grid) * grid`` (grid = lcm(kernel
    chunk, page), SGLang's ``mamba_cache_chunk_size``; none when the extend is shorter than
    the grid), or at the branching length (the FULL hit aligned down, when deeper than the
    MAMBA hit) instead when that lies inside the extend on its grid; plus one every
    ``track_interval`` decode tokens. The prefill states are copied out of the kernel's
    intermediate states (``h[chunk]``), so they end no chunk unless they are off the kernel
    grid of their chunk. With ``extra_buffer`` the tree keeps a request's KV only up to its
    deepest tracked state (``kv_to_last_state``)."""

    def __init__(
        self, strategy: str, page_size: int, track_interval: int, mamba_chunk: int | None = None
    ) -> None:
        self.strategy = strategy
        self.page_size = page_size
        self.track_interval = track_interval
        #: the model's recurrent kernel chunk (SGLang's mamba_chunk_size, FLA's 64 by
        #: default): the tracking grid even where the replay gives no kernel grid (serial mode)
        self.mamba_chunk = mamba_chunk
        # extra_buffer inserts a request's KV up to its tracked state only
        self.kv_to_last_state = self.strategy == "extra_buffer"

    def plan(self, request: PlanInput) -> PrefillPlan:
        n, start = request.prompt_len, request.start
        if self.strategy == "no_buffer":
            ends = chunk_ends(start, n, request.token_budget)
            chunks = tuple(Checkpoint(e, "chunk") for e in ends if e % self.page_size == 0)
            return PrefillPlan(tuple(ends), chunks, keep_final_state=True)
        grid = math.lcm(self.mamba_chunk or request.kernel_chunk or 64, self.page_size)
        branch = floor_to(request.kv_hit, grid)
        # PrefillAdder truncates a chunk that does not finish the prompt to the page
        ends = chunk_ends(start, n, request.token_budget, grid=self.page_size)
        wanted: dict[int, str] = {}
        previous = start
        for end in ends:
            # ScheduleBatch._mamba_radix_cache_v2_req_prepare_for_extend
            if end - previous >= grid:
                tracked = previous + floor_to(end - previous, grid)
                reason = "prompt_end" if end == n else "chunk"
                if previous < branch < end and (branch - previous) % grid == 0:
                    tracked, reason = branch, "branch"
                wanted[tracked] = reason
            previous = end
        inside = [p for p in wanted if p < n and p not in ends]
        extra = [p for p in inside if not in_kernel(start, ends, p, request.kernel_chunk)]
        if extra:
            ends = sorted({*ends, *extra})
        total = n + request.max_new_tokens
        first = floor_to(n, self.track_interval) + self.track_interval
        for p in range(first, total + 1, self.track_interval):
            wanted[p] = "decode"
        points = tuple(Checkpoint(p, r) for p, r in sorted(wanted.items()))
        return PrefillPlan(tuple(ends), points, keep_final_state=False)
