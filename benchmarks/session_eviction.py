"""Session-aware against plain eviction, with sessions that end after an idle gap.

    python benchmarks/session_eviction.py [--workload agent] [--requests 200]
        [--model qwen3-next-80b-a3b] [--modes serial,engine] [--capacities 5,10,20,40]
        [--gaps none,30,10] [--set hycache.KNOB=VALUE ...]

One preset (``hycache``), capacities as percentages of the source's unlimited footprint. Per
(mode, capacity): the token hit rate with plain eviction (``hycache.session_aware=false``),
then with session-aware eviction for each idle gap (``none``: sessions never end, as before
sessions could end; seconds: ``SimulationConfig.session_idle_s``); in engine mode also TTFT p95.
"""

from __future__ import annotations

import argparse
import dataclasses

from hycache.cli.knobs import knob_overrides, parse_knob
from hycache.sim.cost import CostModel
from hycache.sim.hardware import hardware
from hycache.sim.metrics import PolicyResult
from hycache.sim.simulate import SimulationConfig, footprint_bytes, run_policy
from hycache.sim.workloads import generate
from hycache.spec.model import load_spec


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--workload", default="agent")
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--model", default="qwen3-next-80b-a3b")
    parser.add_argument("--modes", default="serial,engine")
    parser.add_argument("--capacities", default="5,10,20,40")
    parser.add_argument("--gaps", default="none,30,10")
    parser.add_argument("--set", action="append", default=[], metavar="PRESET.KNOB=VALUE")
    args = parser.parse_args()
    spec = load_spec(args.model)
    name, n = args.workload, args.requests

    def source():  # type: ignore[no-untyped-def]
        return generate(name, requests=n, seed=0)

    extra = knob_overrides(parse_knob(option) for option in args.set)
    base = SimulationConfig(spec, CostModel(spec, hardware("h200")), reject_oversized=True)
    footprint = footprint_bytes(base, source)
    gaps = [None if g == "none" else float(g) for g in args.gaps.split(",")]
    runs: list[tuple[str, bool, float | None]] = [("plain", False, None)]
    runs += [(f"aware/{'never' if g is None else f'{g:g}s'}", True, g) for g in gaps]
    header = "mode    cap  " + "  ".join(f"{label:>12}" for label, _, _ in runs)
    print(
        f"workload {name} ({n} requests, seed 0), {args.model}, footprint {footprint / 1e9:.2f} GB"
    )
    print("token hit rate (engine mode: / TTFT p95 s)")
    print(header)
    for mode in args.modes.split(","):
        for percent in args.capacities.split(","):
            capacity = int(footprint * float(percent) / 100)
            cells = []
            for _label, aware, gap in runs:
                knobs: dict[str, dict[str, object]] = {p: dict(v) for p, v in extra.items()}
                knobs.setdefault("hycache", {})["session_aware"] = aware
                config = dataclasses.replace(base, mode=mode, knobs=knobs, session_idle_s=gap)
                result: PolicyResult = run_policy(config, "hycache", capacity, source)
                if result.capacity_overrun_bytes:
                    raise SystemExit(f"capacity overrun in {mode} {percent}%")
                cell = f"{result.token_hit_rate:.4f}"
                if mode == "engine":
                    cell += f"/{result.ttft_p95_s:.2f}"
                cells.append(f"{cell:>12}")
            print(f"{mode:<7} {percent:>3}%  " + "  ".join(cells), flush=True)


if __name__ == "__main__":
    main()
