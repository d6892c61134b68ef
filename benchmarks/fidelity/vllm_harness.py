"""Drive vLLM's real v1 Scheduler and KVCacheManager with a trace, without a model or a GPU.

Runs in the vLLM virtual environment (see setup_engines.sh), not the project's. What is real:
``VllmConfig`` built by ``EngineArgs`` from a folder holding the model's config.json; the
per-layer KV cache specs as the model's layers declare them (built here from the model class's
own state-shape/dtype helpers, because building the layers needs a GPU); the grouping and
block count (``get_global_kv_cache_groups`` / ``get_kv_cache_configs``); the ``Scheduler``
(admission, chunked prefill, Mamba block-aligned splits, internal checkpoints) and its
``KVCacheManager`` (hashing, hits, LRU eviction, retention). What is stubbed: the model runner
(every request whose prefill completes samples one dummy token; prompts only), and the
hybrid block size, which upstream derives from built layers in
``Platform._align_hybrid_block_size`` and which is re-derived here with the same formula.

Writes one JSON line per request: ``{"id", "prompt_len", "hit"}`` where ``hit`` is the
prefill's ``num_local_cached_tokens``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import time

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
os.environ.setdefault("VLLM_ALLOW_LONG_MAX_MODEL_LEN", "1")

# vLLM's smallest attention kernel block (FlashAttention / FlashInfer: multiples of 16).
ATTN_KERNEL_BLOCK = 16
# FlashInfer's GDN prefill exports checkpoints on a 64-token grid (gdn_attn.py).
FLASHINFER_GDN_ALIGNMENT = 64


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


def build_config(args, max_len: int):
    from vllm.engine.arg_utils import EngineArgs

    retention = None if args.retention == "dense" else int(args.retention)
    engine_args = EngineArgs(
        model=model_folder(args.model_config, args.work),
        skip_tokenizer_init=True,
        load_format="dummy",
        enable_prefix_caching=True,
        max_model_len=max_len,
        max_num_batched_tokens=args.max_num_batched_tokens,
        max_num_seqs=args.max_num_seqs,
        prefix_cache_retention_interval=retention,
    )
    config = engine_args.create_engine_config()
    # The engine core resolves the layout from the GPU workers' backends; FlashAttention's
    # default (NHD) is not block-outermost, and all pages are padded to one size anyway.
    config.cache_config.kv_cache_layout = "NHD"
    return config


def mixer_kind(hf_config, index: int) -> str:
    """'attention' or 'mamba' for layer ``index`` (Qwen3-Next / Qwen3.5 and Nemotron-H)."""
    types = getattr(hf_config, "layer_types", None)
    if types:
        kind = types[index]
        if kind in ("full_attention", "attention"):
            return "attention"
        return "mamba" if kind in ("linear_attention", "mamba", "mamba2") else "none"
    pattern = getattr(hf_config, "hybrid_override_pattern", None)
    if pattern:
        ch = pattern[index]
        return {"*": "attention", "M": "mamba"}.get(ch, "none")
    interval = getattr(hf_config, "full_attention_interval", None)
    if interval:
        return "attention" if (index + 1) % interval == 0 else "mamba"
    raise SystemExit("cannot tell the layer types of this model")


def layer_specs(config, backend: str):
    """The per-layer KV cache specs the model's layers declare on a GPU with ``backend`` as
    the GDN prefill backend, after ``_align_hybrid_block_size``."""
    from vllm.model_executor.models import ModelRegistry
    from vllm.v1.attention.backends.registry import MambaAttentionBackendEnum
    from vllm.v1.kv_cache_interface import FullAttentionSpec, MambaSpec

    model_config = config.model_config
    cache_config = config.cache_config
    hf = model_config.hf_text_config
    model_cls, _ = ModelRegistry.resolve_model_cls(
        model_config.architecture, model_config=model_config
    )
    dtype = model_config.dtype
    kv_heads = model_config.get_num_kv_heads(config.parallel_config)
    head = model_config.get_head_size()
    attn_1 = FullAttentionSpec(
        block_size=1, num_kv_heads=kv_heads, head_size=head, dtype=dtype
    ).page_size_bytes
    shapes = tuple(model_cls.get_mamba_state_shape_from_config(config))
    dtypes = tuple(model_cls.get_mamba_state_dtype_from_config(config))
    mamba_page = MambaSpec(shapes=shapes, dtypes=dtypes, block_size=-1).page_size_bytes
    is_gdn = hasattr(hf, "linear_num_value_heads")
    # Platform._align_hybrid_block_size: kernel alignment, lcm'd with the prefill checkpoint
    # alignment of the Mamba layers in align mode (FlashInfer GDN: 64; Mamba2: 1).
    kalign = max(ATTN_KERNEL_BLOCK, cache_config.block_size)
    checkpoint_alignment = None
    if is_gdn and backend == "flashinfer":
        checkpoint_alignment = FLASHINFER_GDN_ALIGNMENT
    elif not is_gdn:
        checkpoint_alignment = 1  # MambaMixer2.get_prefill_checkpoint_alignment
    kalign = math.lcm(kalign, checkpoint_alignment or 1)
    block = kalign * -(-mamba_page // (kalign * attn_1))
    block = ATTN_KERNEL_BLOCK * -(-block // ATTN_KERNEL_BLOCK)
    cache_config.block_size = block
    cache_config.mamba_block_size = block
    padded = block * attn_1
    cache_config.mamba_page_size_padded = padded if padded != mamba_page else None
    mamba_type = MambaAttentionBackendEnum.GDN_ATTN if is_gdn else MambaAttentionBackendEnum.MAMBA2
    specs = {}
    for i in range(hf.num_hidden_layers):
        kind = mixer_kind(hf, i)
        if kind == "attention":
            specs[f"model.layers.{i}.self_attn.attn"] = FullAttentionSpec(
                block_size=block, num_kv_heads=kv_heads, head_size=head, dtype=dtype
            )
        elif kind == "mamba":
            extra = {}
            if checkpoint_alignment is not None:
                # The layer exports prefill checkpoints: one checkpoint block, on the
                # prefix-cache grid (get_mamba_prefill_checkpoint_grid = the mamba block).
                extra = dict(num_prefill_checkpoint_blocks=1, prefill_checkpoint_alignment=block)
            specs[f"model.layers.{i}.mixer"] = MambaSpec(
                shapes=shapes,
                dtypes=dtypes,
                block_size=block,
                page_size_padded=cache_config.mamba_page_size_padded,
                mamba_type=mamba_type,
                mamba_cache_mode=cache_config.mamba_cache_mode,
                **extra,
            )
    return specs, block, attn_1


def build_scheduler(config, specs, budget_bytes: int):
    from vllm.utils.hashing import get_hash_fn_by_name
    from vllm.v1.core.kv_cache_planning import get_global_kv_cache_groups, get_kv_cache_configs
    from vllm.v1.core.kv_cache_utils import (
        generate_scheduler_kv_cache_config,
        get_request_block_hasher,
        init_none_hash,
        resolve_cache_hit_alignment_tokens,
        resolve_kv_cache_block_sizes,
    )
    from vllm.v1.structured_output import StructuredOutputManager

    groups = get_global_kv_cache_groups(config, [specs])
    kv_configs = get_kv_cache_configs(config, [specs], [budget_bytes], groups)
    sched_config = generate_scheduler_kv_cache_config(kv_configs)
    config.cache_config.num_gpu_blocks = sched_config.num_blocks
    config.cache_config.block_size = min(
        g.kv_cache_spec.block_size
        for g in sched_config.kv_cache_groups
        if g.kv_cache_spec.prefix_cacheable
    )
    block_size, hash_block_size = resolve_kv_cache_block_sizes(sched_config, config)
    alignment = resolve_cache_hit_alignment_tokens(
        sched_config, config, block_size, hash_block_size
    )
    for kv in (*kv_configs, sched_config):
        kv.hash_block_size = hash_block_size
        kv.cache_hit_alignment_tokens = alignment
    scheduler_cls = config.scheduler_config.get_scheduler_cls()
    scheduler = scheduler_cls(
        vllm_config=config,
        kv_cache_config=sched_config,
        structured_output_manager=StructuredOutputManager(config),
        block_size=block_size,
        hash_block_size=hash_block_size,
        log_stats=True,
    )
    hash_fn = get_hash_fn_by_name(config.cache_config.prefix_caching_hash_algo)
    init_none_hash(hash_fn)
    hasher = get_request_block_hasher(hash_block_size, hash_fn, config.num_hash_lookahead_tokens)
    return scheduler, sched_config, hasher


def describe(sched_config) -> str:
    parts = []
    for g in sched_config.kv_cache_groups:
        spec = g.kv_cache_spec
        parts.append(f"{type(spec).__name__}(block {spec.block_size}, {len(g.layer_names)} layers)")
    return f"{sched_config.num_blocks} blocks; groups: " + ", ".join(parts)


class Driver:
    """The engine loop without a model: schedule, fake a runner output, update."""

    def __init__(self, scheduler, hasher):
        from vllm.sampling_params import SamplingParams
        from vllm.v1.outputs import ModelRunnerOutput
        from vllm.v1.request import Request

        self.scheduler = scheduler
        self.hasher = hasher
        self._Request = Request
        self._Output = ModelRunnerOutput
        self._params = SamplingParams(max_tokens=1, ignore_eos=True)
        self.hits: dict[str, int] = {}
        self.done: set[str] = set()
        self.steps = 0
        self.first_step: dict[str, int] = {}
        self.last_step: dict[str, int] = {}
        self.chunks: dict[str, list[int]] = {}
        self.states: dict[str, list[int]] = {}

    def trace_states(self) -> None:
        """Debug: record where each request's cached Mamba states (group of the first Mamba
        group) sit, by observing the block pool's cache_full_blocks."""
        from vllm.v1.kv_cache_interface import MambaSpec

        pool = self.scheduler.kv_cache_manager.block_pool
        groups = self.scheduler.kv_cache_config.kv_cache_groups
        mamba = next(i for i, g in enumerate(groups) if isinstance(g.kv_cache_spec, MambaSpec))
        original = pool.cache_full_blocks

        def observed(
            request,
            blocks,
            num_cached_blocks,
            num_full_blocks,
            block_size,
            kv_cache_group_id,
            block_mask=None,
        ):
            if kv_cache_group_id == mamba:
                for i, blk in enumerate(blocks[num_cached_blocks:num_full_blocks]):
                    if blk.is_null or (block_mask is not None and not block_mask[i]):
                        continue
                    pos = (num_cached_blocks + i + 1) * block_size
                    self.states.setdefault(request.request_id, []).append(pos)
            return original(
                request,
                blocks,
                num_cached_blocks,
                num_full_blocks,
                block_size,
                kv_cache_group_id,
                block_mask,
            )

        pool.cache_full_blocks = observed

    def add(self, req: dict, arrival: float) -> None:
        request = self._Request(
            request_id=str(req["id"]),
            prompt_token_ids=req["tokens"],
            sampling_params=self._params,
            pooling_params=None,
            arrival_time=arrival,
            block_hasher=self.hasher,
        )
        self.scheduler.add_request(request)

    def step(self) -> list[tuple[str, int]]:
        """One engine step; the requests that finished in it, with their prefill hit."""
        out = self.scheduler.schedule()
        if out.total_num_scheduled_tokens:
            self.steps += 1
        ids = list(out.num_scheduled_tokens)
        for rid, n in out.num_scheduled_tokens.items():
            self.chunks.setdefault(rid, []).append(n)
            self.first_step.setdefault(rid, self.steps - 1)
        sampled = []
        for rid in ids:
            request = self.scheduler.requests[rid]
            finished_prefill = request.num_computed_tokens >= request.num_tokens
            sampled.append([0] if finished_prefill else [])
        runner = self._Output(
            req_ids=ids,
            req_id_to_index={rid: i for i, rid in enumerate(ids)},
            sampled_token_ids=sampled,
        )
        finished = []
        for outputs in self.scheduler.update_from_output(out, runner).values():
            for o in outputs.outputs:
                if o.prefill_stats is not None:
                    self.hits[o.request_id] = o.prefill_stats.num_local_cached_tokens
                if o.finish_reason is not None:
                    finished.append((o.request_id, self.hits.get(o.request_id, 0)))
                    self.done.add(o.request_id)
                    self.last_step[o.request_id] = self.steps - 1
        return finished


def run_serial(driver: Driver, requests: list[dict], progress) -> None:
    for i, req in enumerate(requests):
        driver.add(req, float(i))
        guard = 0
        while str(req["id"]) not in driver.done:
            driver.step()
            guard += 1
            if guard > 10_000:
                raise SystemExit(f"request {req['id']} never finished")
        progress(i)


def run_concurrent(driver: Driver, requests: list[dict], step_s: float, progress) -> None:
    """Requests arrive at their trace times; one engine step lasts ``step_s`` seconds."""
    now = 0.0
    pending = sorted(requests, key=lambda r: r["arrival_s"])
    j = idle = 0
    while j < len(pending) or driver.scheduler.has_requests():
        while j < len(pending) and pending[j]["arrival_s"] <= now:
            driver.add(pending[j], pending[j]["arrival_s"])
            j += 1
        if not driver.scheduler.has_requests():
            now = pending[j]["arrival_s"]
            continue
        before = len(driver.done)
        steps = driver.steps
        driver.step()
        if driver.steps > steps:
            now += step_s
            idle = 0
        else:  # an empty step (it only flushes finished requests) takes no time
            idle += 1
            if idle > 3:
                raise SystemExit(f"nothing could run at {now:.2f}s")
        if len(driver.done) > before:
            progress(len(driver.done) - 1)


def main() -> int:
    p = argparse.ArgumentParser(description="vLLM's real cache code on a trace (prompts only)")
    p.add_argument("--trace", required=True, help="export_trace.py output")
    p.add_argument("--requests", type=int)
    p.add_argument("--model-config", required=True, help="a model's config.json")
    p.add_argument("--budget-bytes", type=int, required=True, help="KV cache memory")
    p.add_argument("--retention", default="0", help="0, N, or dense (None)")
    p.add_argument("--gdn-backend", choices=("flashinfer", "triton"), default="flashinfer")
    p.add_argument("--mode", choices=("serial", "concurrent"), default="serial")
    p.add_argument("--step-s", type=float, default=0.05, help="concurrent: seconds per step")
    p.add_argument("--max-num-batched-tokens", type=int, default=8192)
    p.add_argument("--max-num-seqs", type=int, default=1024)
    p.add_argument("--work", default=os.path.join(os.path.dirname(__file__), ".engines", "work"))
    p.add_argument("--out", required=True)
    p.add_argument("--debug", action="store_true", help="also write chunks and cached states")
    args = p.parse_args()

    requests = read_requests(args.trace, args.requests)
    max_len = max(r["prompt_len"] for r in requests) + 64
    max_len = max(max_len, 262144)
    config = build_config(args, max_len)
    specs, block, _ = layer_specs(config, args.gdn_backend)
    scheduler, sched_config, hasher = build_scheduler(config, specs, args.budget_bytes)
    print(
        f"vllm: attention block {block}; {describe(sched_config)}; hash block "
        f"{scheduler.hash_block_size if hasattr(scheduler, 'hash_block_size') else '?'}",
        file=sys.stderr,
    )
    driver = Driver(scheduler, hasher)
    if args.debug:
        driver.trace_states()
    start = time.time()

    def progress(i: int) -> None:
        if (i + 1) % 200 == 0:
            print(f"  {i + 1} requests, {time.time() - start:.0f}s", file=sys.stderr)

    if args.mode == "serial":
        run_serial(driver, requests, progress)
    else:
        run_concurrent(driver, requests, args.step_s, progress)
    total = sum(r["prompt_len"] for r in requests)
    hit = 0
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        meta = {
            "engine": "vllm",
            "block": block,
            "num_blocks": sched_config.num_blocks,
            "mode": args.mode,
            "step_s": args.step_s if args.mode == "concurrent" else None,
            "retention": args.retention,
            "gdn_backend": args.gdn_backend,
            "budget_bytes": args.budget_bytes,
        }
        f.write(json.dumps({"meta": meta}) + "\n")
        for r in requests:
            h = driver.hits.get(str(r["id"]), 0)
            hit += h
            row = {"id": r["id"], "prompt_len": r["prompt_len"], "hit": h}
            if args.mode == "concurrent":
                rid = str(r["id"])
                row["steps"] = [driver.first_step.get(rid), driver.last_step.get(rid)]
            if args.debug:
                row["chunks"] = driver.chunks.get(str(r["id"]), [])
                row["states"] = driver.states.get(str(r["id"]), [])
            f.write(json.dumps(row) + "\n")
    print(f"vllm: token hit rate {hit / total:.4f} over {len(requests)} requests", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
