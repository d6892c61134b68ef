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

With ``spec_decode`` the cached runs decode speculatively (``hycache.engine.spec_decode``) while
the cold runs decode plainly, so every cell also compares speculative with plain greedy
decoding; the cell counts drafted and accepted draft tokens. ``oracle:K`` drafts come from the
cold runs (``hycache.engine.drafter.reference_drafter``).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from hycache.cache.presets import KNOBS, build_cache
from hycache.engine.drafter import SpecDecode, reference_drafter
from hycache.engine.engine import Engine, EngineRequest, RequestResult
from hycache.engine.tiers.config import TIER_INJECTS
from hycache.engine.verify_tiers import TierRun, tier_totals
from hycache.engine.workloads import SessionSource, generate_turns
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
    #: speculative decoding: draft tokens proposed and accepted
    drafted: int = 0
    accepted: int = 0
    details: list[str] = field(default_factory=list)
    #: lines printed under the table whatever the outcome (e.g. per-request transfers)
    report: list[str] = field(default_factory=list)
    #: with tiers: prompt tokens reused beyond the device's hit, per tier; of them, from
    #: objects another instance wrote; per tier its counters (``TierCounters`` as a dict)
    tier_tokens: dict[str, int] = field(default_factory=dict)
    foreign_tokens: int = 0
    instance: int = 1
    tier_counters: dict[str, dict[str, int]] = field(default_factory=dict)

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


ColdMemo = dict[tuple[tuple[int, ...], int], RequestResult]


def cold_run(engine: Engine, memo: ColdMemo, request: EngineRequest) -> RequestResult:
    """The cold run of ``request``'s prompt (memoised: every policy compares with the same)."""
    key = (request.prompt, request.max_new_tokens)
    cold = memo.get(key)
    if cold is None:
        cold = engine.run_cold(*key)
        memo[key] = cold
    return cold


def score(cell: CellResult, result: RequestResult, cold: RequestResult) -> None:
    """Count a finished request against its cold run into ``cell``."""
    delta, mismatch, tie, note = compare(result, cold, cell.tolerance)
    cell.max_delta = max(cell.max_delta, delta)
    cell.mismatches += mismatch
    cell.near_ties += tie
    if note is not None:
        cell.details.append(f"{result.request.rid} (hit {result.hit}): {note}")
    if delta > cell.tolerance:
        cell.details.append(
            f"{result.request.rid} (hit {result.hit}/{len(result.request.prompt)}): "
            f"max |delta| {delta:.2e}"
        )
    for violation in result.violations:
        cell.violations.append(f"{result.request.rid}: {violation}")


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
    spec_decode: SpecDecode | None = None,
    tiers: TierRun | None = None,
) -> CellResult:
    """Run one workload with ``policy`` on ``model`` and compare every request to a cold run.
    With ``tiers`` the engine runs over that tier chain (``inject`` may then name a store
    fault of ``TIER_INJECTS``)."""
    started = time.perf_counter()
    dtype = str(model.dtype).removeprefix("torch.")
    tol = DEFAULT_TOLERANCE.get(dtype, 1e-4) if tolerance is None else tolerance
    budget = default_capacity(model.spec) if capacity is None else capacity
    settings = policy_knobs(policy, model.spec, chunk=chunk, inject=inject) | dict(knobs or {})
    cache: HybridPrefixCache = build_cache(
        model.spec, budget, policy, track_ids=True, **cast(dict[str, Any], settings)
    )
    chain = None if tiers is None else tiers.build(model, cache.page_size, inject)
    engine_inject = None if inject in TIER_INJECTS else inject
    engine = Engine(
        model,
        cache,
        max_running=max_running,
        inject=engine_inject,
        check_owners=check_owners,
        spec_decode=spec_decode,
        tiers=chain,
    )
    memo: ColdMemo = {} if cold_memo is None else cold_memo
    if engine.spec is not None and engine.spec.spec.drafter == "oracle":
        engine.spec.drafter = reference_drafter(lambda r: cold_run(engine, memo, r).output)
    turns = generate_turns(workload, requests=requests, seed=seed, vocab=model.vocab_size)
    source = SessionSource(turns)
    results = engine.run(source)
    cell = CellResult(arch, policy, workload, tolerance=tol, page_size=cache.page_size)
    for result in results:
        cell.requests += 1
        cell.waits += result.waits
        if result.status != "done":
            cell.failed += 1
            cell.details.append(f"{result.request.rid}: failed: {result.error}")
            continue
        score(cell, result, cold_run(engine, memo, result.request))
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
    cell.stored = engine.faults.stored
    cell.fired = engine.faults.fired
    if engine.spec is not None:
        cell.drafted = engine.spec.stats.drafted
        cell.accepted = engine.spec.stats.accepted
    if chain is not None:
        totals = tier_totals(chain, inject)
        cell.tier_tokens, cell.foreign_tokens = totals.tokens, totals.foreign
        cell.tier_counters = totals.counters
        if inject in TIER_INJECTS:
            cell.stored, cell.fired = totals.stored, totals.fired
        if tiers is not None and tiers.clear_after:
            chain.clear()
        chain.close()
    cell.seconds = time.perf_counter() - started
    return cell
