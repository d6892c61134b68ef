"""Our presets next to the Marconi artifact on the same Marconi-format traces.

    python benchmarks/marconi_reference.py --trace .traces/sharegpt_sps=1.jsonl
        [--trace ...] [--capacities 1GB,2GB,3GB,5GB] [--model marconi-7b]
        [--artifact-json ARTIFACT.json] [--json OUT.json] [--set PRESET.KNOB=VALUE ...]

For every trace and capacity (one "config") it replays, in serial mode as
``hycache simulate --mode serial --policy vllm,sglang,marconi,hycache`` does:

* ``vllm``, ``sglang``, ``marconi`` (alpha tuned on its bootstrap window) and ``hycache``;
* ``marconi-oracle``: the ``marconi`` preset at every fixed alpha of Marconi's grid
  (``hycache.policy.eviction.marconi.ALPHA_GRID``) over the whole trace, the best in hindsight;
* ``marconi@1.14``: the ``marconi`` preset (tuned as usual) at 1.14 x the capacity, what the
  artifact's Marconi can hold at its peak (its accounting overruns the capacity; the artifact
  columns give the overrun it measured).

``--artifact-json`` takes what ``benchmarks/marconi_artifact.py`` wrote for the same traces and
capacities (in bytes: ``1e9`` = ``1GB``) and adds its columns: vLLM+, V1 (SGLang+), V2
(Marconi) and V3 (static-alpha oracle). ``--from-json`` prints the table of an earlier
``--json`` instead of measuring (with the artifact columns of ``--artifact-json``). The table
gives token hit rates, the chosen alpha in parentheses, and whether ``hycache`` is at least
every other preset (``>=all``) and the oracle (``>=orc``).
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hycache.cache.presets import KnobValue
from hycache.cli.knobs import add_knob_option, knob_overrides
from hycache.cli.sizes import parse_size
from hycache.policy.eviction.marconi import ALPHA_GRID
from hycache.sim.cost import CostModel
from hycache.sim.hardware import hardware
from hycache.sim.simulate import SimulationConfig, run_policy
from hycache.sim.source import Source
from hycache.sim.trace_cache import default_cache_dir, load_trace
from hycache.spec.model import load_spec

PRESETS = ("vllm", "sglang", "marconi", "hycache")
#: knob overrides per preset (``--set PRESET.KNOB=VALUE``)
Knobs = dict[str, dict[str, KnobValue]]
#: The artifact's capacity overrun the ``marconi@`` column grants our preset.
OVERRUN = 1.14
ARTIFACT = (
    ("vllm", "art-vLLM+"),
    ("sglang", "art-V1"),
    ("marconi", "art-V2"),
    ("oracle", "art-V3"),
)


def serial_config(
    model: str, alpha: float | None = None, knobs: Knobs | None = None
) -> SimulationConfig:
    """The serial replay these comparisons run (H200 cost model, oversized prompts rejected,
    no session end), ``knobs`` per preset and Marconi's ``alpha`` fixed where given."""
    merged = {preset: dict(values) for preset, values in (knobs or {}).items()}
    if alpha is not None:
        merged.setdefault("marconi", {})["alpha"] = alpha
    spec = load_spec(model)
    return SimulationConfig(
        spec,
        CostModel(spec, hardware("h200")),
        mode="serial",
        progress=False,
        reject_oversized=True,
        session_idle_s=None,
        knobs=merged or None,
    )


def _cell(config: SimulationConfig, preset: str, capacity: int, source: Source) -> dict[str, Any]:
    result = run_policy(config, preset, capacity, source)
    alpha = result.knobs.get("alpha")
    return {
        "token_hit_rate": result.token_hit_rate,
        "alpha": float(alpha) if preset == "marconi" and isinstance(alpha, int | float) else None,
        "peak_bytes": result.peak_bytes,
        "wall_s": result.wall_s,
    }


def measure(
    model: str, trace: str, capacity: int, knobs: Knobs | None = None
) -> dict[str, dict[str, Any]]:
    """Every column of ours for one trace and capacity (presets' knobs set by ``knobs``)."""
    source = load_trace(trace, cache_dir=default_cache_dir())
    config = serial_config(model, knobs=knobs)
    out = {preset: _cell(config, preset, capacity, source) for preset in PRESETS}
    runs = {
        a: _cell(serial_config(model, a, knobs), "marconi", capacity, source) for a in ALPHA_GRID
    }
    best = max(ALPHA_GRID, key=lambda a: (runs[a]["token_hit_rate"], -a))
    out["marconi-oracle"] = {
        **runs[best],
        "wall_s": sum(r["wall_s"] for r in runs.values()),
        "by_alpha": {str(a): runs[a]["token_hit_rate"] for a in ALPHA_GRID},
    }
    out["marconi@overrun"] = _cell(config, "marconi", int(capacity * OVERRUN), source)
    return out


def _artifact_cell(
    artifact: dict[str, Any] | None, trace: str, capacity: int
) -> dict[str, Any] | None:
    if artifact is None:
        return None
    name = os.path.basename(trace)
    for key, by_capacity in artifact.items():
        if os.path.basename(key) != name:
            continue
        for text, cell in by_capacity.items():
            if int(float(text)) == capacity:
                return dict(cell)
    return None


def _fmt(cell: dict[str, Any] | None) -> str:
    if cell is None:
        return "-"
    text = f"{100 * cell['token_hit_rate']:.2f}"
    if cell.get("alpha") is not None:
        text += f" ({cell['alpha']:.1f})"
    return text


def _tuned(art: dict[str, Any], key: str) -> dict[str, Any] | None:
    """The artifact's cell, its alpha shown only where the policy has one."""
    cell = art.get(key)
    if cell is None or key in ("marconi", "oracle"):
        return cell
    return {**cell, "alpha": None}


def table(results: Sequence[dict[str, Any]]) -> str:
    """One block per config: ours, then the artifact's, then the bar."""
    lines: list[str] = []
    for row in results:
        ours: dict[str, dict[str, Any]] = row["ours"]
        art: dict[str, Any] | None = row["artifact"]
        hyc = ours["hycache"]["token_hit_rate"]
        others = max(ours[p]["token_hit_rate"] for p in PRESETS if p != "hycache")
        oracle = ours["marconi-oracle"]["token_hit_rate"]
        lines.append(f"{row['trace']}  capacity {row['capacity'] / 1e9:g} GB  (token hit %, alpha)")
        lines.append(
            "  ours:     "
            + "  ".join(f"{p} {_fmt(ours[p])}" for p in (*PRESETS[:3], "marconi-oracle", "hycache"))
            + f"  marconi@{OVERRUN:g}x {_fmt(ours['marconi@overrun'])}"
        )
        if art is not None:
            lines.append(
                "  artifact: "
                + "  ".join(f"{label} {_fmt(_tuned(art, key))}" for key, label in ARTIFACT)
                + "  V2 peak "
                + (f"+{art['marconi']['overrun']:.1%}" if "marconi" in art else "-")
            )
        lines.append(
            f"  hycache >=all: {'yes' if hyc >= others else 'NO'}"
            f"  >=orc: {'yes' if hyc >= oracle else 'NO'}"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trace", required=True, action="append", help="repeatable")
    parser.add_argument("--capacities", default="1GB,2GB,3GB,5GB")
    parser.add_argument("--model", default="marconi-7b")
    parser.add_argument("--artifact-json", type=Path, help="benchmarks/marconi_artifact.py --json")
    parser.add_argument("--json", type=Path, help="write every measured number here")
    parser.add_argument("--from-json", type=Path, help="print this earlier --json, measure none")
    add_knob_option(parser)
    args = parser.parse_args(argv)
    knobs = knob_overrides(args.knobs)
    artifact = json.loads(args.artifact_json.read_text()) if args.artifact_json else None
    if args.from_json:
        earlier = json.loads(args.from_json.read_text())
        for row in earlier:
            row["artifact"] = _artifact_cell(artifact, row["trace"], row["capacity"])
        print(table(earlier))
        return
    capacities = [parse_size(text) for text in args.capacities.split(",") if text]
    results: list[dict[str, Any]] = []
    for trace in args.trace:
        for capacity in capacities:
            row = {
                "trace": os.path.basename(trace),
                "capacity": capacity,
                "ours": measure(args.model, trace, capacity, knobs),
                "artifact": _artifact_cell(artifact, trace, capacity),
            }
            results.append(row)
            print(table([row]), flush=True)
            if args.json:
                args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
