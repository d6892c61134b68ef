"""Marconi's checkpoint placement: the branch point and the request's end.

Pure: given a request the planner returns its chunk ends and checkpoints.
"""

from __future__ import annotations

from hycache.policy.checkpoint.base import Checkpoint, CheckpointPolicy, PlanInput, PrefillPlan
from hycache.policy.checkpoint.chunks import chunk_ends, floor_to


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
