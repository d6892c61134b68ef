"""Where our ``marconi`` preset and the Marconi artifact's V2 part: one change at a time.

    python benchmarks/marconi_stamps.py --artifact-json .traces/results/artifact.json
        --trace .traces/sharegpt_sps=1.jsonl [--trace ...] [--capacities 1GB,2GB,3GB,5GB]

For each trace and capacity it replays the ``marconi`` preset

* ``tuned``: as shipped (alpha from its bootstrap replays);
* ``art-alpha``: at the alpha the artifact's V2 ended the trace with;
* ``+overrun``: that, at the bytes the artifact's V2 actually peaked at (its accounting
  overruns the capacity);

next to the artifact's V2 hit rate (from ``benchmarks/marconi_artifact.py --json``). The
preset keeps its recency stamps as the artifact does (``hycache.policy.eviction.marconi``), so
no column changes the stamps any more.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hycache.cli.sizes import parse_size
from hycache.sim.cost import CostModel
from hycache.sim.hardware import hardware
from hycache.sim.simulate import SimulationConfig, run_policy
from hycache.sim.trace_cache import default_cache_dir, load_trace
from hycache.spec.model import load_spec


def hit_rate(model: str, trace: str, capacity: int, alpha: float | None) -> float:
    spec = load_spec(model)
    config = SimulationConfig(
        spec,
        CostModel(spec, hardware("h200")),
        progress=False,
        reject_oversized=True,
        session_idle_s=None,
        knobs=None if alpha is None else {"marconi": {"alpha": alpha}},
    )
    source = load_trace(trace, cache_dir=default_cache_dir())
    return run_policy(config, "marconi", capacity, source).token_hit_rate


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trace", required=True, action="append")
    parser.add_argument("--artifact-json", required=True, type=Path)
    parser.add_argument("--capacities", default="1GB,2GB,3GB,5GB")
    parser.add_argument("--model", default="marconi-7b")
    args = parser.parse_args(argv)
    artifact: dict[str, Any] = json.loads(args.artifact_json.read_text())
    by_name = {os.path.basename(k): v for k, v in artifact.items()}
    print("trace                 GB   tuned  art-alpha  +overrun  artifact-V2")
    for trace in args.trace:
        cells = by_name[os.path.basename(trace)]
        for text in args.capacities.split(","):
            capacity = parse_size(text)
            v2 = next(c for k, c in cells.items() if int(float(k)) == capacity)["marconi"]
            alpha = float(v2["alpha"])
            peak = max(capacity, int(v2["peak_bytes"]))
            tuned = hit_rate(args.model, trace, capacity, None)
            fixed = hit_rate(args.model, trace, capacity, alpha)
            overrun = hit_rate(args.model, trace, peak, alpha)
            print(
                f"{os.path.basename(trace):20} {capacity / 1e9:3g} {100 * tuned:7.2f} "
                f"{100 * fixed:6.2f}({alpha:.1f}) {100 * overrun:9.2f} "
                f"{100 * v2['token_hit_rate']:12.2f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
