"""The thresholds of hycache's checkpoint planner, in one frozen record.

Each is a knob of the ``hycache`` preset (docs/presets.md); the sweep on the tune split
(``benchmarks/threshold_sweep.py``, docs/benchmarks.md "Thresholds on the tune split") backs
every default. The planner learns three things online (the reuse rate of each checkpoint
reason, the divergence grid and the unique tail); these say how much evidence it waits for
and how it reads it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PlannerThresholds:
    """How the planner turns what it observed into decisions.

    Reuse record: once ``warmup`` states of a reason were stored, the reason pays while one
    in ``reuse_ratio`` of them was reused (one in ``donated_reuse_ratio`` for the donated end
    state); one that does not is still tried every ``retry_every``-th plan
    (``early_retry_every``-th for a state before the prompt end).

    Divergence grid: after ``grid_warmup`` divergences (attention match ends), the coarsest
    power-of-two grid, at most ``max_grid`` tokens, that at least ``grid_share`` of them fall
    on; the page before.

    Unique tail: chosen from the last ``tail_memory`` unique tails (prompt length less its
    attention match) once ``tail_warmup`` were observed, ``default_tail`` tokens before: the
    tail that maximises the tokens a later prompt is expected to reuse, or with
    ``tail_quantile`` set, that quantile of them.
    """

    warmup: int = 8
    reuse_ratio: int = 10
    donated_reuse_ratio: int = 20
    retry_every: int = 16
    early_retry_every: int = 32
    max_grid: int = 4096
    grid_share: float = 0.8
    grid_warmup: int = 20
    tail_quantile: float | None = None
    tail_warmup: int = 8
    tail_memory: int = 256
    default_tail: int = 256


#: the defaults, for the preset's knob table
DEFAULT_THRESHOLDS = PlannerThresholds()
