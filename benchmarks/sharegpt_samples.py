"""Every preset, Marconi's oracle and ``hycache`` on several ShareGPT samples, not one.

    python benchmarks/sharegpt_samples.py --seeds 3-12 [--rates 1,5]
        [--capacities 1GB,2GB,3GB,5GB] [--trace-dir .traces/samples] [--first 5000 | --tune]
        [--variant NAME:KNOB=VALUE,...] [--jobs 2] [--json OUT.json]

The issue's ShareGPT rows rest on one sample (``sharegpt_trace.py --seed 0``: the first 100
eligible conversations after the first 5,000). A policy can hold there and lose on the next
100. This script replays ``--seeds`` samples of the same pool (``--seed N`` draws 100 sessions
in a seeded random order), each at every rate in ``--rates`` (sessions a second) and every
capacity, with ``marconi-7b`` in serial mode, as ``benchmarks/marconi_reference.py`` does:

* ``vllm``, ``sglang``, ``marconi`` (alpha tuned on its bootstrap window), ``marconi-oracle``
  (the best fixed alpha of Marconi's grid in hindsight) and ``hycache`` with its defaults;
* every ``--variant``: ``hycache`` with those knobs (e.g. ``chance:reason_weight=chance``).

It prints, per rate and capacity, the mean token hit rate of every column over the samples
and, per ``hycache`` column, in how many samples it was at least every other preset
(``>=all``) and at least the oracle (``>=orc``); then the totals. ``--tune`` draws from the
first 5,000 conversations instead (``--first 0 --stop 5000``: data the evaluation samples
never use). Traces are built on first use (``sharegpt_trace.py``, the ``traces`` extra) as
``<trace-dir>/seed<N>_sps<R>.jsonl`` and reused after.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from hycache.cache.presets import KnobValue
from hycache.cli.knobs import knob_arg, knob_overrides
from hycache.cli.sizes import parse_size
from hycache.policy.eviction.marconi import ALPHA_GRID
from hycache.sim.simulate import run_policy
from hycache.sim.trace_cache import default_cache_dir, load_trace
from marconi_reference import serial_config

MODEL = "marconi-7b"
OTHERS = ("vllm", "sglang", "marconi")
#: a job: trace path, capacity in bytes, the hycache columns (name -> knobs)
Job = tuple[str, int, tuple[tuple[str, tuple[tuple[str, KnobValue], ...]], ...]]


@dataclass(frozen=True)
class Sample:
    """One trace: its seed and rate, and where it lies."""

    seed: int
    rate: float
    path: Path


def parse_seeds(text: str) -> list[int]:
    """``"3-12"``, ``"1,2,5"`` or a mix (``"0,3-5"``), in order, each once."""
    seeds: list[int] = []
    for part in text.split(","):
        low, _, high = part.strip().partition("-")
        try:
            first, last = int(low), int(high or low)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a seed or range of seeds: {part!r}") from None
        if first < 0 or last < first:
            raise argparse.ArgumentTypeError(f"not a seed or range of seeds: {part!r}")
        seeds.extend(s for s in range(first, last + 1) if s not in seeds)
    return seeds


def parse_variant(text: str) -> tuple[str, dict[str, KnobValue]]:
    """``NAME:KNOB=VALUE,...`` -> (name, hycache knobs)."""
    name, sep, settings = text.partition(":")
    if not name or not sep or not settings:
        raise argparse.ArgumentTypeError(f"a variant is NAME:KNOB=VALUE,..., got {text!r}")
    pairs = [knob_arg(f"hycache.{s}") for s in settings.split(",") if s]
    return name, knob_overrides(pairs).get("hycache", {})


def measure(job: Job) -> dict[str, float]:
    """Every column's token hit rate on one trace at one capacity."""
    trace, capacity, columns = job
    source = load_trace(trace, cache_dir=default_cache_dir())
    hits = {p: run_policy(serial_config(MODEL), p, capacity, source).token_hit_rate for p in OTHERS}
    hits["marconi-oracle"] = max(
        run_policy(serial_config(MODEL, alpha), "marconi", capacity, source).token_hit_rate
        for alpha in ALPHA_GRID
    )
    for name, knobs in columns:
        config = serial_config(MODEL, knobs={"hycache": dict(knobs)})
        hits[name] = run_policy(config, "hycache", capacity, source).token_hit_rate
    return hits


def ensure_traces(
    seeds: Sequence[int], rates: Sequence[float], trace_dir: Path, *, tune: bool
) -> list[Sample]:
    """Every sample's trace, built where it is missing."""
    samples = []
    for seed in seeds:
        for rate in rates:
            path = trace_dir / f"seed{seed}_sps{rate:g}.jsonl"
            if not path.exists():
                from sharegpt_trace import main as build_trace

                window = ["--first", "0", "--stop", "5000"] if tune else []
                size = ["--sessions-per-s", f"{rate:g}", "--sessions", "100"]
                build_trace([*size, "--seed", str(seed), *window, "--out", str(path)])
            samples.append(Sample(seed, rate, path))
    return samples


@dataclass(frozen=True)
class Measured:
    """Every column's token hit rate on one sample at one capacity."""

    sample: Sample
    capacity: int
    hits: Mapping[str, float]


def _bars(hits: Sequence[Mapping[str, float]], column: str) -> tuple[int, int]:
    """In how many of ``hits`` ``column`` is at least every other preset, and the oracle."""
    at_all = sum(h[column] >= max(h[p] for p in OTHERS) for h in hits)
    return at_all, sum(h[column] >= h["marconi-oracle"] for h in hits)


def summary(rows: Sequence[Measured], hycache_columns: Sequence[str]) -> str:
    """Per (rate, capacity) the mean of every column and the counts of the bars; the totals."""
    columns = [*OTHERS, "marconi-oracle", *hycache_columns]
    configs = sorted({(r.sample.rate, r.capacity) for r in rows})
    lines = [f"{'rate':>5} {'GB':>4} {'n':>3} " + " ".join(f"{c:>14}" for c in columns)]
    for rate, capacity in configs:
        hits = [r.hits for r in rows if (r.sample.rate, r.capacity) == (rate, capacity)]
        means = [100 * sum(h[c] for h in hits) / len(hits) for c in columns]
        lines.append(
            f"{rate:>5g} {capacity / 1e9:>4g} {len(hits):>3} "
            + " ".join(f"{m:>14.2f}" for m in means)
        )
        bars = [(column, *_bars(hits, column)) for column in hycache_columns]
        lines.append(
            "             "
            + "; ".join(f"{c} >=all {a}/{len(hits)} >=orc {o}/{len(hits)}" for c, a, o in bars)
        )
    every = [r.hits for r in rows]
    for column in hycache_columns:
        at_all, at_orc = _bars(every, column)
        lines.append(
            f"{column}: >= every preset in {at_all} of {len(every)}, "
            f">= the oracle in {at_orc} of {len(every)}"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=parse_seeds, required=True, help="e.g. 3-12 or 0,3-5")
    parser.add_argument("--rates", default="1,5", help="sessions a second, e.g. 1,5")
    parser.add_argument("--capacities", default="1GB,2GB,3GB,5GB")
    parser.add_argument("--trace-dir", type=Path, default=Path(".traces/samples"))
    parser.add_argument(
        "--tune", action="store_true", help="draw from the first 5,000 conversations"
    )
    parser.add_argument(
        "--variant", type=parse_variant, action="append", default=[], help="NAME:KNOB=VALUE,..."
    )
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--json", type=Path, help="write every measured number here")
    args = parser.parse_args(argv)
    try:
        rates = [float(r) for r in args.rates.split(",") if r]
    except ValueError:
        parser.error(f"--rates: not a list of numbers: {args.rates!r}")
    if not rates or any(r <= 0 for r in rates):
        parser.error("--rates must be positive numbers")
    if args.jobs < 1:
        parser.error("--jobs must be at least 1")
    capacities = [parse_size(text) for text in args.capacities.split(",") if text]
    names = [name for name, _ in args.variant]
    if len(set(names)) != len(names) or "hycache" in names:
        parser.error("--variant names must differ from each other and from 'hycache'")
    columns = (
        ("hycache", ()),
        *((name, tuple(sorted(knobs.items()))) for name, knobs in args.variant),
    )
    sys.path.insert(0, str(Path(__file__).resolve().parent))  # sharegpt_trace, to build
    samples = ensure_traces(args.seeds, rates, args.trace_dir, tune=args.tune)
    jobs = [(str(s.path), c, columns) for s in samples for c in capacities]
    with ProcessPoolExecutor(args.jobs) as pool:
        measured = list(tqdm(pool.map(measure, jobs), total=len(jobs), unit="config"))
    cells = [(s, c) for s in samples for c in capacities]
    rows = [Measured(s, c, hits) for (s, c), hits in zip(cells, measured, strict=True)]
    if args.json:
        plain = [
            {"seed": r.sample.seed, "rate": r.sample.rate, "capacity": r.capacity, "hits": r.hits}
            for r in rows
        ]
        args.json.write_text(json.dumps(plain, indent=1))
    print(summary(rows, [name for name, _ in columns]))


if __name__ == "__main__":
    main()
