"""Ablation of `hycache`'s mechanisms on the evaluation cells: what does each one buy?

    python benchmarks/ablation.py [--seeds 1,2,3,4,5] [--modes serial,engine]
        [--capacities 5,10,20,40] [--requests 200] [--model qwen3-next-80b-a3b] [--jobs 1]
        [--results ablation.json] [--variants tune,free_room,...] [--set hycache.KNOB=VALUE]

Each variant turns one mechanism off (``VARIANTS``: ``--set hycache.KNOB=VALUE`` items, read
by ``hycache.cli.knobs``) and replays `hycache` on the evaluation cells of
``benchmarks/policy_matrix.py``: the six built-in workloads (``--requests`` each) at seeds
1-5, never the data hycache's rules were tuned on (seed 0 and the Mooncake traces), at each
capacity (percent of the source's unlimited footprint) and replay mode. ``--set`` items apply
to every variant, the full hycache included.

Per mode and variant it prints the mean and the minimum of the variant's token hit rate over
full hycache's, in engine mode the mean of its TTFT p95 over full hycache's, and in how many
cells its hit rate is higher (``better``) or lower (``worse``) by more than ``HIT_SLACK``.
A variant whose knob only acts on a running request (engine-style admission) is replayed in
engine mode only: a serial replay inserts every request at once.

``--results`` keeps every finished replay in a JSON file, keyed by the variant's knobs; a later
run reuses them. Cells run in ``--jobs`` local processes.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from hycache.cache.presets import KnobValue
from hycache.cli.knobs import add_knob_option, knob_overrides, parse_knob
from hycache.sim.simulate import run_policy
from hycache.sim.workloads import WORKLOADS
from policy_matrix import (
    HIT_SLACK,
    Source,
    Store,
    _config,
    _key,
    capacity_of,
    describe,
    load_store,
    measure_footprints,
    result_metrics,
    run_cells,
    split_sources,
)


@dataclass(frozen=True)
class Variant:
    """One mechanism turned off: its name, the ``hycache.KNOB=VALUE`` items doing it, and
    whether it only acts in engine mode."""

    name: str
    settings: tuple[str, ...]
    engine_only: bool = False

    def knobs(self) -> dict[str, KnobValue]:
        return knob_overrides(parse_knob(s) for s in self.settings).get("hycache", {})


FULL = Variant("full", ())
VARIANTS = (
    Variant("tune", ("hycache.tune=false",)),
    Variant("tune_clock", ("hycache.tune_clock=false",)),
    # the default's own exponent, set: the bootstrap leaves the value-led candidate out
    Variant("value_led", ("hycache.exponent=0.5",)),
    Variant("lineage", ("hycache.tune_lineage=false",)),
    Variant("returns", ("hycache.bootstrap_returns=false",)),
    Variant("adaptive", ("hycache.adaptive=false",)),
    Variant("free_room", ("hycache.free_room=false",)),
    Variant("keep_best", ("hycache.keep_best=false",)),
    Variant("proven_first", ("hycache.proven_first=false",)),
    Variant("skip_first_step", ("hycache.skip_first_step=false",)),
    Variant("decode_room", ("hycache.decode_room=false",), engine_only=True),
    Variant("learn_grid", ("hycache.learn_grid=false",)),
    Variant("tail", ("hycache.tail=false",)),
    Variant("tail_rule", ("hycache.tail_quantile=0.9",)),
    Variant("value_eviction", ("hycache.eviction=gds",)),
    Variant("by_reason", ("hycache.by_reason=false",)),
    Variant("superseded", ("hycache.superseded_weight=1",)),
    Variant("learn_superseded", ("hycache.learn_superseded=false",)),
    Variant("dead_weight", ("hycache.dead_weight=1",)),
    Variant("exponent", ("hycache.exponent=1",)),
    Variant("aging_horizon", ("hycache.aging_horizon=0",)),
    Variant("learn_aging", ("hycache.learn_aging=false",)),
    Variant("pin_reused_guesses", ("hycache.pin_reused_guesses=false",), engine_only=True),
    Variant("strict_guess_pins", ("hycache.strict_guess_pins=false",)),
    Variant("read_matched_kv", ("hycache.read_matched_kv=false",), engine_only=True),
    Variant(
        "reserve_checkpoint_slot", ("hycache.reserve_checkpoint_slot=false",), engine_only=True
    ),
)

#: a cell: model, source label, requests, mode, capacity bytes, knobs of the variant (all set)
Cell = tuple[str, str, int, str, int, tuple[tuple[str, KnobValue], ...]]


def _cell(cell: Cell) -> tuple[str, dict[str, float]]:
    model, name, requests, mode, capacity, knobs = cell
    config = dataclasses.replace(_config(model, mode), knobs={"hycache": dict(knobs)})
    result = run_policy(config, "hycache", capacity, Source(name, requests))
    return name, result_metrics(result)


def _cell_key(cell: Cell) -> str:
    model, name, requests, mode, capacity, knobs = cell
    setting = ",".join(f"{k}={v}" for k, v in knobs) or "default"
    return _key(model, name, requests, mode, capacity, "hycache", setting)


@dataclass
class Tally:
    """One variant's comparison to full hycache over the cells of one mode."""

    hit_ratios: list[float] = dataclasses.field(default_factory=list)
    p95_ratios: list[float] = dataclasses.field(default_factory=list)
    better: int = 0
    worse: int = 0

    def add(self, variant: dict[str, float], full: dict[str, float]) -> None:
        hit, base = variant["token_hit_rate"], full["token_hit_rate"]
        self.hit_ratios.append(hit / base if base else 1.0)
        p95, base_p95 = variant["ttft_p95_s"], full["ttft_p95_s"]
        self.p95_ratios.append(p95 / base_p95 if base_p95 else 1.0)
        self.better += hit > base + HIT_SLACK
        self.worse += hit < base - HIT_SLACK


def report(
    store: Store,
    cells: dict[tuple[str, str], list[Cell]],
    variants: list[Variant],
    modes: list[str],
) -> None:
    """Print full hycache's mean hit rate (and TTFT p95) per mode, then the table: one row per
    variant and mode (``cells[(variant, mode)]``, full hycache's under ``("full", mode)`` in
    the same order)."""
    for mode in modes:
        full = [store[_cell_key(c)] for c in cells.get(("full", mode), [])]
        if full:
            hit = sum(r["token_hit_rate"] for r in full) / len(full)
            p95 = sum(r["ttft_p95_s"] for r in full) / len(full)
            print(f"full hycache, {mode}: {len(full)} cells, mean hit {hit:.4f}, p95 {p95:.3f}s")
    print(
        f"{'variant':24} {'mode':6} {'cells':>5} {'hit ratio':>9} {'min':>6} {'p95 ratio':>9} "
        f"{'better':>6} {'worse':>6}"
    )
    for variant in variants:
        if variant is FULL:
            continue
        for mode in modes:
            mine = cells.get((variant.name, mode), [])
            if not mine:
                continue
            tally = Tally()
            for cell, full in zip(mine, cells[("full", mode)], strict=True):
                tally.add(store[_cell_key(cell)], store[_cell_key(full)])
            ratios = tally.hit_ratios
            p95 = (
                f"{sum(tally.p95_ratios) / len(tally.p95_ratios):9.3f}" if mode != "serial" else ""
            )
            print(
                f"{variant.name:24} {mode:6} {len(ratios):5d} {sum(ratios) / len(ratios):9.3f} "
                f"{min(ratios):6.3f} {p95:>9} {tally.better:6d} {tally.worse:6d}"
            )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sources", default=",".join(WORKLOADS), help="built-in workloads")
    parser.add_argument("--seeds", default="1,2,3,4,5", help="workload seeds (evaluation: not 0)")
    parser.add_argument("--modes", default="serial,engine")
    parser.add_argument("--capacities", default="5,10,20,40", help="percent of the footprint")
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--model", default="qwen3-next-80b-a3b")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--results", default="ablation.json")
    names = ",".join(v.name for v in VARIANTS)
    parser.add_argument("--variants", default=names, help=f"mechanisms to turn off: {names}")
    add_knob_option(parser)
    args = parser.parse_args()
    base = knob_overrides(args.knobs)
    if set(base) - {"hycache"}:
        raise SystemExit("--set: only hycache knobs apply")
    known = {v.name: v for v in VARIANTS}
    chosen = [name for name in args.variants.split(",") if name]
    unknown = [name for name in chosen if name not in known]
    if unknown:
        raise SystemExit(f"unknown variant {unknown[0]!r}; known: {names}")
    variants = [FULL, *(known[name] for name in chosen)]
    seeds = [int(x) for x in args.seeds.split(",") if x]
    if 0 in seeds:
        print("warning: seed 0 tuned hycache; it is not an evaluation cell", file=sys.stderr)
    workloads = [s for s in args.sources.split(",") if s]
    sources = split_sources(workloads, "eval", seeds)
    modes = [m for m in args.modes.split(",") if m]
    percents = [float(c) for c in args.capacities.split(",") if c]
    store, save = load_store(Path(args.results))
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        measure_footprints(pool, store, args.model, sources, args.requests)
        save()
        cells: dict[tuple[str, str], list[Cell]] = {}
        for variant in variants:
            knobs = tuple(sorted({**base.get("hycache", {}), **variant.knobs()}.items()))
            for mode in modes:
                if variant.engine_only and mode == "serial":
                    continue
                cells[(variant.name, mode)] = [
                    (
                        args.model,
                        name,
                        args.requests,
                        mode,
                        capacity_of(store, args.model, name, args.requests, pct),
                        knobs,
                    )
                    for name in sources
                    for pct in percents
                ]
        todo: dict[str, Cell] = {}  # variants that set a knob to its value share cells
        for group in cells.values():
            todo.update((_cell_key(c), c) for c in group if _cell_key(c) not in store)

        def done(cell: Cell, metrics: dict[str, float]) -> str:
            store[_cell_key(cell)] = metrics
            save()
            knobs = ",".join(f"{k}={v}" for k, v in cell[5]) or "full"
            return f"{cell[1]} {cell[3]} {cell[4] / 1e9:.2f}GB {knobs}: {describe(metrics)}"

        run_cells(pool, _cell, list(todo.values()), "cells", done)
    report(store, cells, variants, modes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
