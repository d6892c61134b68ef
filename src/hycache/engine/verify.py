"""``hycache verify``: a cache hit must compute what a cold run computes.

For every architecture x policy x workload: run the workload through the engine with the cache
(requests interleaved, memory bounded, entries evicted), then run every request again cold (no
cache: one prefill of the whole prompt) and compare the last prompt token's logits and the
greedy continuation (and the logits of every decode step while the continuations agree). A
continuation that differs where the cold run's top-2 logits are closer than the tolerance is a
near-tie (reported, not a failure). Any delta above the tolerance, any other mismatch or any
owner-tag violation (stale or misfiled data read) fails the cell.

With ``inject`` the engine breaks the hit path on purpose and counts how often the fault stored
wrong data and how often a hit read it (it *fired*; ``hycache.engine.faults``); ``run_verify``
prints both. Exit codes: 0 every cell passed (and something was reused), 1 a difference (or
nothing reused), 3 the injected fault never fired, so the run cannot show it would be caught.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from hycache.cache.presets import KNOBS, build_cache
from hycache.engine.archs import init_model
from hycache.engine.engine import RequestResult
from hycache.engine.faults import FaultCountingEngine
from hycache.engine.workloads import SessionSource, generate_turns
from hycache.errors import CapacityError, ConfigError
from hycache.memory.layouts import unified_layout
from hycache.spec.model import ModelSpec

if TYPE_CHECKING:
    import torch

    from hycache.cache.facade import HybridPrefixCache
    from hycache.engine.model import LoadedModel

#: float64 runs are bounded by the float32 islands in transformers' recurrent mixers (their
#: gates are computed with ``A_log.float()``): deltas of ~1e-7 remain.
DEFAULT_TOLERANCE = {"float32": 1e-4, "float64": 1e-5}
POLICIES = tuple(KNOBS)


@dataclass
class CellResult:
    """One architecture x policy x workload."""

    arch: str
    policy: str
    workload: str
    requests: int = 0
    failed: int = 0
    prompt_tokens: int = 0
    reused_tokens: int = 0
    #: of the prompt tokens reused or read: restored from published prefixes, read in place
    published_tokens: int = 0
    in_place_tokens: int = 0
    requests_hit: int = 0
    evictions: int = 0
    checkpoints: int = 0
    max_delta: float = 0.0
    mismatches: int = 0
    near_ties: int = 0
    violations: list[str] = field(default_factory=list)
    waits: int = 0
    peak_bytes: int = 0
    budget_bytes: int = 0
    page_size: int = 0
    seconds: float = 0.0
    tolerance: float = 0.0
    #: how often the injected fault stored wrong data, and how many hits read it (``fired``)
    stored: int = 0
    fired: int = 0
    details: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return self.max_delta <= self.tolerance and not self.mismatches and not self.violations


def default_capacity(spec: ModelSpec) -> int:
    """About 1,600 tokens of KV plus 16 states: several requests fit, a workload evicts."""
    return spec.kv_bytes_per_token * 1600 + spec.state_bytes * 16


def policy_knobs(
    policy: str, spec: ModelSpec, *, chunk: int, inject: str | None
) -> dict[str, object]:
    """Knobs that give each preset chunked prefill of ``chunk`` tokens (and, for
    ``--inject off-grid`` on vllm, the cache's own #54076 reproduction)."""
    if policy == "vllm":
        knobs: dict[str, object] = {"max_num_batched_tokens": chunk}
        if inject == "off-grid" and spec.recurrent is not None:
            block = unified_layout(spec, 16).attn_block
            # dense retention keeps every chunk-end state; chunks are cut on the finer grid of
            # the other group, so about half of those states fall off the recurrent grid
            knobs |= {
                "offgrid": "misplace",
                "other_block_sizes": str(max(1, block // 2)),
                "retention_interval": None,
            }
        return knobs
    if policy == "sglang":
        rec = spec.recurrent
        if rec is not None and chunk < (rec.kernel_chunk or 64):
            # extra_buffer tracks no state in chunks shorter than its grid (SGLang warns so)
            return {"chunked_prefill_size": chunk, "strategy": "no_buffer"}
        return {"chunked_prefill_size": chunk}
    if policy == "hycache":
        return {"token_budget": chunk}
    return {}


def _gap(logits: torch.Tensor) -> float:
    import torch

    top = torch.topk(logits, 2).values
    return float(top[0] - top[1])


def compare(
    cached: RequestResult, cold: RequestResult, tolerance: float
) -> tuple[float, int, int, str | None]:
    """(max |delta|, mismatches, near-ties, description of the first problem)."""
    delta = 0.0
    for step, (a, b) in enumerate(zip(cached.logits, cold.logits, strict=False)):
        delta = max(delta, float((a - b).abs().max()))
        if step >= len(cached.output) or step >= len(cold.output):
            break
        if cached.output[step] != cold.output[step]:
            gap = _gap(b)
            where = f"token {step}: cached {cached.output[step]} vs cold {cold.output[step]}"
            if gap < tolerance:
                return delta, 0, 1, f"near-tie at {where} (top-2 gap {gap:.1e})"
            return delta, 1, 0, f"mismatch at {where} (top-2 gap {gap:.1e})"
    return delta, 0, 0, None


def verify_cell(
    model: LoadedModel,
    arch: str,
    policy: str,
    workload: str,
    *,
    requests: int,
    seed: int,
    capacity: int | None = None,
    chunk: int = 64,
    inject: str | None = None,
    tolerance: float | None = None,
    max_running: int = 2,
    check_owners: bool = True,
    knobs: Mapping[str, object] | None = None,
    cold_memo: dict[tuple[tuple[int, ...], int], RequestResult] | None = None,
) -> CellResult:
    """Run one workload with ``policy`` on ``model`` and compare every request to a cold run."""
    started = time.perf_counter()
    dtype = str(model.dtype).removeprefix("torch.")
    tol = DEFAULT_TOLERANCE.get(dtype, 1e-4) if tolerance is None else tolerance
    budget = default_capacity(model.spec) if capacity is None else capacity
    settings = policy_knobs(policy, model.spec, chunk=chunk, inject=inject) | dict(knobs or {})
    cache: HybridPrefixCache = build_cache(
        model.spec, budget, policy, track_ids=True, **cast(dict[str, Any], settings)
    )
    engine = FaultCountingEngine(
        model, cache, max_running=max_running, inject=inject, check_owners=check_owners
    )
    turns = generate_turns(workload, requests=requests, seed=seed, vocab=model.vocab_size)
    source = SessionSource(turns)
    results = engine.run(source)
    cell = CellResult(arch, policy, workload, tolerance=tol, page_size=cache.page_size)
    memo = {} if cold_memo is None else cold_memo
    for result in results:
        cell.requests += 1
        cell.waits += result.waits
        if result.status != "done":
            cell.failed += 1
            cell.details.append(f"{result.request.rid}: failed: {result.error}")
            continue
        key = (result.request.prompt, result.request.max_new_tokens)
        cold = memo.get(key)
        if cold is None:
            cold = engine.run_cold(*key)
            memo[key] = cold
        delta, mismatch, tie, note = compare(result, cold, tol)
        cell.max_delta = max(cell.max_delta, delta)
        cell.mismatches += mismatch
        cell.near_ties += tie
        if note is not None:
            cell.details.append(f"{result.request.rid} (hit {result.hit}): {note}")
        if delta > tol:
            cell.details.append(
                f"{result.request.rid} (hit {result.hit}/{len(result.request.prompt)}): "
                f"max |delta| {delta:.2e}"
            )
        for violation in result.violations:
            cell.violations.append(f"{result.request.rid}: {violation}")
        cell.checkpoints += len(result.checkpoints)
        cell.in_place_tokens += result.in_place_tokens
    stats = cache.stats()
    cell.published_tokens = stats.published_reused_tokens
    cell.prompt_tokens = stats.prompt_tokens
    cell.reused_tokens = stats.reused_tokens
    cell.requests_hit = stats.requests_hit
    cell.evictions = sum(stats.evictions.values())
    cell.peak_bytes = stats.peak_bytes
    cell.budget_bytes = stats.budget_bytes
    cell.stored = engine.stored
    cell.fired = engine.fired
    cell.seconds = time.perf_counter() - started
    return cell


def split_list(text: str, known: Sequence[str], what: str) -> list[str]:
    """``"a,b"`` -> ["a", "b"]; ``"all"`` -> ``known``."""
    items = [x.strip() for x in text.split(",") if x.strip()]
    if items == ["all"]:
        return list(known)
    if not items:
        raise ConfigError(f"--{what}: empty list")
    return items


def _fmt_delta(x: float) -> str:
    return "0" if x == 0 else f"{x:.1e}"


def table(cells: Sequence[CellResult]) -> str:
    header = (
        "arch",
        "policy",
        "workload",
        "page",
        "requests",
        "prompt tok",
        "reused tok",
        "hits",
        "evicted",
        "max|delta|",
        "mismatch",
        "ties",
        "violations",
        "result",
    )
    rows = [
        (
            c.arch,
            c.policy,
            c.workload,
            str(c.page_size),
            str(c.requests) + (f" ({c.failed} failed)" if c.failed else ""),
            str(c.prompt_tokens),
            str(c.reused_tokens),
            str(c.requests_hit),
            str(c.evictions),
            _fmt_delta(c.max_delta),
            str(c.mismatches),
            str(c.near_ties),
            str(len(c.violations)),
            "PASS" if c.passed else "FAIL",
        )
        for c in cells
    ]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(lines)


@dataclass
class VerifyOutcome:
    cells: list[CellResult]
    exit_code: int


def run_verify(
    archs: Sequence[str],
    policies: Sequence[str],
    workloads: Sequence[str],
    *,
    requests: int = 30,
    seed: int = 0,
    dtype: str = "float32",
    inject: str | None = None,
    capacity: int | None = None,
    tolerance: float | None = None,
    chunk: int = 64,
    max_running: int = 2,
    layers: int = 4,
    hidden: int = 64,
    model_dir: str | None = None,
    check_owners: bool = True,
    knobs: Mapping[str, Mapping[str, object]] | None = None,
    echo: Callable[[str], None] = print,
) -> VerifyOutcome:
    """Verify every combination; print a table per architecture. Exit code 0 (all passed, and
    something was reused), 1 (a difference, or nothing reused) or 3 (``inject`` given and the
    fault never fired in any cell, and nothing differed). CapacityError when no request of a
    cell fits the cache at all."""
    from hycache.engine.model import load_model

    for policy in policies:
        if policy not in POLICIES:
            raise ConfigError(f"unknown policy {policy!r}; known: {', '.join(POLICIES)}")
    cells: list[CellResult] = []
    with tempfile.TemporaryDirectory(prefix="hycache-verify-") as tmp:
        for arch in archs:
            if model_dir is not None:
                directory = Path(model_dir)
            else:
                directory = init_model(
                    arch, Path(tmp) / arch, layers=layers, hidden=hidden, seed=seed
                )
            model = load_model(directory, dtype=dtype)
            label = arch if model_dir is None else f"{arch}:{directory.name}"
            memo: dict[tuple[tuple[int, ...], int], RequestResult] = {}
            arch_cells = []
            for workload in workloads:
                memo.clear()
                for policy in policies:
                    cell = verify_cell(
                        model,
                        label,
                        policy,
                        workload,
                        requests=requests,
                        seed=seed,
                        capacity=capacity,
                        chunk=chunk,
                        inject=inject,
                        tolerance=tolerance,
                        max_running=max_running,
                        check_owners=check_owners,
                        knobs=(knobs or {}).get(policy),
                        cold_memo=memo,
                    )
                    if cell.requests and cell.failed == cell.requests:
                        raise CapacityError(
                            f"{label}/{policy}/{workload}: no request fits a cache of "
                            f"{cell.budget_bytes} bytes ({cell.details[0]}); raise --capacity"
                        )
                    arch_cells.append(cell)
            cells += arch_cells
            echo(f"\n== {label} ({model.model_type}, {dtype}) " + "=" * 40)
            for note in model.notes:
                echo(f"note: {note}")
            echo(table(arch_cells))
            for cell in arch_cells:
                if cell.passed:
                    lines = [d for d in cell.details if "near-tie" in d][:3]
                else:
                    lines = (cell.details + cell.violations)[:5]
                for line in lines:
                    echo(f"  {cell.policy}/{cell.workload}: {line}")
    reused = sum(c.reused_tokens for c in cells)
    failed = [c for c in cells if not c.passed]
    tol = max((c.tolerance for c in cells), default=0.0)
    worst = max((c.max_delta for c in cells), default=0.0)
    echo(
        f"\n{len(cells)} combination(s), {sum(c.requests for c in cells)} requests, "
        f"{reused} prompt tokens reused from the cache, max |delta| {_fmt_delta(worst)} "
        f"(tolerance {tol:g}), {sum(c.near_ties for c in cells)} near-tie(s)"
    )
    echo(
        f"reused by path: restored {reused}, of which from published prefixes "
        f"{sum(c.published_tokens for c in cells)}; read in place "
        f"{sum(c.in_place_tokens for c in cells)}"
    )
    fired = sum(c.fired for c in cells)
    if inject is not None:
        stored = sum(c.stored for c in cells)
        echo(f"fault injected: {inject}")
        echo(
            f"inject {inject}: fired {fired} times (hits that read corrupted data; "
            f"{stored} corrupted entries stored)"
        )
    if failed:
        echo(f"FAIL: {len(failed)} of {len(cells)} combination(s) differ from the cold run")
        return VerifyOutcome(cells, 1)
    if inject is not None and fired == 0:
        echo(
            f"fault not exercised: no hit read data corrupted by {inject} with these "
            "policies and workloads, so this run cannot show that the verifier catches it"
        )
        return VerifyOutcome(cells, 3)
    if reused == 0:
        echo("FAIL: nothing was reused from the cache, so the comparison proves nothing")
        return VerifyOutcome(cells, 1)
    if inject is not None:
        echo(
            f"PASS: every cached run matches its cold run although {inject} fired {fired} "
            "times: the verifier missed the fault"
        )
        return VerifyOutcome(cells, 0)
    echo("PASS: every cached run matches its cold run")
    return VerifyOutcome(cells, 0)
