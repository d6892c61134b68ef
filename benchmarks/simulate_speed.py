"""Simulator throughput on the Mooncake conversation trace (12,031 requests), per preset.

    python benchmarks/simulate_speed.py [--mode serial|engine|both] [--capacity 200GB]
                                        [--model qwen3-next-80b-a3b] [--policy ...]

Prints, per preset and mode, the wall time of the replay (the trace is parsed once, before
the timings, into run keys, ``hycache.sim.parsed``; ``--expanded`` replays 512 ids per block
instead, as before; the one-time tuning excluded: Marconi's alpha is fixed at 1.0 and
hycache's self-tuning is off, so it runs its default value eviction) next to the targets
(15 s serial, 60 s engine) and the token hit rate it measured. ``--tuned`` adds a row for
hycache with its self-tuning, whose bootstrap replays are then included in the time.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from hycache.cli.sizes import parse_size
from hycache.sim.cost import CostModel
from hycache.sim.hardware import hardware
from hycache.sim.simulate import SimulationConfig, run_policy
from hycache.sim.trace_cache import load_trace
from hycache.spec.model import load_spec

TRACE = Path(__file__).resolve().parents[1] / "data/traces/mooncake_conversation.jsonl.gz"
TARGET_S = {"serial": 15.0, "engine": 60.0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trace", default=str(TRACE))
    parser.add_argument("--mode", choices=("serial", "engine", "both"), default="both")
    parser.add_argument("--capacity", default="200GB")
    parser.add_argument("--model", default="qwen3-next-80b-a3b")
    parser.add_argument("--policy", default="vllm,sglang,marconi,hycache")
    parser.add_argument("--tuned", action="store_true", help="also time hycache with tuning")
    parser.add_argument("--expanded", action="store_true", help="keys of ids, not runs")
    args = parser.parse_args()
    spec = load_spec(args.model)
    cost = CostModel(spec, hardware("h200"))
    capacity = parse_size(args.capacity)
    modes = ("serial", "engine") if args.mode == "both" else (args.mode,)
    source = load_trace(args.trace).with_run_keys(not args.expanded)
    print(f"{'policy':8} {'mode':7} {'wall_s':>8} {'target_s':>8} {'ratio':>6} {'token_hit':>9}")
    for mode in modes:
        fixed = {"marconi": {"alpha": 1.0}, "hycache": {"tune": False}}
        config = SimulationConfig(spec, cost, mode=mode, knobs=fixed, reject_oversized=True)
        runs = [(p, p, config) for p in args.policy.split(",")]
        if args.tuned:
            tuned = SimulationConfig(spec, cost, mode=mode, reject_oversized=True)
            runs.append(("hycache", "hyc+tune", tuned))
        for policy, label, run_config in runs:
            start = time.perf_counter()
            result = run_policy(run_config, policy, capacity, source)
            wall = time.perf_counter() - start
            target = TARGET_S[mode]
            print(
                f"{label:8} {mode:7} {wall:8.1f} {target:8.1f} {wall / target:6.2f} "
                f"{result.token_hit_rate:9.4f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
