"""Compare the engines' real per-request hits (the harnesses' JSON lines) with the hycache
presets replayed on the same prompts and byte budgets, and print the fidelity table.

Runs in the project's environment. A cell is one harness output file; its first line names the
engine and its settings (``meta``), from which the preset and its knobs are chosen. The
preset replays prompts only (no output tokens) as the harness did: one request at a time
(``serial``), or by the concurrent protocol (``concurrent``, see ``ProtocolReplay``).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from hycache.cache.facade import HybridPrefixCache
from hycache.cache.lease import Lease, Wait
from hycache.cache.presets import KNOBS, build_cache
from hycache.policy.checkpoint.base import PlanInput
from hycache.sim.request import Request
from hycache.sim.trace import read_trace
from hycache.spec.model import ModelSpec, load_spec

#: Tolerance on the aggregate token hit rate: max(ABS_TOL, REL_TOL * real).
ABS_TOL = 0.003
REL_TOL = 0.02
#: Per-request agreement wanted in every serial cell.
AGREEMENT = 0.95
#: The protocol's prefill token budget per step (vLLM's max_num_batched_tokens, SGLang's
#: chunked_prefill_size).
STEP_TOKENS = 8192


@dataclass
class Cell:
    label: str
    meta: dict[str, object]
    ids: list[str]
    prompt_lens: list[int]
    real: list[int]
    #: concurrent cells: the engine's (first, last) step of every request
    steps: list[tuple[int, int] | None]


def read_cell(path: Path) -> Cell:
    lines = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    meta = lines[0]["meta"]
    rows = lines[1:]
    return Cell(
        path.stem,
        meta,
        [str(r["id"]) for r in rows],
        [int(r["prompt_len"]) for r in rows],
        [int(r["hit"]) for r in rows],
        [tuple(r["steps"]) if r.get("steps") else None for r in rows],
    )


def preset_for(meta: dict[str, object]) -> tuple[str, dict[str, object]]:
    """The preset and knobs that stand for an engine run."""
    if meta["engine"] == "vllm":
        retention = meta["retention"]
        knobs: dict[str, object] = {
            "retention_interval": None if retention == "dense" else int(str(retention)),
        }
        if "gdn_backend" in KNOBS["vllm"]:
            knobs["gdn_backend"] = meta.get("gdn_backend", "flashinfer")
        return "vllm", knobs
    knobs = {"strategy": meta["strategy"]}
    chunk = meta.get("chunked_prefill_size")
    if chunk is not None:
        knobs["chunked_prefill_size"] = chunk
    return "sglang", knobs


def prompts_only(requests: Iterable[Request]) -> Iterable[Request]:
    for r in requests:
        yield Request(r.request_id, r.arrival_s, r.prompt, b"", r.session, r.namespace)


def admit_prompt(cache: HybridPrefixCache, r: Request, *, serial: bool) -> Lease | Wait:
    """Admit ``r``'s prompt (no output). Serial: nothing is prefilled, a state may sit
    anywhere; else chunks of the protocol's step budget on the kernel grid."""
    if serial:
        return cache.admit(
            r.prompt, max_new_tokens=0, session=r.session, namespace=r.namespace, kernel_grid=False
        )
    return cache.admit(
        r.prompt,
        max_new_tokens=0,
        session=r.session,
        namespace=r.namespace,
        token_budget=STEP_TOKENS,
    )


def preset_hits(
    spec: ModelSpec, budget: int, preset: str, knobs: dict[str, object], requests: list[Request]
) -> list[int]:
    """Serial replay of prompts: admit, take the planned checkpoints, finish."""
    cache = build_cache(spec, budget, preset, track_ids=False, **knobs)
    hits = []
    for r in requests:
        lease = admit_prompt(cache, r, serial=True)
        if isinstance(lease, Wait):
            raise RuntimeError("serial replay holds nothing in flight")
        cache.record_planned(lease, up_to=r.prompt_len)
        cache.finish(lease)
        hits.append(lease.hit)
    return hits


@dataclass
class _Prefill:
    request: Request
    lease: Lease
    position: int


class ProtocolReplay:
    """The concurrent fidelity protocol, on the preset side. Requests join a FCFS waiting
    queue at their trace times; every step lasts ``step_s`` and runs at most ``STEP_TOKENS``
    prefill tokens: first the requests already prefilling (in the order they started), then
    waiting requests in order, each matched against the cache when it is first scheduled (a
    request left waiting is matched again later, as both engines do). Each piece is the first
    chunk the preset's own planner cuts from the request's position with what is left of the
    step's budget (so the planner's forced stops and its checkpoints apply to the chunks that
    really run); a piece that does not finish the prompt is cut down to the scheduler's grid
    (vLLM: its block, and a request that gets no whole block waits; SGLang: its page, and no
    request is added after the one it cuts: one chunked request at a time). A
    request whose prefill completes finishes at the end of that step (prompts only), in the
    order of the batch."""

    def __init__(self, cache: HybridPrefixCache, engine: str, step_s: float) -> None:
        self.cache = cache
        self.engine = engine
        self.step_s = step_s
        self.hits: dict[str, int] = {}
        self.steps: dict[str, tuple[int, int]] = {}

    def _piece(self, flight: _Prefill, budget: int) -> int:
        """Run this step's piece of ``flight`` with at most ``budget`` tokens (copying the
        states its plan takes in it) and return where it ends (== position: nothing ran)."""
        cache, lease, pos = self.cache, flight.lease, flight.position
        n = lease.prompt_len
        planner = cache.checkpoint_policy
        kernel = cache.kernel_chunk
        if self.engine == "vllm" and getattr(planner, "internal_checkpoints", False):
            # vLLM's layers export a prefill checkpoint inside a chunk on their own alignment
            # (Mamba2: anywhere) without ending the chunk there
            kernel = int(getattr(planner, "checkpoint_alignment", 1))
        plan = planner.plan(PlanInput(n, pos, lease.kv_hit, cache.page_size, budget, 0, {}, kernel))
        end = plan.chunk_ends[0]
        if self.engine == "vllm" and end < n:
            grid = int(getattr(cache.checkpoint_policy, "scheduler_grid", 1))
            if end % grid:
                return pos
        for point in plan.checkpoints:
            if pos < point.position <= end:
                cache.record_checkpoint(lease, point.position, point.reason)
        flight.position = end
        return end

    def run(self, requests: list[Request]) -> None:
        cache = self.cache
        pending = deque(sorted(requests, key=lambda r: r.arrival_s))
        waiting: deque[Request] = deque()
        running: list[_Prefill] = []
        first: dict[str, int] = {}
        now, step = 0.0, 0
        while pending or waiting or running:
            while pending and pending[0].arrival_s <= now:
                waiting.append(pending.popleft())
            if not waiting and not running:
                now = pending[0].arrival_s
                continue
            budget = STEP_TOKENS
            batch: list[_Prefill] = []
            chunked = False
            for flight in running:
                pos = flight.position
                end = self._piece(flight, budget)
                if end > pos:
                    budget -= end - pos
                    batch.append(flight)
                    chunked = chunked or end < flight.lease.prompt_len
            while waiting and budget > 0 and not (self.engine == "sglang" and chunked):
                request = waiting[0]
                lease = admit_prompt(cache, request, serial=False)
                if isinstance(lease, Wait):
                    break
                flight = _Prefill(request, lease, lease.hit)
                end = self._piece(flight, budget)
                if end == lease.hit:
                    cache.abort(lease)
                    break
                waiting.popleft()
                self.hits[request.request_id] = lease.hit
                first[request.request_id] = step
                budget -= end - lease.hit
                running.append(flight)
                batch.append(flight)
                chunked = end < lease.prompt_len
            if not batch:
                raise RuntimeError(f"nothing runs at {now:.2f}s")
            for flight in batch:
                if flight.position >= flight.lease.prompt_len:
                    cache.finish(flight.lease)
                    running.remove(flight)
                    rid = flight.request.request_id
                    self.steps[rid] = (first[rid], step)
            now += self.step_s
            step += 1


def compare(cell: Cell, spec: ModelSpec, trace: str, knobs_override: dict[str, object]) -> dict:
    requests = list(prompts_only(read_trace(trace, limit=len(cell.ids))))
    preset, knobs = preset_for(cell.meta)
    knobs.update(knobs_override)
    budget = int(str(cell.meta["budget_bytes"]))
    same_steps = None
    if cell.meta.get("mode") == "concurrent":
        cache = build_cache(spec, budget, preset, track_ids=False, **knobs)
        replay = ProtocolReplay(cache, str(cell.meta["engine"]), float(str(cell.meta["step_s"])))
        replay.run(requests)
        mine = [replay.hits[r.request_id] for r in requests]
        schedule = [replay.steps[r.request_id] for r in requests]
        same_steps = sum(a == b for a, b in zip(cell.steps, schedule, strict=True)) / len(mine)
    else:
        mine = preset_hits(spec, budget, preset, knobs, requests)
    total = sum(cell.prompt_lens)
    real_rate = sum(cell.real) / total
    preset_rate = sum(mine) / total
    agree = sum(a == b for a, b in zip(cell.real, mine, strict=True)) / len(mine)
    tol = max(ABS_TOL, REL_TOL * real_rate)
    diffs = [
        (cell.ids[i], cell.prompt_lens[i], cell.real[i], mine[i])
        for i in range(len(mine))
        if cell.real[i] != mine[i]
    ]
    return {
        "cell": cell.label,
        "preset": preset,
        "knobs": knobs,
        "real": real_rate,
        "preset_rate": preset_rate,
        "within": abs(real_rate - preset_rate) <= tol,
        "agreement": agree,
        "same_steps": same_steps,
        "mode": cell.meta.get("mode", "serial"),
        "budget": budget,
        "diffs": diffs,
    }


BLOCK_BYTES = 14_155_776  # one vLLM block of Qwen3-Next (FlashInfer): the budget unit


def _column(res: dict) -> str:
    knobs = res["knobs"]
    suffix = ", concurrent" if res["mode"] == "concurrent" else ""
    if res["preset"] == "vllm":
        retention = knobs["retention_interval"]
        return "vLLM " + ("dense" if retention is None else f"retention {retention}") + suffix
    return f"SGLang {knobs['strategy']}{suffix}"


def markdown(results: list[dict]) -> str:
    """Rows: budgets; per column (engine setting): real / preset / agreement."""
    columns = sorted({_column(r) for r in results}, key=lambda c: (not c.startswith("vLLM"), c))
    budgets = sorted({r["budget"] for r in results})
    cell = {(r["budget"], _column(r)): r for r in results}
    head = "| vLLM blocks (GiB) | " + " | ".join(f"{c}: real / preset / agree" for c in columns)
    lines = [head + " |", "|---" * (len(columns) + 1) + "|"]
    for budget in budgets:
        row = [f"{budget // BLOCK_BYTES:,} ({budget / 2**30:.1f})"]
        for c in columns:
            r = cell.get((budget, c))
            row.append(
                "-"
                if r is None
                else f"{r['real']:.4f} / {r['preset_rate']:.4f} / {r['agreement']:.1%}"
            )
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def disagreements(results: list[dict], model: str) -> str:
    """Every request whose hit differs, per cell: which side reused more."""
    lines = [f"### {model}", ""]
    for r in results:
        if not r["diffs"]:
            continue
        more = sum(1 for d in r["diffs"] if d[3] > d[2])
        lines.append(
            f"- `{r['cell']}` ({len(r['diffs'])}; the preset reused more in {more}): "
            + ", ".join(f"{rid} ({real} vs {mine})" for rid, _n, real, mine in r["diffs"])
        )
    return "\n".join(lines) + "\n\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("cells", nargs="+", help="harness outputs (JSON lines)")
    p.add_argument("--trace", required=True)
    p.add_argument("--model", required=True, help="named spec or config.json")
    p.add_argument("--knob", action="append", default=[], help="NAME=VALUE preset override")
    p.add_argument("--diffs", type=int, default=0, help="list this many disagreeing requests")
    p.add_argument("--json", help="write the results here")
    p.add_argument("--markdown", action="store_true", help="also print a markdown table")
    p.add_argument("--disagreements", help="append every disagreeing request here (markdown)")
    args = p.parse_args(argv)
    spec = load_spec(args.model)
    override = dict(kv.split("=", 1) for kv in args.knob)
    results = []
    print(f"{'cell':<34} {'preset':<8} {'real':>7} {'preset':>7} {'ok':>3} {'agree':>7}")
    for path in args.cells:
        res = compare(read_cell(Path(path)), spec, args.trace, override)
        results.append(res)
        ok = "yes" if res["within"] else "NO"
        print(
            f"{res['cell']:<34} {res['preset']:<8} {res['real']:7.4f} {res['preset_rate']:7.4f} "
            f"{ok:>3} {res['agreement']:7.1%}"
        )
        if res["same_steps"] is not None:
            print(f"    same (first, last) step as the engine: {res['same_steps']:.1%}")
        for d in res["diffs"][: args.diffs]:
            print(f"    request {d[0]} (prompt {d[1]}): real {d[2]}, preset {d[3]}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    if args.markdown:
        print(markdown(results))
    if args.disagreements:
        with open(args.disagreements, "a") as f:
            f.write(disagreements(results, Path(args.model).parent.name or args.model))
    good = all(
        r["within"] and (r["mode"] == "concurrent" or r["agreement"] >= AGREEMENT) for r in results
    )
    return 0 if good else 1


if __name__ == "__main__":
    sys.exit(main())
