"""Several engine processes on one store (``hycache verify --instances N``).

Instance 1 runs in the calling process; every further instance is a fresh Python process
(``multiprocessing`` spawn: nothing shared but the model directory and the Redis store) that
loads the same checkpoint, runs the same workload over its own empty device, host and disk
tiers and the shared Redis prefix, and compares with cold runs itself. Instances run one
after the other, so instance 2 finds in Redis everything instance 1 wrote: the prefixes it
reuses from objects written by another writer are counted (``CellResult.foreign_tokens``).
"""

from __future__ import annotations

import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from hycache.engine.verify import CellResult, verify_cell
from hycache.engine.verify_tiers import TierRun


@dataclass(frozen=True)
class InstanceJob:
    """What a spawned instance needs to run one cell (all picklable)."""

    directory: Path
    dtype: str
    arch: str
    policy: str
    workload: str
    tiers: TierRun
    options: dict[str, Any] = field(default_factory=dict)


def _run_job(job: InstanceJob) -> CellResult:
    import torch

    from hycache.engine.model import load_model, require_engine

    require_engine()
    torch.set_num_threads(1)
    model = load_model(job.directory, dtype=job.dtype)
    return verify_cell(model, job.arch, job.policy, job.workload, tiers=job.tiers, **job.options)


def run_instances(first: CellResult, job: InstanceJob, instances: int) -> list[CellResult]:
    """Instances 2..``instances`` of a cell whose first instance gave ``first``."""
    cells = [first]
    context = multiprocessing.get_context("spawn")
    for i in range(2, instances + 1):
        run = replace(
            job.tiers,
            directory=job.tiers.directory.with_name(f"{job.tiers.directory.name}-i{i}"),
            writer=f"instance-{i}",
            clear_after=i == instances,
        )
        with ProcessPoolExecutor(max_workers=1, mp_context=context) as pool:
            cell = pool.submit(_run_job, replace(job, tiers=run)).result()
        cell.instance = i
        cells.append(cell)
    return cells
