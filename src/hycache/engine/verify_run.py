"""``run_verify``: every architecture x policy x workload through ``verify_cell``, one table
per architecture, reuse by path (restored, published, read in place), injected faults counted,
and the exit code (0 pass, 1 a difference or nothing reused, 3 the injected fault never fired).
With tiers: the ``tiers:`` line (``verify_tiers``) and, with several instances per cell,
what the later instances reused of the earlier ones' objects (``verify_instances``).
"""

from __future__ import annotations

import tempfile
import uuid
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hycache.engine.archs import init_model
from hycache.engine.drafter import SpecDecode
from hycache.engine.request import RequestResult
from hycache.engine.tiers.config import TIER_INJECTS, TierSettings
from hycache.engine.verify import POLICIES, CellResult, verify_cell
from hycache.engine.verify_instances import InstanceJob, run_instances
from hycache.engine.verify_summary import instance_lines, tier_lines
from hycache.engine.verify_tiers import TierRun
from hycache.errors import CapacityError, ConfigError

if TYPE_CHECKING:
    from hycache.engine.disagg.base import DisaggSpec


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
            c.policy + (f" #{c.instance}" if c.instance > 1 else ""),
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
    spec_decode: SpecDecode | None = None,
    disagg: DisaggSpec | None = None,
    echo: Callable[[str], None] = print,
    tiers: TierSettings | None = None,
    instances: int = 1,
) -> VerifyOutcome:
    """Verify every combination; print a table per architecture. Exit code 0 (all passed, and
    something was reused), 1 (a difference, or nothing reused) or 3 (``inject`` given and the
    fault never fired in any cell, and nothing differed). CapacityError when no request of a
    cell fits the cache at all. ``tiers``: run over host/disk/Redis tiers (a fresh chain per
    cell; ``instances`` > 1: that many engine processes per cell on one Redis store)."""
    from hycache.engine.model import load_model

    for policy in policies:
        if policy not in POLICIES:
            raise ConfigError(f"unknown policy {policy!r}; known: {', '.join(POLICIES)}")
    if instances > 1 and (tiers is None or tiers.redis_url is None):
        raise ConfigError("--instances > 1 share a Redis store: give --tiers ...,redis=URL")
    if inject in TIER_INJECTS and (tiers is None or not {"disk", "redis"} & set(tiers.names)):
        raise ConfigError(
            f"--inject {inject} damages stored objects: give --tiers with disk or redis"
        )
    run_id = uuid.uuid4().hex[:12]
    cells: list[CellResult] = []
    with ExitStack() as stack:
        tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="hycache-verify-"))
        runner = None
        if disagg is not None:  # prefill here, decode in a child process
            from hycache.engine.disagg.verify import DisaggVerifier

            runner = stack.enter_context(DisaggVerifier(disagg, inject=inject))
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
                    options: dict[str, Any] = {
                        "requests": requests,
                        "seed": seed,
                        "capacity": capacity,
                        "chunk": chunk,
                        "inject": inject,
                        "tolerance": tolerance,
                        "max_running": max_running,
                        "check_owners": check_owners,
                        "knobs": (knobs or {}).get(policy),
                    }
                    run = None
                    if tiers is not None:
                        name = f"{arch}-{policy}-{workload}".replace(":", "_")
                        run = TierRun(
                            tiers,
                            Path(tmp) / f"disk-{name}",
                            f"hycache-verify-{run_id}:{name}",
                            clear_after=instances == 1,
                        )
                    if runner is not None:
                        cell = runner.cell(
                            model, label, policy, workload, cold_memo=memo, **options
                        )
                    else:
                        cell = verify_cell(
                            model,
                            label,
                            policy,
                            workload,
                            cold_memo=memo,
                            spec_decode=spec_decode,
                            tiers=run,
                            **options,
                        )
                    if cell.requests and cell.failed == cell.requests:
                        raise CapacityError(
                            f"{label}/{policy}/{workload}: no request fits a cache of "
                            f"{cell.budget_bytes} bytes ({cell.details[0]}); raise --capacity"
                        )
                    arch_cells.append(cell)
                    if run is not None and instances > 1:
                        job = InstanceJob(directory, dtype, label, policy, workload, run, options)
                        arch_cells += run_instances(cell, job, instances)[1:]
            cells += arch_cells
            echo(f"\n== {label} ({model.model_type}, {dtype}) " + "=" * 40)
            for note in model.notes:
                echo(f"note: {note}")
            echo(table(arch_cells))
            for cell in arch_cells:
                for line in cell.report:
                    echo(f"  {cell.policy}/{cell.workload}: {line}")
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
    for policy in dict.fromkeys(c.policy for c in cells):
        mine = [c for c in cells if c.policy == policy]
        echo(
            f"reused by path ({policy}): restored {sum(c.reused_tokens for c in mine)}, of "
            f"which from published prefixes {sum(c.published_tokens for c in mine)}; "
            f"read in place {sum(c.in_place_tokens for c in mine)}"
        )
    if runner is not None:
        echo(
            f"disaggregated: {runner.moved} bytes moved prefill -> decode, analytic minimum "
            f"{runner.minimum} bytes"
        )
    if tiers is not None:
        for line in tier_lines(cells):
            echo(line)
    if instances > 1:
        for line in instance_lines(cells, instances):
            echo(line)
    fired = sum(c.fired for c in cells)
    accepted = sum(c.accepted for c in cells)
    if spec_decode is not None:
        echo(spec_summary(spec_decode, cells))
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
    if spec_decode is not None and accepted == 0 and inject is None:
        echo(
            "FAIL: no draft token was accepted, so copying back an accepted draft step was "
            "never exercised (only rejections and their KV rollback were)"
        )
        return VerifyOutcome(cells, 1)
    if reused == 0:
        echo("FAIL: nothing was reused from the cache, so the comparison proves nothing")
        return VerifyOutcome(cells, 1)
    if inject == "corrupt-store":
        echo(
            f"PASS: the checksums refused {fired} damaged objects (misses, recomputed): "
            "every cached run matches its cold run"
        )
        return VerifyOutcome(cells, 0)
    if inject is not None:
        echo(
            f"PASS: every cached run matches its cold run although {inject} fired {fired} "
            "times: the verifier missed the fault"
        )
        return VerifyOutcome(cells, 0)
    echo("PASS: every cached run matches its cold run")
    return VerifyOutcome(cells, 0)


def spec_summary(spec: SpecDecode, cells: Sequence[CellResult]) -> str:
    """The drafted and accepted draft tokens of a ``--spec-decode`` run, per policy too."""
    drafted = sum(c.drafted for c in cells)
    accepted = sum(c.accepted for c in cells)
    rate = f"{accepted / drafted:.0%}" if drafted else "-"
    per = ", ".join(
        f"{p} {sum(c.accepted for c in cells if c.policy == p)}"
        for p in dict.fromkeys(c.policy for c in cells)
    )
    return (
        f"spec-decode: drafted={drafted} accepted={accepted} ({spec.label}, acceptance {rate}; "
        f"accepted by policy: {per}); every speculative run compared with plain greedy decoding"
    )
