"""Running the cells of a sweep (one preset at one capacity each): in order, in local processes,
or on Ray.

A cell's replay builds its own cache from the config, the source and its capacity alone, so the
cells are independent and their results do not depend on where or in which order they run:
:func:`run_cells` gives the serial run's results (every field but ``wall_s``) whether it runs
them here one after the other, in forked local processes (:class:`Processes`) or as Ray tasks.
Forked workers inherit the config and the source (a parsed trace is shared copy-on-write, not
sent); they take the cells that bootstrap first (Marconi's alpha, hycache's tuning), which
only shortens the run. A sweep of one cell runs here and gives the workers to its bootstrap
replays instead (``hycache.sim.forked``). Where ``fork`` is not available the cells run in
order. With Ray the source and the config are put in the object store once (a parsed trace
is a few arrays) and every task replays from them; ``address=None`` starts a local Ray
(``ray.init()``, one task per core), an address joins an existing cluster, whose workers must
import the same hycache (installed there, or on their ``PYTHONPATH`` when the cluster was
started). Progress (``hycache.sim.progress``): one bar per replay when serial, one bar over
the cells otherwise. Ray comes with the ``ray`` extra.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Iterable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from dataclasses import dataclass, replace
from typing import Any

from hycache.errors import ConfigError, IntegrityError
from hycache.sim.forked import can_fork, forked_contest
from hycache.sim.metrics import PolicyResult
from hycache.sim.progress import Progress
from hycache.sim.simulate import SimulationConfig, run_policy
from hycache.sim.source import Source

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


@dataclass(frozen=True)
class Processes:
    """Run cells in up to ``jobs`` forked local processes (one cell each at a time).
    ``share_cores``: ``jobs`` counts cores, not processes; a single cell's bootstrap contest
    may then run more processes than that, sharing them
    (``hycache.sim.forked.contest_processes``)."""

    jobs: int
    share_cores: bool = False

    def __post_init__(self) -> None:
        if self.jobs < 1:
            raise ConfigError(f"jobs must be >= 1, got {self.jobs}")


def usable_cores() -> int:
    """The cores this process may run on (its affinity where the platform tells it)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1


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
    parallel: Parallel | Processes | None = None,
) -> dict[Cell, PolicyResult]:
    """Every cell's result, in the order of ``cells``; serial unless ``parallel``."""
    if len(set(cells)) != len(cells):
        raise ConfigError("a sweep lists the same cell twice")
    if isinstance(parallel, Parallel):
        return _on_ray(config, source, cells, total, parallel)
    jobs = 1 if parallel is None else parallel.jobs
    if len(cells) == 1 and jobs > 1:
        [cell] = cells  # one cell: its bootstrap replays get the workers
        share_cores = parallel is not None and parallel.share_cores
        contest = forked_contest(jobs, share_cores=share_cores)
        result = run_policy(
            config, cell.policy, cell.capacity, source, total=total, contest=contest
        )
        return {cell: result}
    workers = min(jobs, len(cells))
    if workers <= 1 or not can_fork():
        return {cell: _run_cell(config, source, cell, total) for cell in cells}
    return _in_processes(config, source, cells, total, workers)


#: what a forked worker replays from: set once in each worker by ``_adopt``
_INHERITED: list[tuple[SimulationConfig, Source, int | None]] = []


def _adopt(config: SimulationConfig, source: Source, total: int | None) -> None:
    """A worker's initializer; under ``fork`` its arguments are inherited, not pickled."""
    _INHERITED.append((config, source, total))


def _run_inherited(cell: Cell) -> PolicyResult:
    if len(_INHERITED) != 1:
        raise IntegrityError(f"a worker holds {len(_INHERITED)} sources, not 1")
    config, source, total = _INHERITED[0]
    result: PolicyResult = _run_cell(config, source, cell, total)
    return result


def _bootstraps_first(cells: Sequence[Cell]) -> list[Cell]:
    """``cells``, those whose preset replays a bootstrap window before its run first."""
    return sorted(cells, key=lambda cell: cell.policy not in ("marconi", "hycache"))


def _in_processes(
    config: SimulationConfig,
    source: Source,
    cells: Sequence[Cell],
    total: int | None,
    workers: int,
) -> dict[Cell, PolicyResult]:
    quiet = replace(config, progress=False)
    pool = ProcessPoolExecutor(
        workers,
        mp_context=multiprocessing.get_context("fork"),
        initializer=_adopt,
        initargs=(quiet, source, total),
    )
    with pool:
        futures = {pool.submit(_run_inherited, cell): cell for cell in _bootstraps_first(cells)}
        results = _collect(futures, config.progress, cells)
    return {cell: results[cell] for cell in cells}


def _collect(
    futures: dict[Future[PolicyResult], Cell], progress: bool | None, cells: Sequence[Cell]
) -> dict[Cell, PolicyResult]:
    """The cells' results, one progress bar over them. Where cells fail, the error raised is
    the one of the first failing cell in ``cells``' order, as the serial run's would be; the
    cells after it that have not started are cancelled (their results could not be shown)."""
    order = {cell: index for index, cell in enumerate(cells)}
    results: dict[Cell, PolicyResult] = {}
    failed: dict[Cell, Exception] = {}
    bar = Progress(len(cells), "cells", enabled=progress, unit="cell")
    try:
        done: Iterable[Future[PolicyResult]] = as_completed(futures)
        for future in done:
            cell = futures[future]
            if future.cancelled():
                continue
            try:
                results[cell] = future.result()
            except Exception as exc:  # raised below, in the cells' order
                failed[cell] = exc
                first = min(order[c] for c in failed)
                for other, other_cell in futures.items():
                    if order[other_cell] > first:
                        other.cancel()
                continue
            bar.note(f"{cell.policy} {cell.capacity / 1e9:.2f} GB")
            bar.advance()
    finally:
        bar.close()
    if failed:
        raise failed[min(failed, key=order.__getitem__)]
    return results


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
                num_cpus=usable_cores(),
                object_store_memory=LOCAL_OBJECT_STORE_BYTES,
                include_dashboard=False,
                log_to_driver=False,
            )
        else:
            ray.init(address=parallel.address, log_to_driver=False)
    quiet = replace(config, progress=False)
    config_ref, source_ref = ray.put(quiet), ray.put(source)
    task = ray.remote(num_cpus=1)(_run_cell)
    futures = {task.remote(config_ref, source_ref, cell, total).future(): cell for cell in cells}
    results = _collect(futures, config.progress, cells)
    return {cell: results[cell] for cell in cells}
