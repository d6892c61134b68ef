"""Sliding-window models: every preset's hit rate on a workload (before/after windows slide).

    python benchmarks/swa_windows.py [--workload chat] [--requests 200]
        [--model data/configs/gemma3/config.json] [--modes serial,engine]
        [--capacities 5,10,20,40] [--footprint-gb X]

The default model is Gemma 3 27B's published config (62 layers, one full-attention layer in
six, sliding window 1024, 16 KV heads of 128, bfloat16); ``--model`` takes what ``load_spec``
takes. Capacities are percentages of the source's unlimited
footprint (``footprint_bytes``), or of ``--footprint-gb`` when given, so that runs of two code
versions compare at the same byte capacities. Per (mode, capacity): each preset's token hit
rate, in engine mode also its TTFT p95.
"""

from __future__ import annotations

import argparse
import dataclasses

from hycache.sim.cost import CostModel
from hycache.sim.hardware import hardware
from hycache.sim.simulate import SimulationConfig, footprint_bytes, run_policy
from hycache.sim.workloads import generate
from hycache.spec.model import load_spec

PRESETS = ("vllm", "sglang", "marconi", "hycache")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--workload", default="chat")
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--model", default="data/configs/gemma3/config.json")
    parser.add_argument("--modes", default="serial,engine")
    parser.add_argument("--capacities", default="5,10,20,40")
    parser.add_argument("--footprint-gb", type=float)
    args = parser.parse_args()
    spec = load_spec(args.model)
    name, n = args.workload, args.requests

    def source():  # type: ignore[no-untyped-def]
        return generate(name, requests=n, seed=0)

    base = SimulationConfig(spec, CostModel(spec, hardware("h200")), reject_oversized=True)
    if args.footprint_gb is not None:
        footprint = int(args.footprint_gb * 1e9)
    else:
        footprint = footprint_bytes(base, source)
    print(
        f"workload {name} ({n} requests, seed 0), {spec.name}, footprint {footprint / 1e9:.2f} GB"
    )
    print("token hit rate (engine mode: / TTFT p95 s)")
    print("mode    cap  " + "  ".join(f"{p:>13}" for p in PRESETS))
    for mode in args.modes.split(","):
        config = dataclasses.replace(base, mode=mode)
        for percent in args.capacities.split(","):
            capacity = int(footprint * float(percent) / 100)
            cells = []
            for preset in PRESETS:
                result = run_policy(config, preset, capacity, source)
                if result.capacity_overrun_bytes:
                    raise SystemExit(f"capacity overrun: {preset} {mode} {percent}%")
                cell = f"{result.token_hit_rate:.4f}"
                if mode == "engine":
                    cell += f"/{result.ttft_p95_s:.2f}"
                cells.append(f"{cell:>13}")
            print(f"{mode:<7} {percent:>3}%  " + "  ".join(cells), flush=True)


if __name__ == "__main__":
    main()
