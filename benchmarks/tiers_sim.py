"""Tiers in the simulator: the device alone vs the device with host and storage beneath it.

    python benchmarks/tiers_sim.py [--mode serial|engine] [--requests N] [--policy ...]
                                   [--capacity 5%] [--host 20%] [--storage unlimited]

Mooncake conversation trace, qwen3-next-80b-a3b, H200 cost model. Per preset: token hit rate,
TTFT p50/p95 and wall time without tiers and with them, reused tokens by the tier their KV
came from, bytes moved, and every tier's overrun (must be 0). The presets use the tiers as
their systems do today (docs/presets.md); ``--fixed`` turns every preset's fix knobs on.
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from collections.abc import Iterator
from pathlib import Path

from hycache.cache.tierconfig import TierConfig
from hycache.cli.sizes import Size, size_arg
from hycache.sim.cost import CostModel
from hycache.sim.hardware import hardware
from hycache.sim.metrics import PolicyResult
from hycache.sim.request import Request
from hycache.sim.simulate import SimulationConfig, footprint_bytes, run_policy
from hycache.sim.trace import read_trace
from hycache.spec.model import load_spec

TRACE = Path(__file__).resolve().parents[1] / "data/traces/mooncake_conversation.jsonl.gz"
FIXES: dict[str, dict[str, object]] = {
    "vllm": {"offload_states": True},
    "lmcache": {"store_states": True},
    "sglang": {"hicache_fix_33713": True, "hicache_fix_40680": True, "hicache_fix_39851": True},
}


def _line(label: str, r: PolicyResult, wall: float) -> str:
    return f"{label:16} {r.token_hit_rate:9.4f} {r.ttft_p50_s:8.3f} {r.ttft_p95_s:8.3f} {wall:7.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trace", default=str(TRACE))
    parser.add_argument("--mode", choices=("serial", "engine"), default="serial")
    parser.add_argument("--requests", type=int, default=None, help="first N requests only")
    parser.add_argument("--model", default="qwen3-next-80b-a3b")
    parser.add_argument("--policy", default="vllm,lmcache,sglang,marconi,hycache")
    parser.add_argument("--capacity", type=size_arg, default=size_arg("5%"))
    parser.add_argument("--host", type=size_arg, default=size_arg("20%"))
    parser.add_argument("--storage", default="unlimited")
    parser.add_argument("--fixed", action="store_true", help="every preset's fix knobs on")
    args = parser.parse_args()
    spec = load_spec(args.model)
    knobs: dict[str, dict[str, object]] = {"marconi": {"alpha": 1.0}}
    if args.fixed:
        knobs.update(FIXES)
    config = SimulationConfig(
        spec, CostModel(spec, hardware("h200")), mode=args.mode, knobs=knobs, reject_oversized=True
    )

    def source() -> Iterator[Request]:
        return read_trace(args.trace, limit=args.requests)

    footprint = footprint_bytes(config, source)
    device = args.capacity.resolve(footprint)
    storage = None if args.storage == "unlimited" else size_arg(args.storage)
    tiers = TierConfig(
        args.host.resolve(footprint),
        storage="disk",
        storage_bytes=storage.resolve(footprint) if isinstance(storage, Size) else None,
    )
    tiered = dataclasses.replace(config, tiers=tiers)
    print(
        f"{args.mode} mode, device {device / 1e9:.1f} GB, host {tiers.host_bytes / 1e9:.1f} GB, "
        f"storage {args.storage}; footprint {footprint / 1e9:.1f} GB"
    )
    print(f"{'policy':16} {'token_hit':>9} {'ttft_p50':>8} {'ttft_p95':>8} {'wall_s':>7}  tiers")
    for policy in args.policy.split(","):
        for label, run_config in ((policy, config), (f"{policy}+tiers", tiered)):
            start = time.perf_counter()
            r = run_policy(run_config, policy, device, source)
            line = _line(label, r, time.perf_counter() - start)
            if r.tiers is not None:
                t = r.tiers
                line += (
                    f"  hits {t['tier_hit_tokens']}  moved {t['bytes_moved']}  "
                    f"overrun {t['tier_overrun_bytes']}"
                )
            print(line, flush=True)


if __name__ == "__main__":
    main()
