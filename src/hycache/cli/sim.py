"""The simulator's subcommands: ``simulate``, ``compare`` and ``tune``.

Order of work, so that bad input costs nothing: argparse checks every value it can alone
(sizes, knobs, policies, counts, output paths: exit 2 naming the option); then the model,
hardware and source are loaded and cross-checked; then percentages are resolved against the
workload's footprint and every capacity must hold the smallest request (``hycache.cli.fit``);
only then do the replays run, and the output files are written last, atomically. A request
larger than a capacity (but not all of them) is served uncached and counted as rejected, in
``simulate`` and ``compare`` alike.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from hycache.cache.tierconfig import (
    DEFAULT_PAGE_TOKENS,
    DEFAULT_STATE_SHARE,
    PREFETCH_POLICIES,
    STORAGE_KINDS,
    TierConfig,
)
from hycache.cli.fit import Capacity, check_capacities, resolve
from hycache.cli.knobs import add_knob_option, check_knobs_apply, knob_overrides, policies_arg
from hycache.cli.numbers import non_negative_float, positive_int
from hycache.cli.output import check_distinct, output_arg, write_atomically
from hycache.cli.sizes import Size, format_bytes, size_arg, sizes_arg
from hycache.errors import ConfigError, InputError
from hycache.policy.movement.registry import MOVEMENT_POLICIES
from hycache.sim.cells import Cell, Parallel, Processes, run_cells, usable_cores
from hycache.sim.cost import CostModel
from hycache.sim.disagg import PULLS
from hycache.sim.hardware import hardware
from hycache.sim.metrics import PolicyResult
from hycache.sim.report import (
    disagg_table,
    reasons_table,
    rejected_notes,
    render_html,
    table,
    tier_table,
    tuned_notes,
)
from hycache.sim.request import Request
from hycache.sim.simulate import MODES, SimulationConfig, footprint_bytes, infinite_hit_rate
from hycache.sim.trace_cache import cached_derived, default_cache_dir, load_trace
from hycache.sim.trace_stats import trace_stats
from hycache.sim.tune import recommend
from hycache.sim.workloads import WORKLOADS, generate
from hycache.spec.groups import DTYPE_BYTES
from hycache.spec.model import load_spec

Source = Callable[[], Iterable[Request]]
DEFAULT_REQUESTS = 200


def add_source_arguments(parser: argparse.ArgumentParser) -> None:
    """--trace | --workload, --requests, --seed, --model (every simulator subcommand)."""
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument(
        "--trace",
        help="trace file: Mooncake, Marconi or hycache JSONL, optionally .gz "
        "(bundled: data/traces/mooncake_conversation.jsonl.gz, mooncake_synthetic.jsonl.gz)",
    )
    group.add_argument("--workload", help=f"built-in workload: {', '.join(WORKLOADS)}")
    parser.add_argument(
        "--requests",
        type=positive_int,
        help=f"--workload: requests to generate (default {DEFAULT_REQUESTS}); "
        "--trace: replay only the first N (default all)",
    )
    parser.add_argument("--seed", type=int, help="--workload only: generator seed (default 0)")
    parser.add_argument(
        "--trace-cache",
        default=None,
        help="--trace only: keep parsed traces, and their unlimited footprints per model, in "
        "this directory, keyed by the file's content (default $HYCACHE_CACHE_DIR or "
        "~/.cache/hycache/traces; 'none': parse and measure every run)",
    )
    parser.add_argument(
        "--model", required=True, help="named spec (e.g. qwen3-next-80b-a3b) or a config.json"
    )
    parser.add_argument(
        "--dtype",
        choices=sorted(DTYPE_BYTES),
        help="--model config.json only: the model dtype, overriding the config's",
    )


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """What a replay takes besides its source (simulate and compare)."""
    parser.add_argument("--hardware", default="h200", help="cost model profile (default h200)")
    parser.add_argument(
        "--mode",
        choices=MODES,
        default="serial",
        help="serial (default), engine (discrete-event serving), or disagg (prefill and decode "
        "instances, each with its own cache of the preset; bytes moved between them)",
    )
    parser.add_argument(
        "--policy",
        type=policies_arg,
        default="vllm,sglang,marconi,hycache",
        help="P[,Q...] or all (default vllm,sglang,marconi,hycache)",
    )
    parser.add_argument(
        "--disagg-pull",
        choices=PULLS,
        default="last",
        help="--mode disagg: where the decode side resumes: last (N-1, the engine's rule; "
        "default) or grid (its own last planned checkpoint, whose state it keeps)",
    )
    add_knob_option(parser)
    parser.add_argument("--json", type=output_arg, help="write the results as JSON here")
    parser.add_argument("--report", type=output_arg, help="write a self-contained HTML report")
    parser.add_argument("--progress", action="store_true", help="force progress bars")
    parser.add_argument(
        "--reasons",
        action="store_true",
        help="also print, per preset and checkpoint reason, the states stored, resumed from and "
        "skipped for lack of a state slot",
    )
    parser.add_argument(
        "--jobs",
        type=positive_int,
        default=None,
        help="run the replays (one per preset and capacity) in up to N forked local processes "
        "(default: one per usable core, and a single replay's bootstrap candidates that do not "
        "fill whole rounds of cores one process each, sharing them; 1: in this process); the "
        "results are the serial run's",
    )
    parser.add_argument(
        "--parallel",
        action="store_true",
        help="run the replays as Ray tasks on a local Ray, one per core, instead of local "
        "processes; the results are the serial run's (needs the 'ray' extra)",
    )
    parser.add_argument(
        "--ray-address",
        default=None,
        help="run the replays as Ray tasks on this existing Ray cluster (implies --parallel)",
    )
    parser.add_argument(
        "--host-capacity",
        type=size_arg,
        default=None,
        help="a host tier under the device: bytes or a percentage of the unlimited footprint "
        "(default none: the device alone)",
    )
    parser.add_argument(
        "--host-state-share",
        type=non_negative_float,
        default=DEFAULT_STATE_SHARE,
        help=f"part of the host tier for states, the rest for KV (default {DEFAULT_STATE_SHARE})",
    )
    parser.add_argument(
        "--storage-capacity",
        type=_storage_arg,
        default=None,
        help="a storage tier under the host, written through from it: bytes, a percentage of "
        "the unlimited footprint, or 'unlimited' (default none)",
    )
    parser.add_argument(
        "--storage-kind",
        choices=STORAGE_KINDS,
        default="disk",
        help="storage tier kind, which sets its bandwidth (default disk)",
    )
    parser.add_argument(
        "--prefetch",
        choices=PREFETCH_POLICIES,
        default="wait_complete",
        help="storage prefetch: best_effort (what arrived while the request waited), "
        "wait_complete, or timeout (1 s + 0.25 s per 1,024 tokens) (default wait_complete)",
    )
    parser.add_argument(
        "--host-page-tokens",
        type=positive_int,
        default=DEFAULT_PAGE_TOKENS,
        help=f"host/storage page in tokens, rounded up to the device page "
        f"(default {DEFAULT_PAGE_TOKENS})",
    )
    parser.add_argument(
        "--movement",
        choices=MOVEMENT_POLICIES,
        default="write_back",
        help="device -> host movement: write_back, write_through, or write_through_selective "
        "(after a hit, SGLang's threshold 2) (default write_back)",
    )
    parser.add_argument(
        "--session-idle-s",
        type=idle_seconds_arg,
        default=None,
        help="end a session idle this many seconds of trace time (default none: never, as "
        "SGLang without a session timeout)",
    )


def idle_seconds_arg(text: str) -> float | None:
    """``none`` or a finite number of seconds >= 0."""
    if text.strip().lower() == "none":
        return None
    return non_negative_float(text)


def make_source(args: argparse.Namespace) -> tuple[Source, int, str]:
    """A re-iterable request source, its size, and a label. Checks the source up front."""
    if args.trace:
        if args.seed is not None:
            raise ConfigError("--seed applies to --workload only: a trace replays its requests")
        path = str(args.trace)
        if not Path(path).is_file():
            raise InputError(path, "no such trace file")
        parsed = load_trace(path, limit=args.requests, cache_dir=_trace_cache_dir(args))
        return parsed, len(parsed), Path(path).name
    if args.trace_cache is not None:
        raise ConfigError("--trace-cache applies to --trace only")
    name = args.workload
    n = DEFAULT_REQUESTS if args.requests is None else args.requests
    seed = 0 if args.seed is None else args.seed
    list(generate(name, requests=1, seed=seed))  # fail fast on an unknown name
    return (lambda: generate(name, requests=n, seed=seed)), n, f"workload {name} (seed {seed})"


def _trace_cache_dir(args: argparse.Namespace) -> str | Path | None:
    """Where parsed traces are kept (None: nowhere, ``--trace-cache none``)."""
    cache: str | Path = args.trace_cache or default_cache_dir()
    return None if str(cache).strip().lower() == "none" else cache


def _footprint(args: argparse.Namespace, config: SimulationConfig, source: Source) -> int:
    """The source's unlimited footprint (``hycache.sim.simulate.footprint_bytes``); a trace's
    is kept beside its parsed arrays, per model (``hycache.sim.trace_cache.cached_derived``)."""
    cache = _trace_cache_dir(args) if args.trace else None
    if cache is None:
        return footprint_bytes(config, source)
    spec = hashlib.sha256(repr(config.spec).encode()).hexdigest()
    return cached_derived(
        args.trace,
        f"footprint:{spec}",
        lambda: footprint_bytes(config, source),
        cache_dir=cache,
        limit=args.requests,
    )


def _config(args: argparse.Namespace) -> SimulationConfig:
    """The model, cost model and knobs; every requested replay serves a request that never
    fits uncached (counted), so one oversized request does not abort the run."""
    knobs = knob_overrides(args.knobs)
    check_knobs_apply(knobs, args.policy)
    check_distinct({"--json": args.json, "--report": args.report})
    if getattr(args, "decode_capacity", None) is not None and args.mode != "disagg":
        raise ConfigError("--decode-capacity applies to --mode disagg only")
    if args.disagg_pull != "last" and args.mode != "disagg":
        raise ConfigError("--disagg-pull applies to --mode disagg only")
    if args.mode == "disagg" and args.host_capacity is not None:
        raise ConfigError("--mode disagg runs without lower tiers (no --host-capacity)")
    spec = load_spec(args.model, dtype=args.dtype)
    return SimulationConfig(
        spec,
        CostModel(spec, hardware(args.hardware), storage_kind=args.storage_kind),
        mode=args.mode,
        knobs=knobs,
        progress=True if args.progress else None,
        reject_oversized=True,
        session_idle_s=args.session_idle_s,
        pull=args.disagg_pull,
    )


def _capacities(
    config: SimulationConfig,
    source: Source,
    sizes: Sequence[Size],
    footprint: int | None,
    label: str,
    policies: list[str],
) -> list[Capacity]:
    """``sizes`` in bytes (percentages of ``footprint``), distinct, each checked to hold the
    smallest request."""
    capacities = resolve(sizes, footprint)
    seen: dict[int, str] = {}
    for capacity in capacities:
        if capacity.nbytes in seen:
            raise ConfigError(
                f"capacities {seen[capacity.nbytes]!r} and {capacity.size.text!r} are both "
                f"{capacity.nbytes} bytes"
            )
        seen[capacity.nbytes] = capacity.size.text
    check_capacities(config, source(), capacities, policies, label)
    return capacities


def _outputs(
    args: argparse.Namespace,
    label: str,
    by_capacity: dict[int, dict[str, PolicyResult]],
    notes: list[str],
    bound: Callable[[], float],
) -> None:
    """Write --json / --report only after everything succeeded; ``bound`` measures the
    report's infinite-cache hit rate (``hycache.sim.simulate.infinite_hit_rate``)."""
    if args.json:
        payload: dict[str, object] = {
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
        write_atomically(args.json, json.dumps(payload, indent=1, default=str))
    if args.report:
        title = f"hycache: {label} on {args.model}"
        write_atomically(args.report, render_html(title, by_capacity, notes, bound=bound()))


def _with_tiers(
    args: argparse.Namespace, config: SimulationConfig, footprint: int | None
) -> SimulationConfig:
    """``config`` with the tiers ``--host-capacity``/``--storage-capacity`` ask for
    (unchanged without them)."""
    size: Size | None = args.host_capacity
    storage: Size | str | None = args.storage_capacity
    if size is None:
        if storage is not None:
            raise ConfigError("--storage-capacity needs --host-capacity (storage sits under it)")
        return config
    tiers = TierConfig(
        size.resolve(footprint),
        args.host_state_share,
        args.movement,
        storage=None if storage is None else args.storage_kind,
        storage_bytes=storage.resolve(footprint) if isinstance(storage, Size) else None,
        page_tokens=args.host_page_tokens,
        prefetch=args.prefetch,
    )
    return dataclasses.replace(config, tiers=tiers)


def _storage_arg(text: str) -> Size | str:
    """``unlimited`` or a size (argparse type)."""
    return "unlimited" if text.strip().lower() == "unlimited" else size_arg(text)


def _relative(args: argparse.Namespace) -> bool:
    sizes = [args.capacity, args.host_capacity, args.storage_capacity, args.decode_capacity]
    return any(isinstance(s, Size) and s.relative for s in sizes)


def _tier_line(tiers: TierConfig) -> str:
    line = f"host tier {format_bytes(tiers.host_bytes)}, {tiers.movement}"
    if tiers.storage is not None:
        cap = "unlimited" if tiers.storage_bytes is None else format_bytes(tiers.storage_bytes)
        line += f"; storage tier ({tiers.storage}) {cap}, written through from the host"
    return line


def _sweep(
    args: argparse.Namespace,
    config: SimulationConfig,
    source: Source,
    capacities: Sequence[int],
    total: int,
) -> dict[int, dict[str, PolicyResult]]:
    """Every preset at every capacity: in local processes (``--jobs``), in this one
    (``--jobs 1``) or on Ray (``--parallel``, ``--ray-address``)."""
    parallel: Parallel | Processes
    if args.parallel or args.ray_address:
        parallel = Parallel(args.ray_address)
    elif args.jobs is None:  # the cores are the limit, not the processes
        parallel = Processes(usable_cores(), share_cores=True)
    else:
        parallel = Processes(args.jobs)
    cells = [Cell(c, p) for c in capacities for p in args.policy]
    results = run_cells(config, source, cells, total=total, parallel=parallel)
    return {c: {p: results[Cell(c, p)] for p in args.policy} for c in capacities}


def _print_results(results: dict[str, PolicyResult], *, reasons: bool = False) -> None:
    disagg = all(r.disagg is not None for r in results.values())
    print(disagg_table(results) if disagg else table(results))
    tiers = tier_table(results)
    if tiers is not None:
        print(tiers)
    by_reason = reasons_table(results) if reasons else None
    if by_reason is not None:
        print("checkpoints by reason")
        print(by_reason)
    for note in (*tuned_notes(results), *rejected_notes(results)):
        print(f"note: {note}")


def cmd_simulate(args: argparse.Namespace) -> int:
    config = _config(args)
    source, total, label = make_source(args)
    size: Size = args.capacity
    footprint = _footprint(args, config, source) if _relative(args) else None
    [capacity] = _capacities(config, source, [size], footprint, label, args.policy)
    config = _with_tiers(args, config, footprint)
    decode: Capacity | None = None
    if args.decode_capacity is not None:
        [decode] = resolve([args.decode_capacity], footprint)
        config = dataclasses.replace(config, decode_capacity=decode.nbytes)
        check_capacities(config, source(), [decode], args.policy, label)
    results = _sweep(args, config, source, [capacity.nbytes], total)[capacity.nbytes]
    shown = _shown(capacity, footprint)
    if decode is not None:
        shown += f", decode capacity {_shown(decode, footprint)}"
    print(f"{label}, {args.model}, capacity {shown}, {args.mode} mode")
    if config.tiers is not None:
        print(_tier_line(config.tiers))
    _print_results(results, reasons=args.reasons)
    _outputs(args, label, {capacity.nbytes: results}, [], lambda: infinite_hit_rate(config, source))
    return 0


def _shown(capacity: Capacity, footprint: int | None) -> str:
    shown = format_bytes(capacity.nbytes)
    if footprint is not None:
        shown += f" ({capacity.size.text} of the {format_bytes(footprint)} footprint)"
    return shown


def cmd_compare(args: argparse.Namespace) -> int:
    config = _config(args)
    source, total, label = make_source(args)
    footprint = _footprint(args, config, source)
    capacities = _capacities(config, source, args.capacities, footprint, label, args.policy)
    config = _with_tiers(args, config, footprint)
    notes = [f"unlimited footprint (all KV + branch and end states): {footprint / 1e9:.2f} GB"]
    print(f"{label}, {args.model}, {args.mode} mode; {notes[0]}")
    by_capacity = _sweep(args, config, source, [c.nbytes for c in capacities], total)
    for capacity in capacities:
        results = by_capacity[capacity.nbytes]
        share = capacity.nbytes / footprint if footprint else 0.0
        print(f"\ncapacity {capacity.nbytes / 1e9:.2f} GB ({share:.0%} of footprint)")
        _print_results(results, reasons=args.reasons)
    _outputs(args, label, by_capacity, notes, lambda: infinite_hit_rate(config, source))
    return 0


def cmd_tune(args: argparse.Namespace) -> int:
    spec = load_spec(args.model, dtype=args.dtype)
    source, _total, label = make_source(args)
    rec = recommend(spec, trace_stats(source()))
    print(f"{label} on {args.model}:")
    print(rec.explanation)
    return 0


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    sim = sub.add_parser("simulate", help="replay a trace or workload through the presets")
    add_source_arguments(sim)
    sim.add_argument(
        "--capacity",
        type=size_arg,
        required=True,
        help="cache size: bytes (40GB, 32GiB) or a percentage of the unlimited footprint (10%%)",
    )
    sim.add_argument(
        "--decode-capacity",
        type=size_arg,
        default=None,
        help="--mode disagg: the decode instance's cache size (default: --capacity)",
    )
    add_run_arguments(sim)
    sim.set_defaults(func=cmd_simulate)
    comp = sub.add_parser("compare", help="simulate every preset over several capacities")
    add_source_arguments(comp)
    comp.add_argument(
        "--capacities",
        type=sizes_arg,
        default="5%,10%,20%,40%",
        help="comma-separated sizes or percentages of the unlimited footprint "
        "(default 5%%,10%%,20%%,40%%)",
    )
    add_run_arguments(comp)
    comp.set_defaults(func=cmd_compare)
    tune = sub.add_parser(
        "tune",
        help="recommend a retention interval and checkpoint policy",
        description="Read the workload's statistics (no replay) and recommend hycache knobs.",
    )
    add_source_arguments(tune)
    tune.set_defaults(func=cmd_tune)
