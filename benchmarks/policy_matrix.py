"""Every preset on every source, capacity and replay mode: does `hycache` hold its bar?

    python benchmarks/policy_matrix.py [--sources chat,agent,...,mooncake_conversation]
        [--modes serial,engine] [--capacities 5,10,20,40] [--requests 200]
        [--model qwen3-next-80b-a3b] [--jobs 2] [--results matrix.json] [--rerun hycache]
        [--policies vllm,sglang,marconi] [--ray | --ray-address ADDR] [--html matrix.html]
        [--split eval|tune] [--seeds 1,2,3,4,5]

Sources: the six built-in workloads (``--requests`` each) and the two Mooncake traces in
``data/traces``, split so that no cell that tuned ``hycache`` judges it (``--split``):

* ``eval`` (default): the workloads at seeds 1-5 (``--seeds``), the second half of each Mooncake
  trace (its requests from ``len // 2`` on, at their own arrival times, on an empty cache);
* ``tune``: the workloads at seed 0 and the first half of each Mooncake trace: the data
  ``hycache``'s rules were chosen on.

A cell is labelled ``workload:sN`` or ``trace:h1`` / ``trace:h2``. Capacities are percentages
of each source's unlimited footprint (``hycache.sim.simulate.footprint_bytes``). For each
cell (source, mode, capacity) it prints every preset's token hit rate and, in engine mode,
its TTFT p95, then whether `hycache` holds against the best other preset on hit rate (``hit``:
at least its rate minus ``HIT_SLACK``) and on TTFT p95 (``p95``: at most its p95 times
``P95_SLACK``), and the ratio of hycache's number to the best other's; then, per mode, the
mean and the minimum of those ratios over the cells.

``--results`` keeps every finished replay in a JSON file; a later run reuses them, except for
the presets named by ``--rerun`` (useful while tuning one policy: the others do not change).
``--html`` writes the table as a heat map of hycache's hit-rate ratio to the best other preset
(``hycache.sim.heatmap``; plotly, the 'sim' extra), one row per source and mode.

Cells run in ``--jobs`` local processes, or as Ray tasks with ``--ray`` (a local ``ray.init()``)
or ``--ray-address`` (an existing cluster; the 'ray' extra). A cell's result does not depend on
where it runs. The Mooncake traces are parsed once and kept in the parsed-trace cache
(``hycache.sim.trace_cache``), so every process loads them in milliseconds.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from collections.abc import Callable
from concurrent.futures import Executor, Future, ProcessPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from tqdm import tqdm

from hycache.cache.presets import KnobValue
from hycache.cli.knobs import add_knob_option, knob_overrides
from hycache.sim.cost import CostModel
from hycache.sim.hardware import hardware
from hycache.sim.metrics import PolicyResult
from hycache.sim.simulate import SimulationConfig, footprint_bytes, run_policy
from hycache.sim.trace_cache import default_cache_dir, load_trace
from hycache.sim.workloads import WORKLOADS, generate
from hycache.spec.model import load_spec

TRACES = Path(__file__).resolve().parents[1] / "data" / "traces"
MOONCAKE = ("mooncake_conversation", "mooncake_synthetic")
POLICIES = ("vllm", "sglang", "marconi", "hycache")


#: the bar of the evaluation: hycache's hit rate may trail the best other preset's by this
#: much, its TTFT p95 exceed the best other's by this factor
HIT_SLACK = 0.002
P95_SLACK = 1.02


def split_sources(names: list[str], split: str, seeds: list[int]) -> list[str]:
    """The labelled sources of ``split`` (module docstring)."""
    if split not in ("eval", "tune"):
        raise SystemExit(f"--split must be eval or tune, got {split!r}")
    labels: list[str] = []
    for name in names:
        if name in MOONCAKE:
            labels.append(f"{name}:h2" if split == "eval" else f"{name}:h1")
        else:
            labels.extend(f"{name}:s{seed}" for seed in (seeds if split == "eval" else [0]))
    return labels


class Source:
    """A picklable, re-iterable request source named by its label (``chat:s3``, ``...:h2``)."""

    def __init__(self, label: str, requests: int) -> None:
        self.label = label
        self.requests = requests
        self.name = label.partition(":")[0]
        if self.name not in (*WORKLOADS, *MOONCAKE):
            raise SystemExit(f"unknown source {self.name!r}")

    def __call__(self):  # type: ignore[no-untyped-def]
        _, _, part = self.label.partition(":")
        if self.name in MOONCAKE:
            trace = load_trace(TRACES / f"{self.name}.jsonl.gz", cache_dir=default_cache_dir())
            half = len(trace) // 2
            if part == "h1":
                return trace.window(0, half)
            if part == "h2":
                return trace.window(half, len(trace))
            return trace()
        seed = int(part[1:]) if part.startswith("s") else 0
        return generate(self.name, requests=self.requests, seed=seed)


KNOBS: dict[str, dict[str, KnobValue]] = {}


def _config(model: str, mode: str) -> SimulationConfig:
    spec = load_spec(model)
    return SimulationConfig(
        spec,
        CostModel(spec, hardware("h200")),
        mode=mode,
        progress=False,
        reject_oversized=True,
        knobs=KNOBS,
    )


def _footprint(args: tuple[str, str, int]) -> tuple[str, int]:
    model, name, requests = args
    return name, footprint_bytes(_config(model, "serial"), Source(name, requests))


def _cell(
    args: tuple[str, str, int, str, int, str, float | None],
) -> tuple[str, dict[str, float]]:
    model, name, requests, mode, capacity, policy, alpha = args
    config = _config(model, mode)
    if alpha is not None:  # Marconi's bootstrap depends on the source and capacity only
        config = dataclasses.replace(config, knobs={**KNOBS, "marconi": {"alpha": alpha}})
    result = run_policy(config, policy, capacity, Source(name, requests))
    alpha = float(result.knobs.get("alpha") or 0.0) if policy == "marconi" else 0.0
    return name, {"alpha": alpha, **result_metrics(result)}


def result_metrics(result: PolicyResult) -> dict[str, float]:
    """What the results file keeps of one replay."""
    return {
        "token_hit_rate": result.token_hit_rate,
        "kv_hit_rate": result.kv_hit_rate,
        "ttft_p50_s": result.ttft_p50_s,
        "ttft_p95_s": result.ttft_p95_s,
        "capacity_overrun_bytes": float(result.capacity_overrun_bytes),
        "wall_s": result.wall_s,
    }


Store = dict[str, dict[str, float]]
Cell = TypeVar("Cell")


def load_store(path: Path) -> tuple[Store, Callable[[], None]]:
    """The results file's replays (empty if it does not exist yet) and a function saving them."""
    store: Store = json.loads(path.read_text()) if path.exists() else {}

    def save() -> None:
        path.write_text(json.dumps(store, indent=1, sort_keys=True))

    return store, save


def measure_footprints(
    pool: Executor, store: Store, model: str, sources: list[str], requests: int
) -> None:
    """Each source's unlimited footprint into ``store`` (those not there yet)."""
    todo = [(model, s, requests) for s in sources]
    todo = [t for t in todo if _key("footprint", t[0], t[1], t[2]) not in store]
    for name, footprint in pool.map(_footprint, todo):
        store[_key("footprint", model, name, requests)] = {"bytes": footprint}


def capacity_of(store: Store, model: str, name: str, requests: int, pct: float) -> int:
    """``pct`` percent of the source's footprint, in bytes."""
    footprint = int(store[_key("footprint", model, name, requests)]["bytes"])
    return max(1, int(footprint * pct / 100))


def run_cells(
    pool: Executor,
    fn: Callable[[Cell], tuple[str, dict[str, float]]],
    cells: list[Cell],
    desc: str,
    done: Callable[[Cell, dict[str, float]], str],
) -> None:
    """Run ``fn`` on every cell in ``pool`` with a progress bar; ``done(cell, metrics)`` stores
    a finished cell and returns the line to print for it."""
    futures = {pool.submit(fn, cell): cell for cell in cells}
    bar = tqdm(total=len(cells), desc=desc, unit="cell", file=sys.stderr)
    for future, cell in futures.items():
        _name, metrics = future.result()
        bar.write(done(cell, metrics), file=sys.stderr)
        bar.update(1)
    bar.close()


class RayExecutor(Executor):
    """Cells as Ray tasks (``address`` None: a local Ray, one task per core)."""

    def __init__(self, address: str | None) -> None:
        import ray

        self.ray = ray
        if not ray.is_initialized():
            ray.init(address=address, include_dashboard=False, log_to_driver=False)

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        return self.ray.remote(num_cpus=1)(fn).remote(*args, **kwargs).future()  # type: ignore[no-any-return]


def _key(*parts: object) -> str:
    return "|".join(str(p) for p in parts)


def add_cell_options(parser: argparse.ArgumentParser, *, split: str = "eval") -> None:
    """The options naming the cells (sources, split, seeds, capacities, requests, model) and
    ``--jobs``; ``split``: the default split."""
    other = "tune" if split == "eval" else "eval"
    parser.add_argument("--sources", default=",".join((*WORKLOADS, *MOONCAKE)))
    parser.add_argument("--split", default=split, help=f"{split} (default) or {other}: which cells")
    parser.add_argument("--seeds", default="1,2,3,4,5", help="--split eval: workload seeds")
    parser.add_argument("--capacities", default="5,10,20,40", help="percent of the footprint")
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--model", default="qwen3-next-80b-a3b")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_cell_options(parser)
    parser.add_argument("--modes", default="serial,engine")
    parser.add_argument("--ray", action="store_true", help="run the cells on a local Ray")
    parser.add_argument("--ray-address", help="run the cells on this Ray cluster")
    parser.add_argument("--results", default="policy_matrix.json")
    parser.add_argument("--rerun", default="", help="presets to replay again, e.g. hycache")
    parser.add_argument("--html", help="write the hit-rate heat map (a self-contained page)")
    parser.add_argument(
        "--policies", default=",".join(POLICIES), help="presets to replay (the table needs all)"
    )
    add_knob_option(parser)
    args = parser.parse_args()
    KNOBS.update(knob_overrides(args.knobs))
    names = [s for s in args.sources.split(",") if s]
    sources = split_sources(names, args.split, [int(x) for x in args.seeds.split(",") if x])
    modes = [m for m in args.modes.split(",") if m]
    percents = [float(c) for c in args.capacities.split(",") if c]
    rerun = {p for p in args.rerun.split(",") if p}
    chosen = [p for p in args.policies.split(",") if p]
    store, save = load_store(Path(args.results))
    pool: Executor
    if args.ray or args.ray_address:
        pool = RayExecutor(args.ray_address)
    else:
        pool = ProcessPoolExecutor(max_workers=args.jobs)
    with pool:
        measure_footprints(pool, store, args.model, sources, args.requests)
        save()
        for phase in modes:  # serial first: engine-mode Marconi reuses its alpha
            cells: list[tuple[str, str, int, str, int, str, float | None]] = []
            for name in sources:
                for pct in percents:
                    capacity = capacity_of(store, args.model, name, args.requests, pct)
                    for policy in chosen:
                        key = _key(args.model, name, args.requests, phase, capacity, policy)
                        if key in store and policy not in rerun:
                            continue
                        alpha = None
                        serial = store.get(
                            _key(args.model, name, args.requests, "serial", capacity, policy)
                        )
                        if policy == "marconi" and serial and serial.get("alpha"):
                            alpha = serial["alpha"]
                        cells.append(
                            (args.model, name, args.requests, phase, capacity, policy, alpha)
                        )
            # the longest first: Mooncake replays and Marconi's bootstrap dominate
            cells.sort(key=lambda c: (c[1].split(":")[0] not in MOONCAKE, c[5] != "marconi"))

            def done(
                cell: tuple[str, str, int, str, int, str, float | None], metrics: dict[str, float]
            ) -> str:
                store[_key(*cell[:6])] = metrics
                save()
                return f"{cell[1]} {cell[3]} {cell[4] / 1e9:.2f}GB {cell[5]}: {describe(metrics)}"

            run_cells(pool, _cell, cells, f"{phase} cells", done)
    if set(chosen) != set(POLICIES):
        return 0  # the table compares all four presets
    heat: dict[tuple[str, str], dict[str, float]] = {}
    status = report(store, args.model, args.requests, sources, modes, percents, heat)
    if args.html:
        write_heatmap(heat, args.model, args.requests, Path(args.html))
    return status


def describe(metrics: dict[str, float]) -> str:
    """One finished replay in a progress line."""
    return (
        f"hit {metrics['token_hit_rate']:.4f} p95 {metrics['ttft_p95_s']:.3f}s "
        f"({metrics['wall_s']:.1f}s)"
    )


def write_heatmap(
    cells: dict[tuple[str, str], dict[str, float]], model: str, requests: int, out: Path
) -> None:
    """The table's cells (``report`` fills ``cells``) as ``hycache.sim.heatmap.matrix_heatmap``:
    hycache's token hit rate over the best other preset's, one row per source and mode."""
    from hycache.sim.heatmap import matrix_heatmap

    note = f"{model}, {requests} requests per workload; capacities: shares of each footprint."
    title = "Policy matrix: hycache vs the best other preset"
    out.write_text(matrix_heatmap(cells, title=title, notes=[note]))
    print(f"heat map: {out}", file=sys.stderr)


def judge(rows: dict[str, dict[str, float]], mode: str) -> tuple[bool, bool, float, float]:
    """One cell's verdict, ``rows`` every preset's replay by name: whether hycache holds the
    bar on hit rate and on TTFT p95 (serial: always), and its hit-rate and p95 ratios to the
    best other preset's."""
    hits = {p: r["token_hit_rate"] for p, r in rows.items()}
    p95 = {p: r["ttft_p95_s"] for p, r in rows.items()}
    best_hit = max(v for p, v in hits.items() if p != "hycache")
    best_p95 = min(v for p, v in p95.items() if p != "hycache")
    hit_ok = hits["hycache"] >= best_hit - HIT_SLACK
    p95_ok = mode == "serial" or p95["hycache"] <= best_p95 * P95_SLACK
    hit_ratio = hits["hycache"] / best_hit if best_hit else 1.0
    p95_ratio = p95["hycache"] / best_p95 if best_p95 else 1.0
    return hit_ok, p95_ok, hit_ratio, p95_ratio


def report(
    store: dict[str, dict[str, float]],
    model: str,
    requests: int,
    sources: list[str],
    modes: list[str],
    percents: list[float],
    heat: dict[tuple[str, str], dict[str, float]] | None = None,
) -> int:
    """Print the table; ``heat`` (when given) receives each row's hit rates by (source /
    mode, capacity) for ``write_heatmap``."""
    header = f"{'source':26} {'mode':6} {'cap':>4} " + " ".join(f"{p:>8}" for p in POLICIES)
    print(header + "   hit  ratio " + " ".join(f"{p[:6]:>7}" for p in POLICIES) + "   p95  ratio")
    held = total = 0
    ratios: dict[str, list[tuple[float, float]]] = {mode: [] for mode in modes}
    for name in sources:
        for mode in modes:
            for pct in percents:
                capacity = capacity_of(store, model, name, requests, pct)
                rows = {p: store[_key(model, name, requests, mode, capacity, p)] for p in POLICIES}
                hits = {p: r["token_hit_rate"] for p, r in rows.items()}
                if heat is not None:
                    heat[(f"{name} / {mode}", f"{pct:g}%")] = hits
                p95 = {p: r["ttft_p95_s"] for p, r in rows.items()}
                overrun = max(r["capacity_overrun_bytes"] for r in rows.values())
                if overrun:
                    raise SystemExit(f"capacity overrun in {name} {mode} {pct}%")
                hit_ok, p95_ok, hit_ratio, p95_ratio = judge(rows, mode)
                held += hit_ok + p95_ok
                total += 2
                ratios[mode].append((hit_ratio, p95_ratio))
                print(
                    f"{name:26} {mode:6} {pct:>3.0f}% "
                    + " ".join(f"{hits[p]:8.4f}" for p in POLICIES)
                    + f"  {'ok ' if hit_ok else 'NO '} {hit_ratio:5.3f} "
                    + " ".join(f"{p95[p]:7.3f}" for p in POLICIES)
                    + f"  {'ok ' if p95_ok else 'NO '} {p95_ratio:5.3f}"
                )
    for mode, pairs in ratios.items():
        if not pairs:
            continue
        hit_r = [h for h, _ in pairs]
        line = (
            f"{mode}: {len(pairs)} cells, hit ratio to the best other preset "
            f"mean {sum(hit_r) / len(hit_r):.3f} min {min(hit_r):.3f}"
        )
        if mode != "serial":
            p95_r = [q for _, q in pairs]
            line += f"; TTFT p95 ratio mean {sum(p95_r) / len(p95_r):.3f} max {max(p95_r):.3f}"
        print(line)
    print(
        f"hycache holds {held} of {total} comparisons (hit >= best - {HIT_SLACK}, "
        f"p95 <= best x {P95_SLACK}; serial TTFT counted as held)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
