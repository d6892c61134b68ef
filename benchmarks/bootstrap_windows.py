"""`hycache`'s bootstrap window rules, scored offline on serial cells.

Every bootstrap candidate is replayed alone, serially, on each cell of a split
(``policy_matrix.py``'s cells), keeping after each request the tokens reused and the requests
that reused some. A window rule's pick on a cell is then computed from those curves, exactly as
``hycache.sim.bootstrap.choose_knobs`` makes it (the same ``bootstrap_window``, doubled until
``has_evidence``; the same ``pick_knobs``), and the pick's whole-trace hit rate is the
candidate's own. Rules: ``bootstrap_evidence`` at each ``--evidence`` value (0: the rule before
evidence counted; each without ``bootstrap_settle``, the simulator's default), the default
evidence with it (doubled until the window's first half picks the same candidate), the best
candidate in hindsight, and two references: the first candidate
(the default) alone, and the pick at the default evidence switched in where its window ends
(the default's reuse in the window, the pick's own after it: roughly what a cache that ran the
default while it judged would get; the simulator instead carries the pick's window replay on,
so its window counts the pick's reuse). ``--candidates`` (a JSON list of knob sets, the first
the default) replaces ``hycache.policy.tuning.CANDIDATES``, to score other candidate sets
offline. With ``--matrix`` (a ``policy_matrix.py`` results file of the same split) each
rule's count of cells at or above the best other preset (its bar) is printed too.

    python benchmarks/bootstrap_windows.py --split tune --matrix policy_matrix.json
    python benchmarks/bootstrap_windows.py --split eval --seeds 6,7,8,9,10 \\
        --sources chat,agent,shared-prefix,twice,docqa,branching
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from hycache.policy.tuning import CANDIDATES, EVIDENCE_FILLS, has_evidence, pick_knobs
from hycache.sim.bootstrap import bootstrap_window
from hycache.sim.serial import SerialReplay
from hycache.sim.simulate import _build
from policy_matrix import (
    HIT_SLACK,
    Source,
    _config,
    _key,
    add_cell_options,
    capacity_of,
    load_store,
    measure_footprints,
    split_sources,
)

MULTIPLIER = 5  # the ``bootstrap_multiplier`` default


@dataclass(frozen=True)
class Curves:
    """One cell: per candidate, the tokens reused and the requests hit after each request,
    and its whole-trace hit rate; the prompt tokens of the whole trace."""

    label: str
    pct: float
    capacity: int
    reused: tuple[tuple[int, ...], ...]
    hits: tuple[tuple[int, ...], ...]
    hit_rate: tuple[float, ...]
    prompt_tokens: int

    def switched(self, index: int, window: int) -> float:
        """The hit rate of the first candidate for the first ``window`` requests and of
        candidate ``index`` after them (each candidate's own reuse per request)."""
        last = window - 1
        own = self.reused[index]
        reused = self.reused[0][last] + own[-1] - own[last]
        return reused / self.prompt_tokens if self.prompt_tokens else 0.0


CellArgs = tuple[str, str, int, float, int, Sequence[Mapping[str, object]]]
#: a rule's pick on a cell: the candidate, its window (0: none) and the hit rate it gets
Rule = Callable[[Curves], tuple[int, int, float]]


def replay_candidates(args: CellArgs) -> Curves:
    """Every candidate of ``args`` (model, label, requests, pct, capacity, candidates)
    replayed alone on the cell."""
    model, label, requests, pct, capacity, candidates = args
    config = _config(model, "serial")
    source = Source(label, requests)
    reused: list[tuple[int, ...]] = []
    hits: list[tuple[int, ...]] = []
    rates: list[float] = []
    prompt_tokens = 0
    for candidate in candidates:
        cache = _build(config, "hycache", capacity, dict(candidate))
        replay = SerialReplay(
            cache, config.cost, reject_oversized=True, session_idle_s=config.session_idle_s
        )
        tokens: list[int] = []
        hit: list[int] = []
        for request in source():
            replay.feed([request])
            stats = cache.stats()
            tokens.append(stats.reused_tokens)
            hit.append(stats.requests_hit)
        reused.append(tuple(tokens))
        hits.append(tuple(hit))
        rates.append(replay.result().token_hit_rate)
        prompt_tokens = cache.stats().prompt_tokens
    return Curves(label, pct, capacity, tuple(reused), tuple(hits), tuple(rates), prompt_tokens)


def pick(
    curves: Curves,
    model: str,
    requests: int,
    evidence: float,
    *,
    settle: bool = False,
    returns: bool = True,
) -> tuple[int, int]:
    """The candidate ``choose_knobs`` picks with ``bootstrap_evidence`` = ``evidence``, and
    its window's size; ``settle``: also doubled until the pick on the window's first half is
    the same (``bootstrap_settle``); ``returns``: the window also waits for sessions to come
    back (``bootstrap_returns``, on by default)."""
    config = _config(model, "serial")
    source = Source(curves.label, requests)
    multiplier = MULTIPLIER
    while True:
        window = bootstrap_window(source, config.spec, curves.capacity, multiplier, returns=returns)
        last, half = window.count - 1, window.half - 1
        index = pick_knobs([float(r[last]) for r in curves.reused])
        if window.whole:
            return index, window.count
        hits = [h[last] for h in curves.hits]
        enough = window.fill is not None and has_evidence(hits, window.fill, evidence)
        if enough and (not settle or index == pick_knobs([float(r[half]) for r in curves.reused])):
            return index, window.count
        multiplier *= 2


def best_other(
    store: dict[str, dict[str, float]], model: str, curves: Curves, requests: int
) -> float | None:
    """The best other preset's serial hit rate on the cell (None: not in the matrix file)."""
    rates = []
    for preset in ("vllm", "sglang", "marconi"):
        entry = store.get(_key(model, curves.label, requests, "serial", curves.capacity, preset))
        if entry is None:
            return None
        rates.append(entry["token_hit_rate"])
    return max(rates)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_cell_options(parser, split="tune")
    parser.add_argument("--evidence", default="0,0.5,1,2", help="bootstrap_evidence values")
    parser.add_argument("--matrix", help="policy_matrix.py results of the same split")
    parser.add_argument(
        "--candidates",
        type=json.loads,
        default=list(CANDIDATES),
        help="a JSON list of knob sets, the default first (default: the simulator's)",
    )
    args = parser.parse_args()
    candidates = tuple(dict(c) for c in args.candidates)
    labels = split_sources(
        args.sources.split(","), args.split, [int(s) for s in args.seeds.split(",")]
    )
    store: dict[str, dict[str, float]] = {}
    if args.matrix:
        store, _save = load_store(Path(args.matrix))
    pcts = [float(p) for p in args.capacities.split(",")]
    with ProcessPoolExecutor(max(1, args.jobs)) as pool:
        measure_footprints(pool, store, args.model, labels, args.requests)
        cells = [
            (
                args.model,
                label,
                args.requests,
                pct,
                capacity_of(store, args.model, label, args.requests, pct),
                candidates,
            )
            for label in labels
            for pct in pcts
        ]
        curves = list(
            tqdm(
                pool.map(replay_candidates, cells), total=len(cells), desc="cells", file=sys.stderr
            )
        )
    values = [float(v) for v in args.evidence.split(",")]
    model, requests = args.model, args.requests

    def by_evidence(evidence: float, *, settle: bool = False) -> Rule:
        def rule(c: Curves) -> tuple[int, int, float]:
            index, size = pick(c, model, requests, evidence, settle=settle)
            return index, size, c.hit_rate[index]

        return rule

    def hindsight(c: Curves) -> tuple[int, int, float]:
        index = max(range(len(c.hit_rate)), key=lambda i: c.hit_rate[i])
        return index, 0, c.hit_rate[index]

    def switched_in(c: Curves) -> tuple[int, int, float]:
        index, size = pick(c, model, requests, EVIDENCE_FILLS)
        return index, size, c.switched(index, size)

    rules: list[tuple[str, Rule]] = [
        *((f"evidence {v:g} fills", by_evidence(v)) for v in values),
        (f"evidence {EVIDENCE_FILLS:g}, settled", by_evidence(EVIDENCE_FILLS, settle=True)),
        ("best in hindsight", hindsight),
        ("the default alone", lambda c: (0, 0, c.hit_rate[0])),
        (f"evidence {EVIDENCE_FILLS:g}, switched in", switched_in),
    ]
    header = f"{'rule':24s} {'held':>6s} {'mean hit':>9s} {'mean window':>12s}"
    print(f"{header}  picks that differ from evidence 0")
    baseline = {c.label + str(c.pct): pick(c, model, requests, 0.0)[0] for c in curves}
    for name, rule in rules:
        held = judged = 0
        total = windows = 0.0
        changed: list[str] = []
        for c in curves:
            index, size, rate = rule(c)
            total += rate
            windows += size
            before = baseline[c.label + str(c.pct)]
            if index != before:
                changed.append(f"{c.label} {c.pct:g}% {c.hit_rate[before]:.4f}->{rate:.4f}")
            other = best_other(store, args.model, c, args.requests)
            if other is not None:
                judged += 1
                held += rate >= other - HIT_SLACK
        shown = f"{held}/{judged}" if judged else "-"
        mean_hit, mean_window = total / len(curves), windows / len(curves)
        print(f"{name:24s} {shown:>6s} {mean_hit:9.4f} {mean_window:12.0f}  {'; '.join(changed)}")


if __name__ == "__main__":
    main()
