"""Presets: named bundles of pool layout + checkpoint + admission + eviction policies, with
knobs named like the real systems' flags. ``build_cache(spec, capacity, preset, **knobs)``.

See docs/presets.md for what each preset mirrors upstream. The ``hycache`` preset's knobs and
builder live in ``hycache.cache.hycache_preset``; ``Knob`` and the value checks in
``hycache.cache.knobs``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping

from hycache.cache.config import CacheConfig
from hycache.cache.facade import HybridPrefixCache
from hycache.cache.hycache_preset import HYCACHE_KNOBS, build_hycache
from hycache.cache.knobs import Knob as Knob  # re-exported: the presets' knob type
from hycache.cache.knobs import KnobValue as KnobValue
from hycache.cache.knobs import (
    admission,
    budget,
    number,
    optional_int,
    positive,
)
from hycache.errors import ConfigError
from hycache.memory.layouts import shared_pool, split_pool, unified_layout, unified_pool
from hycache.policy.admission import AlwaysAdmit
from hycache.policy.checkpoint.marconi import MarconiPlanner
from hycache.policy.checkpoint.sglang import SglangPlanner
from hycache.policy.checkpoint.vllm import VllmAlignPlanner
from hycache.policy.eviction.lru import LRUEviction
from hycache.policy.eviction.marconi import MarconiEviction
from hycache.spec.groups import DTYPE_BYTES
from hycache.spec.model import ModelSpec

KNOBS: dict[str, dict[str, Knob]] = {
    "vllm": {
        "block_size": Knob(16, int, "configured block size (kalign = max(16, it))", "--block-size"),
        "gdn_backend": Knob(
            "flashinfer",
            str,
            "GDN prefill backend: flashinfer (Hopper/Blackwell; checkpoints on a 64-token "
            "grid, exported from inside a chunk) or triton (other GPUs; the scheduler cuts a "
            "chunk at the checkpoint); the simulator takes it from the hardware profile",
            "--gdn-prefill-backend (qwen_gdn_linear_attn.py)",
            ("flashinfer", "triton"),
        ),
        "mamba_cache_mode": Knob(
            "align",
            str,
            "align: states only where a chunk ends on the block grid; none: no "
            "prefix caching of states",
            "--mamba-cache-mode",
            ("align", "none"),
        ),
        "retention_interval": Knob(
            0,
            int,
            "None: keep every chunk-end state; 0: prompt end + shared-prefix boundary; "
            "N: also one per N tokens",
            "--prefix-cache-retention-interval (#45845)",
            optional=True,
        ),
        "scheduler_grid": Knob(
            "min",
            str,
            "grid the scheduler cuts chunks on: the smallest block of all groups "
            "(main, bug #54076) or the recurrent group's block (the fix)",
            "scheduler.py cache_config.block_size / #54076",
            ("min", "mamba"),
        ),
        "other_block_sizes": Knob(
            "",
            str,
            "comma-separated block sizes of other cache groups (drafter, SWA)",
            "kv_cache_groups",
        ),
        "admission": Knob(
            "always",
            str,
            "second_sighting: Marconi-style admission of states",
            "#37898 / #47782",
            ("always", "second_sighting"),
        ),
        "max_num_batched_tokens": Knob(
            8192, int, "prefill token budget per step", "--max-num-batched-tokens", optional=True
        ),
        "offload_states": Knob(
            False,
            bool,
            "tiers: the offloading connector also stores recurrent states (today it persists "
            "attention KV only and skips a hybrid model's external hits)",
            "OffloadingConnector (#41712, #38230)",
        ),
        "offgrid": Knob(
            "drop",
            str,
            "what happens to a state off the grid (misplace = the "
            "bug: published at the grid position below)",
            "#54076",
            ("drop", "misplace"),
        ),
    },
    "sglang": {
        "strategy": Knob(
            "auto",
            str,
            "mamba scheduler strategy; auto: extra_buffer where the recurrent kernel "
            "materialises chunk states (GDN, KDA, Mamba2), else no_buffer, as SGLang "
            "resolves it with overlap scheduling on",
            "--mamba-radix-cache-strategy (arg_groups/overrides.py)",
            ("auto", "no_buffer", "extra_buffer"),
        ),
        "mamba_ssm_dtype": Knob(
            "float32",
            str,
            "dtype SGLang stores the recurrent (SSM) state in (conv state: bfloat16); prices "
            "a state slot; spec: as the model spec stores both",
            "--mamba-ssm-dtype (configs/mamba_utils.py)",
            ("float32", "bfloat16", "float16", "spec"),
        ),
        "page_size": Knob(1, int, "KV page size in tokens (no_buffer needs 1)", "--page-size"),
        "track_interval": Knob(
            256, int, "decode tokens between tracked states", "--mamba-track-interval"
        ),
        "mamba_full_memory_ratio": Knob(
            0.9,
            float,
            "state pool : KV pool memory ratio r (states get r/(1+r))",
            "--mamba-full-memory-ratio",
        ),
        "max_states_per_path": Knob(
            None, int, "cap on states along one path", "--mamba-max-states-per-path", optional=True
        ),
        "session_aware": Knob(
            False,
            bool,
            "entries of live sessions are evicted last",
            "session-aware HiCache eviction",
        ),
        "chunked_prefill_size": Knob(
            8192, int, "prefill token budget per chunk", "--chunked-prefill-size", optional=True
        ),
        "hicache_write_policy": Knob(
            "write_through",
            str,
            "tiers: device -> host movement",
            "--hicache-write-policy",
            ("write_through", "write_through_selective", "write_back"),
        ),
        "hicache_fix_33713": Knob(
            False,
            bool,
            "tiers: demote states on device eviction (false: pruned, no host hit ever)",
            "#33713",
        ),
        "hicache_fix_40680": Knob(
            False, bool, "tiers: write_back demotes interior states (false: dropped)", "#40680"
        ),
        "hicache_fix_39851": Knob(
            False,
            bool,
            "tiers: the host state pool takes the state share of the host bytes (false: sized "
            "like the KV pool, up to twice the bytes promised)",
            "--hicache-ratio / #39851, #24561",
        ),
    },
    "marconi": {
        "alpha": Knob(1.0, float, "weight of FLOP efficiency against recency", "alpha"),
        "bootstrap_multiplier": Knob(
            5,
            int,
            "bootstrap window for tuning alpha, in multiples "
            "of the requests that fill the cache once",
            "bootstrap_multiplier",
        ),
        "page_size": Knob(1, int, "radix tree granularity (token-level in the paper)", "-"),
    },
    "hycache": HYCACHE_KNOBS,
}

# LMCache under vLLM: vLLM's device cache, a KV-only store below it (cache/tierpresets.py)
KNOBS["lmcache"] = {
    **{k: v for k, v in KNOBS["vllm"].items() if k != "offload_states"},
    "store_states": Knob(
        False,
        bool,
        "tiers: LMCache also stores recurrent states (today: KV only)",
        "LMCache #2845, #2863",
    ),
}

#: the presets ``all`` names (``lmcache`` differs from ``vllm`` only with tiers)
MAIN_PRESETS = ("vllm", "sglang", "marconi", "hycache")


def _coerce(preset: str, name: str, value: object) -> KnobValue:
    knob = KNOBS[preset][name]
    null = isinstance(value, str) and value.lower() in ("none", "null")
    if value is None or (null and value not in knob.choices):  # "none" may be a choice
        if knob.optional or knob.default is None:
            return None
        raise ConfigError(f"{preset}.{name} cannot be None")
    try:
        if knob.kind is bool:
            if isinstance(value, str):
                if value.lower() not in ("true", "false", "1", "0"):
                    raise ValueError(value)
                return value.lower() in ("true", "1")
            return bool(value)
        if knob.kind is int and isinstance(value, float) and not value.is_integer():
            raise ValueError(value)
        coerced: KnobValue = knob.kind(value)
    except (TypeError, ValueError):
        raise ConfigError(
            f"{preset}.{name}: {value!r} is not a valid {knob.kind.__name__}"
        ) from None
    if knob.choices and coerced not in knob.choices:
        raise ConfigError(f"{preset}.{name}: {coerced!r} is not one of {knob.choices}")
    if isinstance(coerced, float) and not math.isfinite(coerced):
        raise ConfigError(f"{preset}.{name} must be finite, got {coerced}")
    if isinstance(coerced, int | float) and not isinstance(coerced, bool) and coerced < 0:
        raise ConfigError(f"{preset}.{name} must be >= 0, got {coerced}")
    return coerced


def resolve_knobs(preset: str, overrides: Mapping[str, object]) -> dict[str, KnobValue]:
    """Defaults of ``preset`` with ``overrides`` applied and checked."""
    if preset not in KNOBS:
        raise ConfigError(f"unknown preset {preset!r}; known: {', '.join(KNOBS)}")
    unknown = sorted(set(overrides) - set(KNOBS[preset]))
    if unknown:
        raise ConfigError(f"unknown knob {preset}.{unknown[0]}; known: {', '.join(KNOBS[preset])}")
    values = {name: knob.default for name, knob in KNOBS[preset].items()}
    for name, value in overrides.items():
        values[name] = _coerce(preset, name, value)
    return values


#: FlashInfer's GDN prefill exports checkpoints on this token grid (vLLM gdn_attn.py).
FLASHINFER_GDN_ALIGNMENT = 64


def build_vllm(
    spec: ModelSpec, capacity: int, k: dict[str, KnobValue], track_ids: bool, name: str = "vllm"
) -> HybridPrefixCache:
    block_size = positive("vllm", "block_size", k["block_size"])
    mixer = spec.recurrent.mixer if spec.recurrent is not None else None
    flashinfer = mixer == "gdn" and k["gdn_backend"] == "flashinfer"
    alignment = FLASHINFER_GDN_ALIGNMENT if flashinfer else 1
    pool = unified_pool(spec, capacity, block_size, alignment=alignment, track_ids=track_ids)
    block = unified_layout(spec, block_size, alignment).attn_block
    try:
        others = [int(x) for x in str(k["other_block_sizes"]).split(",") if x.strip()]
    except ValueError:
        raise ConfigError(
            f"vllm.other_block_sizes: {k['other_block_sizes']!r} is not a list of integers"
        ) from None
    grid = block if k["scheduler_grid"] == "mamba" else min([block, *others])
    retention = k["retention_interval"]
    retention = optional_int("vllm", "retention_interval", retention)
    planner = VllmAlignPlanner(
        block,
        grid,
        retention,
        offgrid=str(k["offgrid"]),
        caches_states=k["mamba_cache_mode"] == "align",
        # The layers export a prefill checkpoint (get_prefill_checkpoint_alignment): GDN on
        # FlashInfer on the block grid, Mamba2 anywhere.
        internal_checkpoints=flashinfer or mixer == "mamba2",
        checkpoint_alignment=block if flashinfer else 1,
    )
    return HybridPrefixCache(
        spec,
        pool,
        CacheConfig(
            page_size=block,
            token_budget=budget(k["max_num_batched_tokens"]),
            name=name,
        ),
        checkpoint=planner,
        admission=admission(k["admission"]),
        # a hit holds only the state block at the hit (earlier ones are null blocks), and a
        # request's Mamba groups are freed before its attention group
        eviction=LRUEviction(refresh_state_path=False, states_first=True),
    )


def sglang_strategy(spec: ModelSpec, strategy: str) -> str:
    """``auto`` as SGLang resolves it with overlap scheduling on: ``extra_buffer`` when the
    recurrent kernel materialises intermediate chunk states, else ``no_buffer``."""
    if strategy != "auto":
        return strategy
    recurrent = spec.recurrent
    return "extra_buffer" if recurrent is not None and recurrent.kernel_chunk else "no_buffer"


def sglang_state_bytes(spec: ModelSpec, ssm_dtype: str) -> int:
    """Bytes of one SGLang state slot: the SSM state in ``ssm_dtype``, the conv window in
    bfloat16, over all recurrent layers (``BaseLinearStateParams.mamba_cache_per_req``)."""
    rec = spec.recurrent
    if rec is None:
        return 0
    ssm = rec.recurrent_state_bytes // DTYPE_BYTES[rec.state_dtype] * DTYPE_BYTES[ssm_dtype]
    conv = rec.conv_state_bytes // DTYPE_BYTES[rec.conv_dtype] * DTYPE_BYTES["bfloat16"]
    return (ssm + conv) * rec.layers


def build_sglang(
    spec: ModelSpec, capacity: int, k: dict[str, KnobValue], track_ids: bool
) -> HybridPrefixCache:
    page = positive("sglang", "page_size", k["page_size"])
    strategy = sglang_strategy(spec, str(k["strategy"]))
    if strategy == "no_buffer" and page != 1:
        raise ConfigError("sglang.strategy=no_buffer needs page_size 1 (use extra_buffer)")
    interval = positive("sglang", "track_interval", k["track_interval"])
    if interval % page:
        raise ConfigError(f"sglang.track_interval {interval} must be a multiple of page {page}")
    ratio = k["mamba_full_memory_ratio"]
    ratio = number("sglang", "mamba_full_memory_ratio", ratio)
    dtype = str(k["mamba_ssm_dtype"])
    state = None if dtype == "spec" else sglang_state_bytes(spec, dtype) or None
    pool = split_pool(spec, capacity, page, ratio, state_bytes=state, track_ids=track_ids)
    cap = k["max_states_per_path"]
    cap = optional_int("sglang", "max_states_per_path", cap)
    return HybridPrefixCache(
        spec,
        pool,
        CacheConfig(
            page_size=page,
            # the request's own slot, plus the two ping-pong track slots of extra_buffer
            # (HybridReqToTokenPool.alloc, get_mamba_tracking_slots with overlap)
            running_slots=1 + (2 if strategy == "extra_buffer" else 0),
            token_budget=budget(k["chunked_prefill_size"]),
            name="sglang",
        ),
        checkpoint=SglangPlanner(
            strategy, page, interval, spec.recurrent.kernel_chunk if spec.recurrent else None
        ),
        admission=AlwaysAdmit(max_states_per_path=cap),
        eviction=LRUEviction(refresh_state_path=False, session_aware=bool(k["session_aware"])),
    )


def build_marconi(
    spec: ModelSpec, capacity: int, k: dict[str, KnobValue], track_ids: bool
) -> HybridPrefixCache:
    page = positive("marconi", "page_size", k["page_size"])
    alpha = k["alpha"]
    alpha = number("marconi", "alpha", alpha)
    return HybridPrefixCache(
        spec,
        shared_pool(spec, capacity, page, track_ids=track_ids),
        CacheConfig(
            page_size=page,
            name="marconi",
        ),
        checkpoint=MarconiPlanner(),
        admission=AlwaysAdmit(),
        eviction=MarconiEviction(alpha),
    )


BUILDERS: dict[str, Callable[[ModelSpec, int, dict[str, KnobValue], bool], HybridPrefixCache]] = {
    "vllm": build_vllm,
    "lmcache": functools.partial(build_vllm, name="lmcache"),
    "sglang": build_sglang,
    "marconi": build_marconi,
    "hycache": build_hycache,
}


def build_cache(
    spec: ModelSpec,
    capacity_bytes: int,
    preset: str = "hycache",
    *,
    track_ids: bool = True,
    **knobs: object,
) -> HybridPrefixCache:
    """A cache for ``spec`` holding at most ``capacity_bytes``, configured like ``preset``.
    Unknown presets or knobs and invalid values raise ConfigError naming them.
    ``track_ids=False``: accounting only (the simulator), no real page/slot ids."""
    capacity = _capacity(capacity_bytes)
    if not isinstance(spec, ModelSpec):
        raise ConfigError(f"spec must be a ModelSpec, got {type(spec).__name__}")
    values = resolve_knobs(preset, knobs)
    return BUILDERS[preset](spec, capacity, values, track_ids)


def _capacity(value: object) -> int:
    """A byte budget: a positive int, or a finite whole float (``1e9``)."""
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"capacity_bytes must be a whole number of bytes, got {value!r}")
    if value < 1:
        raise ConfigError(f"capacity_bytes (the byte budget) must be positive, got {value}")
    return value
