"""`hycache`'s thresholds on the tune split: is each default the best of its neighbours?

    python benchmarks/threshold_sweep.py [--results threshold_sweep.json]
        [--sources chat,agent,shared-prefix,twice,docqa,branching] [--modes serial,engine]
        [--capacities 5,10,20,40] [--requests 200] [--model qwen3-next-80b-a3b]
        [--knobs warmup,reuse_ratio,...] [--jobs 1]

For every threshold knob of the ``hycache`` preset (``THRESHOLD_KNOBS`` of
``hycache.cache.hycache_preset``) it replays `hycache` with the knob at half and at twice its
default (``sweep_values``: integers rounded; ``grid_share`` at 0.7 and 0.9, ``tune_margin``
at 0.1 and 0.2), the other knobs at their defaults, on the *tune*
cells of ``benchmarks/policy_matrix.py`` only (the workloads at seed 0, the first half of a
Mooncake trace): the data the rules were chosen on, never an evaluation cell. Per knob value it
prints how many comparisons of the bar hycache holds (``policy_matrix.judge``: hit rate at
least the best other preset's minus ``HIT_SLACK``, engine TTFT p95 at most the best other's
times ``P95_SLACK``; two per cell, a serial p95 counted as held), the mean and the minimum of
its hit rate over the best other preset's, and in how many cells its hit rate is higher
(``better``) or lower (``worse``) than with the default by more than ``HIT_SLACK``.

``--results`` is a ``policy_matrix.py`` results file: the other presets' cells found there
are reused (copy the one of a ``policy_matrix.py --split tune`` run, keep the original), those
missing are replayed; the sweep adds its own replays, keyed by the knob setting. The Mooncake
first halves (``--sources mooncake_conversation``) are long: ``--modes serial`` for them.
``--jobs 1`` replays in this process, more in that many local processes.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Executor, Future, ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from tqdm import tqdm

from hycache.cache.hycache_preset import HYCACHE_KNOBS, THRESHOLD_KNOBS
from hycache.cache.presets import KnobValue
from hycache.sim.simulate import run_policy
from hycache.sim.workloads import WORKLOADS
from policy_matrix import (
    HIT_SLACK,
    POLICIES,
    Source,
    Store,
    _cell,
    _config,
    _key,
    capacity_of,
    describe,
    judge,
    load_store,
    measure_footprints,
    result_metrics,
    split_sources,
)

#: the knobs whose half / double is not a value worth trying: a share near 1, and a margin
#: whose default is its floor, 0 (tried at its former default 0.1 and twice that)
FIXED_VALUES: dict[str, tuple[KnobValue, KnobValue]] = {
    "grid_share": (0.7, 0.9),
    "tune_margin": (0.1, 0.2),
}


def sweep_values(knob: str) -> tuple[KnobValue, KnobValue]:
    """The two values of ``knob`` the sweep tries: half and twice the default (integers
    rounded), or ``FIXED_VALUES``."""
    if knob in FIXED_VALUES:
        return FIXED_VALUES[knob]
    default = HYCACHE_KNOBS[knob].default
    if isinstance(default, bool) or not isinstance(default, int | float):
        raise SystemExit(f"hycache.{knob} is not a number")
    if isinstance(default, int):
        return max(1, round(default / 2)), default * 2
    return default / 2, default * 2


#: a replay of the sweep: model, source label, requests, mode, capacity bytes, the knob set
#: (``None``: all at their defaults) and its value
Cell = tuple[str, str, int, str, int, str | None, KnobValue]


Item = TypeVar("Item")


def setting(cell: Cell) -> str:
    return "default" if cell[5] is None else f"{cell[5]}={cell[6]}"


def cell_key(cell: Cell) -> str:
    return _key(*cell[:5], "hycache", setting(cell))


def replay(cell: Cell) -> dict[str, float]:
    model, name, requests, mode, capacity, knob, value = cell
    knobs = {} if knob is None else {knob: value}
    config = dataclasses.replace(_config(model, mode), knobs={"hycache": knobs})
    return result_metrics(run_policy(config, "hycache", capacity, Source(name, requests)))


#: a replay of another preset, as ``policy_matrix._cell`` takes it (the last item: Marconi's
#: alpha if its serial replay chose one)
OtherCell = tuple[str, str, int, str, int, str, float | None]


def _other(cell: OtherCell) -> dict[str, float]:
    return _cell(cell)[1]


class Inline(Executor):
    """Runs each call at once, in this process (``--jobs 1``)."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        future: Future[Any] = Future()
        future.set_result(fn(*args, **kwargs))
        return future


def run_all(
    pool: Executor | None,
    fn: Callable[[Item], dict[str, float]],
    cells: list[Item],
    desc: str,
    done: Callable[[Item, dict[str, float]], str],
) -> None:
    """``fn`` on every cell, here one by one (``pool`` None) or in ``pool``, with a progress
    bar; ``done(cell, metrics)`` stores a finished cell and returns the line to print."""
    results: Iterator[dict[str, float]] = iter(
        map(fn, cells) if pool is None else pool.map(fn, cells)
    )
    bar = tqdm(total=len(cells), desc=desc, unit="cell", file=sys.stderr)
    for cell, metrics in zip(cells, results, strict=True):
        bar.write(done(cell, metrics), file=sys.stderr)
        bar.update(1)
    bar.close()


@dataclass
class Row:
    """One knob value over every cell: the bar held, hit ratios, cells against the default."""

    held: int = 0
    total: int = 0
    ratios: list[float] = dataclasses.field(default_factory=list)
    better: int = 0
    worse: int = 0

    def add(self, rows: dict[str, dict[str, float]], mode: str, default: float) -> None:
        hit_ok, p95_ok, hit_ratio, _ = judge(rows, mode)
        self.held += hit_ok + p95_ok
        self.total += 2
        self.ratios.append(hit_ratio)
        hit = rows["hycache"]["token_hit_rate"]
        self.better += hit > default + HIT_SLACK
        self.worse += hit < default - HIT_SLACK


def tally(
    store: Store, cells: list[Cell], others: Callable[[Cell], dict[str, dict[str, float]]]
) -> dict[str, Row]:
    """A ``Row`` per setting (``setting``) of ``cells``; ``others(cell)`` gives the other
    presets' replays of the cell."""
    rows: dict[str, Row] = {}
    for cell in cells:
        default = store[cell_key((*cell[:5], None, None))]["token_hit_rate"]
        mine = {**others(cell), "hycache": store[cell_key(cell)]}
        if any(r["capacity_overrun_bytes"] for r in mine.values()):
            raise SystemExit(f"capacity overrun in {cell_key(cell)}")
        rows.setdefault(setting(cell), Row()).add(mine, cell[3], default)
    return rows


def report(rows: dict[str, Row], knobs: Iterable[str]) -> None:
    """The table: the defaults' row first, then each knob's two values."""
    print(f"{'setting':32} {'bar':>7} {'hit ratio':>9} {'min':>6} {'better':>6} {'worse':>6}")
    order = ["default", *(f"{k}={v}" for k in knobs for v in sweep_values(k))]
    for name in order:
        row = rows.get(name)
        if row is None or not row.ratios:
            continue
        mean = sum(row.ratios) / len(row.ratios)
        print(
            f"{name:32} {row.held:>3}/{row.total:<3} {mean:9.3f} {min(row.ratios):6.3f} "
            f"{row.better:6d} {row.worse:6d}"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sources", default=",".join(WORKLOADS))
    parser.add_argument("--modes", default="serial,engine")
    parser.add_argument("--capacities", default="5,10,20,40", help="percent of the footprint")
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--model", default="qwen3-next-80b-a3b")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--results", default="threshold_sweep.json")
    names = ",".join(THRESHOLD_KNOBS)
    parser.add_argument("--knobs", default=names, help=f"threshold knobs to sweep: {names}")
    args = parser.parse_args(argv)
    knobs = [k for k in args.knobs.split(",") if k]
    unknown = [k for k in knobs if k not in THRESHOLD_KNOBS]
    if unknown:
        raise SystemExit(f"unknown threshold knob {unknown[0]!r}; known: {names}")
    sources = split_sources([s for s in args.sources.split(",") if s], "tune", [])
    modes = [m for m in args.modes.split(",") if m]
    percents = [float(c) for c in args.capacities.split(",") if c]
    model, requests = args.model, args.requests
    store, save = load_store(Path(args.results))
    pool = None if args.jobs == 1 else ProcessPoolExecutor(max_workers=args.jobs)
    measure_footprints(pool or Inline(), store, model, sources, requests)
    save()
    places = [
        (name, mode, capacity_of(store, model, name, requests, pct))
        for mode in modes
        for name in sources
        for pct in percents
    ]

    def other_done(cell: OtherCell, metrics: dict[str, float]) -> str:
        store[_key(*cell[:6])] = metrics
        save()
        return f"{cell[1]} {cell[3]} {cell[4] / 1e9:.2f}GB {cell[5]}: {describe(metrics)}"

    for phase in modes:  # serial first: engine-mode Marconi reuses the alpha it chose
        others: list[OtherCell] = [
            (
                model,
                name,
                requests,
                mode,
                capacity,
                policy,
                _alpha(store, model, requests, name, capacity),
            )
            for name, mode, capacity in places
            for policy in POLICIES
            if mode == phase
            and policy != "hycache"
            and _key(model, name, requests, mode, capacity, policy) not in store
        ]
        run_all(pool, _other, others, f"other presets, {phase}", other_done)
    settings: list[tuple[str | None, KnobValue]] = [(None, None)]
    settings += [(k, v) for k in knobs for v in sweep_values(k)]
    cells: list[Cell] = [
        (model, name, requests, mode, capacity, knob, value)
        for knob, value in settings
        for name, mode, capacity in places
    ]
    todo = [c for c in cells if cell_key(c) not in store]

    def done(cell: Cell, metrics: dict[str, float]) -> str:
        store[cell_key(cell)] = metrics
        save()
        return f"{cell[1]} {cell[3]} {cell[4] / 1e9:.2f}GB {setting(cell)}: {describe(metrics)}"

    run_all(pool, replay, todo, "hycache settings", done)
    if pool is not None:
        pool.shutdown()

    def rows_of(cell: Cell) -> dict[str, dict[str, float]]:
        return {p: store[_key(*cell[:5], p)] for p in POLICIES if p != "hycache"}

    report(tally(store, cells, rows_of), knobs)
    return 0


def _alpha(store: Store, model: str, requests: int, name: str, capacity: int) -> float | None:
    """Marconi's alpha as its serial replay of the cell chose it, if there is one."""
    serial = store.get(_key(model, name, requests, "serial", capacity, "marconi"))
    return serial["alpha"] if serial and serial.get("alpha") else None


if __name__ == "__main__":
    sys.exit(main())
