"""Running the cells of a sweep (one preset at one capacity each): in order, or on Ray.

A cell's replay builds its own cache from the config, the source and its capacity alone, so the
cells are independent and their results do not depend on where or in which order they run:
:func:`run_cells` gives the serial run's results (every field but ``wall_s``) whether it runs
them here one after the other or as Ray tasks. With Ray the source and the config are put in
the object store once (a parsed trace is a few arrays) and every task replays from them;
``address=None`` starts a local Ray (``ray.init()``, one task per core), an address joins an
existing cluster, whose workers must import the same hycache (installed there, or on their
``PYTHONPATH`` when the cluster was started). Progress (``hycache.sim.progress``): one bar per
replay when serial, one bar over the cells on Ray. Ray comes with the ``ray`` extra.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from hycache.errors import ConfigError
from hycache.sim.metrics import PolicyResult
from hycache.sim.progress import Progress
from hycache.sim.simulate import SimulationConfig, Source, run_policy

#: Local Ray's object store: the shared sources are small (a parsed trace is a few MB at most).
LOCAL_OBJECT_STORE_BYTES = 256 << 20


@dataclass(frozen=True)
class Cell:
    """One replay of a sweep: ``policy`` at ``capacity`` bytes."""

    capacity: int
    policy: str


@dataclass(frozen=True)
class Parallel:
    """Run cells as Ray tasks: on a local Ray (``address`` None) or an existing cluster."""

    address: str | None = None


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise ConfigError(
            "running cells in parallel needs Ray: pip install 'hycache[ray]' "
            "(or run without --parallel / --ray-address)"
        ) from None
    return ray


def _run_cell(config: SimulationConfig, source: Source, cell: Cell, total: int | None) -> Any:
    return run_policy(config, cell.policy, cell.capacity, source, total=total)


def run_cells(
    config: SimulationConfig,
    source: Source,
    cells: Sequence[Cell],
    *,
    total: int | None = None,
    parallel: Parallel | None = None,
) -> dict[Cell, PolicyResult]:
    """Every cell's result, in the order of ``cells``; serial unless ``parallel``."""
    if len(set(cells)) != len(cells):
        raise ConfigError("a sweep lists the same cell twice")
    if parallel is None:
        return {cell: _run_cell(config, source, cell, total) for cell in cells}
    return _on_ray(config, source, cells, total, parallel)


def _on_ray(
    config: SimulationConfig,
    source: Source,
    cells: Sequence[Cell],
    total: int | None,
    parallel: Parallel,
) -> dict[Cell, PolicyResult]:
    ray = _ray()
    if not ray.is_initialized():
        if parallel.address is None:
            ray.init(
                num_cpus=os.cpu_count() or 1,
                object_store_memory=LOCAL_OBJECT_STORE_BYTES,
                include_dashboard=False,
                log_to_driver=False,
            )
        else:
            ray.init(address=parallel.address, log_to_driver=False)
    quiet = replace(config, progress=False)
    config_ref, source_ref = ray.put(quiet), ray.put(source)
    task = ray.remote(num_cpus=1)(_run_cell)
    refs = {task.remote(config_ref, source_ref, cell, total): cell for cell in cells}
    results: dict[Cell, PolicyResult] = {}
    bar = Progress(len(cells), "cells", enabled=config.progress, unit="cell")
    pending = list(refs)
    try:
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            for ref in done:
                cell = refs[ref]
                results[cell] = ray.get(ref)
                bar.note(f"{cell.policy} {cell.capacity / 1e9:.2f} GB")
                bar.advance()
    finally:
        bar.close()
    return {cell: results[cell] for cell in cells}
