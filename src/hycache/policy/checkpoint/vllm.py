"""vLLM's align-mode checkpoint placement (``--mamba-cache-mode align``).

Pure: given a request the planner returns its chunk ends and checkpoints.
"""

from __future__ import annotations

from dataclasses import dataclass

from hycache.errors import ConfigError
from hycache.policy.checkpoint.base import (
    OFFGRID_MODES,
    Checkpoint,
    CheckpointPolicy,
    PlanInput,
    PrefillPlan,
)
from hycache.policy.checkpoint.chunks import chunk_ends, floor_to


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
    offgrid: str = "drop"
    caches_states: bool = True

    def __post_init__(self) -> None:
        if self.offgrid not in OFFGRID_MODES:
            raise ConfigError(f"offgrid must be one of {OFFGRID_MODES}, got {self.offgrid!r}")
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
