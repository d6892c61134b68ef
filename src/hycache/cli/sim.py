"""The simulator's subcommands: ``simulate``, ``compare`` and ``tune``."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

from hycache.cli.units import parse_size
from hycache.errors import ConfigError, InputError
from hycache.sim.cost import CostModel
from hycache.sim.hardware import hardware
from hycache.sim.metrics import PolicyResult
from hycache.sim.report import render_html, table
from hycache.sim.request import Request
from hycache.sim.simulate import SimulationConfig, footprint_bytes, parse_set_options, simulate
from hycache.sim.trace import count_requests, read_trace
from hycache.sim.trace_stats import trace_stats
from hycache.sim.tune import recommend
from hycache.sim.workloads import generate
from hycache.spec.model import load_spec


def add_source_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--trace", help="trace file (Mooncake, Marconi or hycache JSONL)")
    group.add_argument("--workload", help="built-in workload generator name")
    parser.add_argument("--requests", type=int, default=200, help="requests to generate")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--limit", type=int, help="replay only the first N requests of a trace")
    parser.add_argument("--model", required=True, help="named spec or path to config.json")
    parser.add_argument("--hardware", default="h200")
    parser.add_argument("--mode", choices=("serial", "engine"), default="serial")
    parser.add_argument("--policy", default="vllm,sglang,marconi,hycache")
    parser.add_argument("--set", action="append", default=[], metavar="PRESET.KNOB=VALUE")
    parser.add_argument("--json", help="write the results as JSON here")
    parser.add_argument("--report", help="write a self-contained HTML report here")
    parser.add_argument("--progress", action="store_true", help="force progress bars")
    parser.add_argument(
        "--session-idle-s",
        default="none",
        help="end a session idle this many seconds of trace time (none: never, as SGLang)",
    )


def _idle_s(value: str) -> float | None:
    if value.strip().lower() in ("none", "null", ""):
        return None
    try:
        idle = float(value)
    except ValueError:
        raise ConfigError(f"--session-idle-s: expected seconds or none, got {value!r}") from None
    if not idle >= 0:
        raise ConfigError(f"--session-idle-s must be >= 0, got {value!r}")
    return idle


def make_source(args: argparse.Namespace) -> tuple[Callable[[], Iterable[Request]], int, str]:
    """A re-iterable request source, its size, and a label. Checks the source up front."""
    if args.trace:
        path = str(args.trace)
        if not Path(path).is_file():
            raise InputError(path, "no such trace file")
        total = count_requests(path)
        limit = args.limit
        if limit is not None:
            total = min(total, limit)
        return (lambda: read_trace(path, limit=limit)), total, Path(path).name
    if args.requests < 1:
        raise ConfigError("--requests must be >= 1")
    name, n, seed = args.workload, args.requests, args.seed
    list(generate(name, requests=1, seed=seed))  # fail fast on an unknown name
    return (lambda: generate(name, requests=n, seed=seed)), n, f"workload {name} (seed {seed})"


def _config(args: argparse.Namespace) -> SimulationConfig:
    spec = load_spec(args.model)
    knobs = parse_set_options(args.set)
    return SimulationConfig(
        spec,
        CostModel(spec, hardware(args.hardware)),
        mode=args.mode,
        knobs=knobs,
        progress=True if args.progress else None,
        session_idle_s=_idle_s(args.session_idle_s),
    )


def _policies(args: argparse.Namespace) -> list[str]:
    policies = [p.strip() for p in args.policy.split(",") if p.strip()]
    if not policies:
        raise ConfigError("--policy needs at least one policy")
    return policies


def _write_atomically(path: str, text: str) -> None:
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _outputs(
    args: argparse.Namespace,
    label: str,
    by_capacity: dict[int, dict[str, PolicyResult]],
    notes: list[str],
) -> None:
    """Write --json / --report only after everything succeeded."""
    if args.json:
        payload = {
            "source": label,
            "model": args.model,
            "mode": args.mode,
            "capacities": {
                str(c): {"policies": {p: r.as_json() for p, r in res.items()}}
                for c, res in by_capacity.items()
            },
        }
        if len(by_capacity) == 1:
            only = next(iter(by_capacity.values()))
            payload["policies"] = {p: r.as_json() for p, r in only.items()}
        _write_atomically(args.json, json.dumps(payload, indent=1, default=str))
    if args.report:
        _write_atomically(
            args.report, render_html(f"hycache: {label} on {args.model}", by_capacity, notes)
        )


def cmd_simulate(args: argparse.Namespace) -> int:
    config = _config(args)
    capacity = parse_size(args.capacity)
    policies = _policies(args)
    source, total, label = make_source(args)
    results = simulate(config, source, capacity, policies, total=total)
    print(f"{label}, {args.model}, capacity {capacity / 1e9:.2f} GB, {args.mode} mode")
    print(table(results))
    _outputs(args, label, {capacity: results}, [])
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    config = dataclasses.replace(_config(args), reject_oversized=True)
    policies = _policies(args)
    source, total, label = make_source(args)
    footprint = footprint_bytes(config, source)
    capacities = []
    for item in args.capacities.split(","):
        item = item.strip()
        if item.endswith("%"):
            try:
                fraction = float(item[:-1]) / 100
            except ValueError:
                raise ConfigError(f"--capacities: bad percentage {item!r}") from None
            capacities.append(max(1, int(footprint * fraction)))
        else:
            capacities.append(parse_size(item))
    notes = [f"unlimited footprint (all KV + branch and end states): {footprint / 1e9:.2f} GB"]
    by_capacity = {}
    print(f"{label}, {args.model}, {args.mode} mode; {notes[0]}")
    for capacity in capacities:
        by_capacity[capacity] = simulate(config, source, capacity, policies, total=total)
        print(f"\ncapacity {capacity / 1e9:.2f} GB ({capacity / footprint:.0%} of footprint)")
        print(table(by_capacity[capacity]))
    _outputs(args, label, by_capacity, notes)
    return 0


def cmd_tune(args: argparse.Namespace) -> int:
    config = _config(args)
    source, _total, label = make_source(args)
    stats = trace_stats(source())
    rec = recommend(config.spec, stats)
    print(f"{label} on {args.model}:")
    print(rec.explanation)
    return 0


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    sim = sub.add_parser("simulate", help="replay a trace or workload through the presets")
    add_source_arguments(sim)
    sim.add_argument("--capacity", required=True, help="cache size, e.g. 40GB or 32GiB")
    sim.set_defaults(func=cmd_simulate)
    comp = sub.add_parser("compare", help="simulate every preset over several capacities")
    add_source_arguments(comp)
    comp.add_argument(
        "--capacities",
        default="5%,10%,20%,40%",
        help="sizes or percentages of the unlimited footprint",
    )
    comp.set_defaults(func=cmd_compare)
    tune = sub.add_parser("tune", help="recommend a retention interval and checkpoint policy")
    add_source_arguments(tune)
    tune.set_defaults(func=cmd_tune)
