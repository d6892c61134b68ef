"""``hycache verify --disagg P:D``: every request through a prefill instance (page size P) and
a decode instance (page size D, another process), compared with a cold single-process run.

``DisaggVerifier`` holds the pair for the whole run; ``cell`` runs one architecture x policy x
workload like ``verify_cell`` does (the prefill engine in this process, the decode engine in
the child), one request at a time. Besides the usual comparison a cell fails when a request
moved more or fewer bytes than the analytic minimum (one state at N-1 + the KV of the
positions the decode cache lacked). Each request's transfer is listed in the cell's report.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast

from hycache.cache.presets import build_cache
from hycache.engine.disagg.base import DISAGG_INJECTS, DisaggSpec, Side, TransferReport
from hycache.engine.disagg.messages import DecodeConfig
from hycache.engine.disagg.pair import DisaggPair
from hycache.engine.drafter import SpecDecode
from hycache.engine.engine import Engine
from hycache.engine.verify import (
    DEFAULT_TOLERANCE,
    CellResult,
    ColdMemo,
    cold_run,
    default_capacity,
    policy_knobs,
    score,
)
from hycache.engine.workloads import SessionSource, generate_turns
from hycache.errors import ConfigError

if TYPE_CHECKING:
    from hycache.engine.model import LoadedModel


def _settings(
    side: Side, policy: str, model: LoadedModel, chunk: int, knobs: Mapping[str, object]
) -> tuple[str, dict[str, object]]:
    preset, page = side.resolve(policy)
    own = dict(knobs) if preset == policy else {}
    return preset, policy_knobs(preset, model.spec, chunk=chunk, inject=None) | own | page


def transfer_line(rid: str, prompt: int, r: TransferReport) -> str:
    verdict = "=" if r.minimal else "!="
    return (
        f"{rid}: prompt {prompt}, decode hit {r.decode_hit}: moved {r.moved_bytes} B {verdict} "
        f"minimum {r.minimum_bytes} B (state {r.state_bytes} B + KV of {r.kv_tokens} tokens, "
        f"{r.pages_lacked} decode page(s) lacked)"
    )


class DisaggVerifier:
    """The decode process for a whole ``hycache verify --disagg`` run."""

    def __init__(
        self, spec: DisaggSpec, *, inject: str | None, timeout_s: float = 120.0, threads: int = 1
    ) -> None:
        if inject is not None and inject not in DISAGG_INJECTS:
            raise ConfigError(f"--disagg runs inject only {', '.join(DISAGG_INJECTS)}")
        self.spec = spec
        self.inject = inject
        self.pair = DisaggPair(timeout_s=timeout_s, threads=threads)
        self.moved = 0
        self.minimum = 0

    def __enter__(self) -> DisaggVerifier:
        self.pair.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.pair.close()

    def cell(
        self,
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
        max_running: int = 1,
        check_owners: bool = True,
        knobs: Mapping[str, object] | None = None,
        cold_memo: ColdMemo | None = None,
        spec_decode: SpecDecode | None = None,
    ) -> CellResult:
        """One cell (``verify_cell``'s arguments; ``inject`` is the verifier's, requests run
        one at a time whatever ``max_running`` says, and the decode side decodes plainly)."""
        if spec_decode is not None:
            raise ConfigError("speculative decoding is not supported under --disagg")
        if inject != self.inject:
            raise ConfigError(f"this disaggregated run injects {self.inject}, not {inject}")
        started = time.perf_counter()
        if model.layout.attention_of("swa"):
            raise ConfigError(f"{arch}: --disagg supports full attention + recurrent models")
        dtype = str(model.dtype).removeprefix("torch.")
        tol = DEFAULT_TOLERANCE.get(dtype, 1e-4) if tolerance is None else tolerance
        budget = default_capacity(model.spec) if capacity is None else capacity
        p_preset, p_knobs = _settings(self.spec.prefill, policy, model, chunk, knobs or {})
        d_preset, d_knobs = _settings(self.spec.decode, policy, model, chunk, knobs or {})
        cache = build_cache(
            model.spec, budget, p_preset, track_ids=True, **cast(dict[str, Any], p_knobs)
        )
        engine = Engine(model, cache, max_running=1, check_owners=check_owners)
        config = DecodeConfig(
            str(model.path), dtype, d_preset, budget, d_knobs, check_owners, self.inject
        )
        shake = self.pair.setup(
            engine, p_preset, config, full_last_token=self.inject == "full-last-token"
        )
        label = f"{policy}" if p_preset == d_preset == policy else f"{p_preset}>{d_preset}"
        cell = CellResult(arch, label, workload, tolerance=tol, page_size=shake.decode.page_size)
        cell.report.append(
            f"prefill {shake.prefill.preset} page {shake.prefill.page_size} "
            f"({shake.prefill.pool}) -> decode {shake.decode.preset} page "
            f"{shake.decode.page_size} ({shake.decode.pool})"
        )
        turns = generate_turns(workload, requests=requests, seed=seed, vocab=model.vocab_size)
        source = SessionSource(turns)
        memo = {} if cold_memo is None else cold_memo
        stored = fired = 0
        while not source.exhausted:
            request = source.next_ready()
            if request is None:
                raise ConfigError("the workload has a turn waiting on a turn that never ran")
            outcome = self.pair.run(request)
            result = outcome.as_result(request)
            source.done(result)
            cell.requests += 1
            if result.status != "done":
                cell.failed += 1
                cell.details.append(f"{request.rid}: failed: {result.error}")
                continue
            stored, fired = outcome.stored, outcome.fired
            cell.prompt_tokens += len(request.prompt)
            cell.reused_tokens += outcome.hit
            cell.requests_hit += outcome.hit > 0
            cell.in_place_tokens += outcome.in_place_tokens
            score(cell, result, cold_run(engine, memo, request))
            report = outcome.report
            if report is not None:
                self.moved += report.moved_bytes
                self.minimum += report.minimum_bytes
                cell.report.append(transfer_line(request.rid, len(request.prompt), report))
                if not report.minimal:
                    cell.violations.append(
                        f"{request.rid}: moved {report.moved_bytes} B, analytic minimum "
                        f"{report.minimum_bytes} B"
                    )
        prefill = self.pair.prefill
        cell.stored = stored
        cell.fired = fired + (prefill.fired if prefill is not None else 0)
        cell.seconds = time.perf_counter() - started
        return cell
