"""vLLM's align-mode checkpoint placement (``--mamba-cache-mode align``), as in vLLM 0.33.0.

Pure: given a request the planner returns its chunk ends and checkpoints.
"""

from __future__ import annotations

from hycache.errors import ConfigError
from hycache.policy.checkpoint.base import (
    OFFGRID_MODES,
    Checkpoint,
    CheckpointPolicy,
    PlanInput,
    PrefillPlan,
)
from hycache.policy.checkpoint.chunks import chunk_ends, floor_to, in_kernel


class VllmAlignPlanner(CheckpointPolicy):
    """vLLM ``mamba_cache_mode="align"``. States sit on the block grid: at chunk ends, which the
    scheduler cuts on ``scheduler_grid`` (the recurrent block, or by the #54076 bug the
    smallest block of all groups), and, when the recurrent layers export a prefill checkpoint
    (``internal_checkpoints``: FlashInfer's GDN prefill, Mamba2), at one block boundary inside a
    chunk. Every prefill stops at the shared-prefix junction (the attention hit past the state
    hit). ``retention_interval``: None keeps every such state (dense); 0 keeps the replay
    boundary (the last block boundary before the prompt's last token) and the junction; N > 0
    also the states at multiples of N."""

    def __init__(
        self,
        block: int,
        scheduler_grid: int,
        retention_interval: int | None,
        offgrid: str = "drop",
        caches_states: bool = True,
        internal_checkpoints: bool = False,
        checkpoint_alignment: int = 1,
    ) -> None:
        self.block = block
        self.scheduler_grid = scheduler_grid
        self.retention_interval = retention_interval
        self.offgrid = offgrid
        self.caches_states = caches_states
        self.internal_checkpoints = internal_checkpoints
        #: an internal checkpoint lies a multiple of this from its chunk's start (FlashInfer
        #: GDN: the block; Mamba2: 1)
        self.checkpoint_alignment = checkpoint_alignment
        if self.offgrid not in OFFGRID_MODES:
            raise ConfigError(f"offgrid must be one of {OFFGRID_MODES}, got {self.offgrid!r}")
        if self.block < 1 or self.scheduler_grid < 1 or self.checkpoint_alignment < 1:
            raise ConfigError("block, scheduler_grid and checkpoint_alignment must be >= 1")
        self.state_grid = self.block

    def _internal(self, query_start: int, query_end: int) -> int:
        """The block boundary a prefill checkpoint exports inside ``[query_start, query_end)``,
        or 0 (``is_mamba_prefill_checkpoint_valid`` in vllm/v1/kv_cache_interface.py)."""
        if not self.internal_checkpoints:
            return 0
        b = self.block
        point = floor_to(query_end - 1, b)
        valid = (
            query_start % b == 0
            and -(-query_end // b) - 2 > (query_start - 1) // b
            and query_start + b <= point
            and query_start < point < query_end
            and (point - query_start) % self.checkpoint_alignment == 0
        )
        return point if valid else 0

    def plan(self, request: PlanInput) -> PrefillPlan:
        n, start = request.prompt_len, request.start
        replay = floor_to(n - 1, self.block)  # replay_boundaries: num_prompt_tokens - 1
        junction = 0
        if request.kv_hit > start:
            junction = start + floor_to(request.kv_hit - start, self.block)
        forced: tuple[int, ...] = (junction,)
        budget = request.token_budget
        ends = chunk_ends(start, n, budget, grid=self.scheduler_grid, must_end_at=forced)
        last_start = ends[-2] if len(ends) > 1 else start
        if not self._internal(last_start, n):
            # No export in the prompt's last chunk: the scheduler stops at the last cacheable
            # block boundary instead (scheduler.py, _mamba_block_aligned_split).
            cut = floor_to(n - 1, self.scheduler_grid)
            forced = (*forced, cut)
            ends = chunk_ends(start, n, budget, grid=self.scheduler_grid, must_end_at=forced)
        candidates: dict[int, str] = {}
        previous = start
        for end in ends:
            if end < n or end % self.block == 0:  # the prompt's partial last block: no state
                candidates.setdefault(end, "chunk")
            point = self._internal(previous, end)
            if point:
                candidates.setdefault(point, "chunk")
            previous = end
        # reachable_block_mask (single_type_kv_cache_manager.py): which states are kept.
        interval = self.retention_interval
        dense = interval is None or (interval > 0 and interval // self.block <= 1)
        keep: dict[int, str] = {}
        for point, reason in sorted(candidates.items()):
            if point <= start:
                continue
            if point == junction:
                keep[point] = "branch"
            elif point == replay:
                keep[point] = "prompt_end"
            elif dense:
                keep[point] = reason
            elif interval and point % interval == 0:
                keep[point] = "interval"
        # A checkpoint the recurrent kernel cannot copy out of its chunk ends one.
        inside = [p for p in keep if p < n and p not in ends]
        extra = [p for p in inside if not in_kernel(start, ends, p, request.kernel_chunk)]
        if extra:
            ends = sorted({*ends, *extra})
        points = tuple(Checkpoint(p, keep[p]) for p in sorted(keep))
        return PrefillPlan(tuple(ends), points, keep_final_state=False)
