"""Simulator throughput on the Mooncake conversation trace (12,031 requests), per preset.

    python benchmarks/simulate_speed.py [--mode serial|engine|both] [--capacity 200GB]
                                        [--model qwen3-next-80b-a3b] [--policy ...]
                                        [--gc-young none,700,10000,50000]

Prints, per preset and mode, the wall time of the replay (the trace is parsed once, before
the timings, into run keys, ``hycache.sim.parsed``; ``--expanded`` replays 512 ids per block
instead, as before; the one-time tuning excluded: Marconi's alpha is fixed at 1.0 and
hycache's self-tuning is off, so it runs its default value eviction) next to the targets
(15 s serial, 60 s engine) and the token hit rate it measured. ``--tuned`` adds a row for
hycache with its self-tuning, whose bootstrap replays are then included in the time.

``--gc-young`` replays each row once per value of ``SimulationConfig.gc_young`` (the young
generation's collection threshold during a replay, ``hycache.sim.garbage``; ``none`` is the
interpreter's own pace) and prints each one's time as a ratio to the first value's. The
results do not depend on it (the script checks that every value gives the same hit rate).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from hycache.cache.presets import KnobValue
from hycache.cli.sizes import parse_size
from hycache.sim.cost import CostModel
from hycache.sim.garbage import YOUNG_THRESHOLD
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
    parser.add_argument(
        "--gc-young",
        type=gc_values,
        default=[YOUNG_THRESHOLD],
        help="comma-separated young-generation thresholds ('none': the interpreter's own)",
    )
    args = parser.parse_args()
    spec = load_spec(args.model)
    cost = CostModel(spec, hardware("h200"))
    capacity = parse_size(args.capacity)
    modes = ("serial", "engine") if args.mode == "both" else (args.mode,)
    source = load_trace(args.trace).with_run_keys(not args.expanded)
    print(
        f"{'policy':8} {'mode':7} {'gc_young':>8} {'wall_s':>8} {'target_s':>8} {'ratio':>6} "
        f"{'vs_first':>8} {'token_hit':>9}"
    )
    for mode in modes:
        fixed = {"marconi": {"alpha": 1.0}, "hycache": {"tune": False}}
        runs: list[tuple[str, str, dict[str, dict[str, KnobValue]] | None]] = [
            (p, p, fixed) for p in args.policy.split(",")
        ]
        if args.tuned:
            runs.append(("hycache", "hyc+tune", None))
        for policy, label, knobs in runs:
            first_wall = first_hit = None
            for young in args.gc_young:
                config = SimulationConfig(
                    spec, cost, mode=mode, knobs=knobs, reject_oversized=True, gc_young=young
                )
                start = time.perf_counter()
                result = run_policy(config, policy, capacity, source)
                wall = time.perf_counter() - start
                if first_wall is None:
                    first_wall, first_hit = wall, result.token_hit_rate
                elif result.token_hit_rate != first_hit:
                    raise SystemExit(f"{label} {mode}: gc_young={young} changed the hit rate")
                target = TARGET_S[mode]
                print(
                    f"{label:8} {mode:7} {str(young).lower():>8} {wall:8.1f} {target:8.1f} "
                    f"{wall / target:6.2f} {wall / first_wall:8.2f} {result.token_hit_rate:9.4f}",
                    flush=True,
                )


def gc_values(text: str) -> list[int | None]:
    """``none,700,50000`` as [None, 700, 50000]."""
    values: list[int | None] = []
    for item in text.split(","):
        item = item.strip().lower()
        if item == "none":
            values.append(None)
        elif item.isdigit() and int(item) >= 1:
            values.append(int(item))
        else:
            raise argparse.ArgumentTypeError(f"{item!r} is neither 'none' nor an integer >= 1")
    return values


if __name__ == "__main__":
    main()
