"""Drive SGLang's real radix cache and prefill scheduling with a trace, without a model or GPU.

Runs in the SGLang virtual environment (see setup_engines.sh), not the project's. What is real:
``ServerArgs`` resolved and published by SGLang itself from a folder holding the model's
config.json (strategy ``auto`` resolves as on a GPU: see the platform note below); the model's
own SGLang config class (state shapes and dtypes); ``UnifiedRadixCache`` with its FULL and
MAMBA components; ``HybridReqToTokenPool`` with its ``MambaPool`` and slot allocator,
``HybridLinearKVPool`` and ``TokenToKVPoolAllocator`` (eviction on allocation); ``Req``,
``PrefillAdder``, ``ScheduleBatch.init_new`` / ``prepare_for_extend`` (mamba track seqlens),
``checkpoint_kv_cache`` and ``release_kv_cache``. The scheduler loop around them
(``Scheduler._get_new_batch_prefill_raw``, ``get_next_batch_to_run``'s stash of the chunked
request, ``process_batch_result_prefill``) is reproduced here, in the same order.

Stubbed: the model forward (every request whose prefill completes samples one dummy token;
prompts only); the per-slot and per-token tensors are tiny (pools keep SGLang's slot and token
counts, sized as SGLang sizes them: states get r / (1 + r) of the budget, r =
mamba_full_memory_ratio, at the model's real bytes per state slot and per KV token); SGLang's
question to the platform whether it can snapshot Mamba states (CUDA answers yes, the CPU
platform no) answers yes, so that ``auto`` and ``extra_buffer`` resolve as on a GPU.

Writes one JSON line per request: ``{"id", "prompt_len", "hit"}`` where ``hit`` is the prefix
the request reused (``req.prefix_len`` at its first extend).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
import warnings

warnings.filterwarnings("ignore")


def read_requests(path: str, limit: int | None) -> list[dict]:
    out = []
    with open(path) as f:
        for line in f:
            if limit is not None and len(out) >= limit:
                break
            obj = json.loads(line)
            tokens: list[int] = []
            for first, length in obj["runs"]:
                tokens.extend(range(first, first + length))
            obj["tokens"] = tokens
            out.append(obj)
    return out


def model_folder(config_path: str, work: str) -> str:
    folder = os.path.join(work, "model-" + os.path.basename(os.path.dirname(config_path)))
    os.makedirs(folder, exist_ok=True)
    shutil.copyfile(config_path, os.path.join(folder, "config.json"))
    return folder


def publish(args, context_len: int):
    """Resolve and publish SGLang's server args as the scheduler process would."""
    import sglang.srt.arg_groups.mamba_hook as mamba_hook
    from sglang.srt import runtime_context as rc
    from sglang.srt.server_args import ServerArgs

    # The platform's answer to "can it snapshot Mamba states" (CUDA: yes; CPU: no).
    mamba_hook._platform_supports_mamba_cache_extra_buffer = lambda: True
    kwargs = dict(
        model_path=model_folder(args.model_config, args.work),
        skip_tokenizer_init=True,
        device="cpu",
        chunked_prefill_size=args.chunked_prefill_size,
        mamba_radix_cache_strategy=args.strategy,
        mamba_full_memory_ratio=args.ratio,
        context_length=context_len,
    )
    if args.strategy == "no_buffer":
        kwargs["disable_overlap_schedule"] = True
    server_args = ServerArgs(**kwargs)
    if args.mamba_chunk:
        # mamba_cache_chunk_size, pre-seeded as SGLang's fixtures do (default: SGLang derives
        # it, max(the config's mamba_chunk_size or FLA's 64, page_size))
        server_args._mamba_cache_chunk_size = args.mamba_chunk
    rc.publish(server_args, role="scheduler")
    from sglang.srt.configs.model_config import ModelConfig

    return server_args, ModelConfig.from_server_args(server_args)


def pool_sizes(args, model_config) -> tuple[int, int, int, int]:
    """SGLang's sizing (kv_cache_configurator._handle_max_mamba_cache): slots from r/(1+r) of
    the budget less the padding slot; the rest of the budget holds KV tokens."""
    hf = model_config.hf_config
    params = hf.mamba2_cache_params
    per_slot = params.mamba_cache_per_req
    ratio = args.ratio
    mamba_budget = args.budget_bytes * ratio / (1 + ratio)
    slots = int((mamba_budget - per_slot) // per_slot)
    full_layers = len(hf.full_attention_layer_ids)
    kv_heads = model_config.get_num_kv_heads(1)
    cell = full_layers * kv_heads * model_config.head_dim * 2 * 2  # K and V, bf16
    rest = args.budget_bytes - (slots + 1) * per_slot
    tokens = int(rest // cell)
    return slots, tokens, per_slot, cell


class Engine:
    """The pools, the tree and the scheduler's prefill loop."""

    def __init__(self, args, server_args, model_config, slots: int, tokens: int, max_reqs: int):
        import torch
        from sglang.srt import runtime_context as rc
        from sglang.srt.configs.mamba_utils import Mamba2CacheParams, Mamba2StateShape
        from sglang.srt.managers.schedule_batch import ScheduleBatch
        from sglang.srt.mem_cache.allocator import TokenToKVPoolAllocator
        from sglang.srt.mem_cache.cache_init_params import CacheInitParams
        from sglang.srt.mem_cache.memory_pool import HybridLinearKVPool, HybridReqToTokenPool
        from sglang.srt.mem_cache.unified_cache.components import ComponentType
        from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache
        from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

        self.rc = rc
        self.model_config = model_config
        hf = model_config.hf_config
        real = hf.mamba2_cache_params
        # Tiny per-slot tensors: one layer, a 1x1 conv state and a 1x1x1 temporal state.
        tiny = Mamba2CacheParams(
            dtype=real.dtype,
            layers=real.layers[:1],
            shape=Mamba2StateShape.create(
                tp_world_size=1,
                intermediate_size=1,
                n_groups=1,
                num_heads=1,
                head_dim=1,
                state_size=1,
                conv_kernel=2,
            ),
        )
        exec_mamba = rc.get_exec().mamba
        schedule = rc.get_schedule()
        self.overlap = not schedule.disable_overlap_schedule
        self.req_to_token_pool = HybridReqToTokenPool(
            size=max_reqs,
            mamba_size=slots,
            mamba_spec_state_size=max_reqs,
            max_context_len=model_config.context_len + 4,
            device="cpu",
            enable_memory_saver=False,
            cache_params=tiny,
            mamba_layer_ids=tiny.layers,
            enable_mamba_extra_buffer=exec_mamba.enable_mamba_extra_buffer,
            enable_mamba_extra_buffer_lazy=exec_mamba.enable_mamba_extra_buffer_lazy,
            enable_overlap_schedule=self.overlap,
        )
        full_ids = list(hf.full_attention_layer_ids)[:1]
        kv_pool = HybridLinearKVPool(
            size=tokens,
            dtype=torch.bfloat16,
            page_size=1,
            head_num=1,
            head_dim=1,
            full_attention_layer_ids=full_ids,
            device="cpu",
            mamba_pool=self.req_to_token_pool.mamba_pool,
        )
        self.allocator = TokenToKVPoolAllocator(
            tokens, dtype=torch.bfloat16, device="cpu", kvcache=kv_pool, need_sort=False
        )
        params = CacheInitParams(
            disable=False,
            req_to_token_pool=self.req_to_token_pool,
            token_to_kv_pool_allocator=self.allocator,
            page_size=1,
            enable_mamba_extra_buffer=exec_mamba.enable_mamba_extra_buffer,
            enable_mamba_extra_buffer_lazy=exec_mamba.enable_mamba_extra_buffer_lazy,
            chunked_prefill_size=schedule.chunked_prefill_size,
            tree_components=(ComponentType.FULL, ComponentType.MAMBA),
        )
        self.tree_cache = UnifiedRadixCache(params)
        self.running_batch = ScheduleBatch(reqs=[], batch_is_full=False)
        self.spec = SpeculativeAlgorithm.from_string(None)
        self.chunked_req = None
        self.waiting: list = []
        self.hits: dict[str, int] = {}
        self.done: set[str] = set()
        self.steps = 0
        self.first_step: dict[str, int] = {}
        self.chunks: dict[str, list[int]] = {}
        self.last_step: dict[str, int] = {}
        self.chunked_prefill_size = schedule.chunked_prefill_size
        self.max_prefill_tokens = schedule.max_prefill_tokens
        self.max_reqs = max_reqs

    def add(self, req: dict) -> None:
        from array import array

        from sglang.srt.managers.schedule_batch import Req
        from sglang.srt.sampling.sampling_params import SamplingParams

        params = SamplingParams(max_new_tokens=1, ignore_eos=True)
        params.normalize(None)
        r = Req(
            str(req["id"]),
            "",
            array("q", req["tokens"]),
            params,
            vocab_size=self.model_config.vocab_size,
        )
        self.waiting.append(r)

    def busy(self) -> bool:
        return bool(self.waiting) or self.chunked_req is not None

    def step(self) -> bool:
        """One scheduling step with a prefill batch; False when nothing ran."""
        from sglang.srt.managers.schedule_batch import ScheduleBatch
        from sglang.srt.managers.schedule_policy import AddReqResult, PrefillAdder
        from sglang.srt.mem_cache.common import checkpoint_kv_cache, release_kv_cache

        # get_next_batch_to_run: publish the chunked request's progress first.
        chunked = self.chunked_req
        if chunked is not None and chunked.extend_end > chunked.prefix_len:
            checkpoint_kv_cache(chunked, self.tree_cache)
        if not self.waiting and self.chunked_req is None:
            return False
        adder = PrefillAdder(
            1,
            self.tree_cache,
            self.allocator,
            self.running_batch,
            1.0,
            self.max_prefill_tokens,
            self.chunked_prefill_size,
            0,
            0,
            max_running_requests=self.max_reqs,
        )
        if self.chunked_req is not None:
            self.chunked_req.init_next_round_input()
            self.chunked_req = adder.add_chunked_req(self.chunked_req)
        mamba_allocator = getattr(self.req_to_token_pool, "mamba_allocator", None)
        if mamba_allocator is not None:
            mamba_allocator.alloc_group_begin(len(self.waiting))
        for req in self.waiting:
            if adder.budget_state() == AddReqResult.OTHER:
                break
            req.init_next_round_input(self.tree_cache)
            res = adder.add_one_req(
                req, has_chunked_req=self.chunked_req is not None, truncation_align_size=None
            )
            if res != AddReqResult.CONTINUE:
                added = adder.can_run_list and req is adder.can_run_list[-1]
                if not added:
                    req.kv.mamba_cow_src_index = None
                    req.kv.mamba_needs_clear = False
                    if req.kv.holds_mamba:
                        mamba_allocator.free(req.kv.mamba_pool_idx.unsqueeze(-1))
                        req.kv.mamba_pool_idx = None
                break
        if mamba_allocator is not None:
            mamba_allocator.alloc_group_end()
        can_run = adder.can_run_list
        if not can_run:
            return self.chunked_req is not None
        chosen = set(can_run)
        self.waiting = [r for r in self.waiting if r not in chosen]
        if adder.new_chunked_req is not None:
            self.chunked_req = adder.new_chunked_req
        if self.chunked_req is not None:
            self.chunked_req.inflight_middle_chunks += 1
        batch = ScheduleBatch.init_new(
            can_run,
            self.req_to_token_pool,
            self.allocator,
            self.tree_cache,
            self.model_config,
            self.overlap,
            self.spec,
            chunked_req=self.chunked_req,
        )
        for req in can_run:
            self.hits.setdefault(req.rid, req.prefix_len)
            self.first_step.setdefault(req.rid, self.steps)
        self.steps += 1
        batch.prepare_for_extend()
        for req in batch.reqs:
            self.chunks.setdefault(req.rid, []).append(req.extend_len)
        # process_batch_result_prefill with one dummy token per finished prefill.
        for req in batch.reqs:
            if req.inflight_middle_chunks <= 0:
                req.output_ids.append(0)
                req.update_finish_state()
                if req.finished():
                    release_kv_cache(req, self.tree_cache, checkpoint=True)
                    self.done.add(req.rid)
                    self.last_step[req.rid] = self.steps - 1
                else:
                    checkpoint_kv_cache(req, self.tree_cache)
            else:
                req.inflight_middle_chunks -= 1
        if self.chunked_req is not None and self.chunked_req.inflight_middle_chunks <= 0:
            pass
        return True


def run_serial(engine: Engine, requests: list[dict], progress) -> None:
    for i, req in enumerate(requests):
        engine.add(req)
        guard = 0
        while str(req["id"]) not in engine.done:
            if not engine.step():
                raise SystemExit(f"request {req['id']} stalled")
            guard += 1
            if guard > 10_000:
                raise SystemExit(f"request {req['id']} never finished")
        progress(i)


def run_concurrent(engine: Engine, requests: list[dict], step_s: float, progress) -> None:
    """The fidelity protocol (docs/benchmarks.md "Fidelity"): requests join the waiting queue
    (FCFS) at their trace times; every step lasts ``step_s`` seconds, whatever it runs; a
    prompt-only request finishes, and its prompt joins the tree, at the end of the step that
    completes its prefill; the next step is scheduled after that (no overlap lag)."""
    now = 0.0
    pending = sorted(requests, key=lambda r: r["arrival_s"])
    j = 0
    while j < len(pending) or engine.busy():
        while j < len(pending) and pending[j]["arrival_s"] <= now:
            engine.add(pending[j])
            j += 1
        if not engine.busy():
            now = pending[j]["arrival_s"]
            continue
        before = len(engine.done)
        if not engine.step():
            raise SystemExit(f"nothing could run at {now:.2f}s with nothing in flight")
        now += step_s
        if len(engine.done) > before:
            progress(len(engine.done) - 1)


def main() -> int:
    p = argparse.ArgumentParser(description="SGLang's real cache code on a trace (prompts only)")
    p.add_argument("--trace", required=True, help="export_trace.py output")
    p.add_argument("--requests", type=int)
    p.add_argument("--model-config", required=True, help="a model's config.json")
    p.add_argument("--budget-bytes", type=int, required=True)
    p.add_argument("--strategy", default="auto", choices=("auto", "no_buffer", "extra_buffer"))
    p.add_argument("--ratio", type=float, default=0.9, help="mamba_full_memory_ratio")
    p.add_argument("--chunked-prefill-size", type=int, default=8192)
    p.add_argument("--mamba-chunk", type=int, default=0, help="override mamba_cache_chunk_size")
    p.add_argument("--max-running", type=int, default=8, help="concurrent: use 256")
    p.add_argument("--mode", choices=("serial", "concurrent"), default="serial")
    p.add_argument("--debug", action="store_true", help="also write each request's chunks")
    p.add_argument("--step-s", type=float, default=0.05, help="concurrent: seconds per step")
    p.add_argument("--work", default=os.path.join(os.path.dirname(__file__), ".engines", "work"))
    p.add_argument("--out", required=True)
    args = p.parse_args()

    requests = read_requests(args.trace, args.requests)
    context_len = max(262144, max(r["prompt_len"] for r in requests) + 64)
    server_args, model_config = publish(args, context_len)
    strategy = args.__dict__["strategy"]
    from sglang.srt import runtime_context as rc

    resolved = rc.get_exec().mamba.mamba_radix_cache_strategy
    slots, tokens, per_slot, cell = pool_sizes(args, model_config)
    print(
        f"sglang: strategy {strategy} -> {resolved}; {slots} state slots of {per_slot} B, "
        f"{tokens} KV tokens of {cell} B; mamba_cache_chunk_size {rc.mamba_cache_chunk_size()}",
        file=sys.stderr,
    )
    engine = Engine(args, server_args, model_config, slots, tokens, args.max_running)
    start = time.time()

    def progress(i: int) -> None:
        if (i + 1) % 200 == 0:
            print(f"  {i + 1} requests, {time.time() - start:.0f}s", file=sys.stderr)

    if args.mode == "serial":
        run_serial(engine, requests, progress)
    else:
        run_concurrent(engine, requests, args.step_s, progress)
    total = sum(r["prompt_len"] for r in requests)
    hit = 0
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        meta = {
            "engine": "sglang",
            "strategy": resolved,
            "mode": args.mode,
            "step_s": args.step_s if args.mode == "concurrent" else None,
            "chunked_prefill_size": args.chunked_prefill_size,
            "budget_bytes": args.budget_bytes,
            "state_slots": slots,
            "kv_tokens": tokens,
        }
        f.write(json.dumps({"meta": meta}) + "\n")
        for r in requests:
            h = engine.hits.get(str(r["id"]), 0)
            hit += h
            rid = str(r["id"])
            row = {"id": r["id"], "prompt_len": r["prompt_len"], "hit": h}
            if args.mode == "concurrent":
                row["steps"] = [engine.first_step.get(rid), engine.last_step.get(rid)]
            if args.debug:
                row["chunks"] = engine.chunks.get(rid, [])
            f.write(json.dumps(row) + "\n")
    rate = hit / total
    print(f"sglang: token hit rate {rate:.4f} over {len(requests)} requests", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
