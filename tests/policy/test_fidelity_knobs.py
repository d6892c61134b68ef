"""The vllm and sglang preset settings checked against vLLM 0.33.0 / SGLang 0.5.23 behaviour
(benchmarks/fidelity measures the presets against the engines' real cache code)."""

from __future__ import annotations

import pytest

from hycache.cache.presets import build_cache, sglang_state_bytes, sglang_strategy
from hycache.errors import ConfigError
from hycache.memory.layouts import split_pool, unified_layout
from hycache.policy.checkpoint.base import PlanInput
from hycache.policy.checkpoint.sglang import SglangPlanner
from hycache.policy.checkpoint.vllm import VllmAlignPlanner
from hycache.sim.cost import CostModel
from hycache.sim.hardware import HARDWARE, Hardware, hardware_knobs
from hycache.sim.simulate import SimulationConfig, preset_knobs
from hycache.spec.groups import FullAttentionGroup, RecurrentGroup, SlidingWindowGroup
from hycache.spec.model import ModelSpec

QWEN = ModelSpec.named("qwen3-next-80b-a3b")
NEMOTRON = ModelSpec.from_hf_config("data/configs/nemotron_h/config.json")
VLLM_BLOCK_BYTES = 14_155_776  # one Qwen3-Next block with FlashInfer's alignment


def _points(plan: object) -> list[tuple[int, str]]:
    return [(c.position, c.reason) for c in plan.checkpoints]  # type: ignore[attr-defined]


# ====================================================================== vLLM layout
def test_gdn_backend_alignment_sets_the_attention_block() -> None:
    flashinfer = unified_layout(QWEN, 16, alignment=64)
    assert flashinfer.attn_block == 576 and flashinfer.block_bytes == VLLM_BLOCK_BYTES
    assert unified_layout(QWEN, 16).attn_block == 544
    # 1 attention + 3 recurrent groups of 12 layers: a state costs 3 blocks
    assert flashinfer.layers_per_group == 12 and flashinfer.groups == {"full": 1, "recurrent": 3}
    with pytest.raises(ConfigError, match="alignment"):
        unified_layout(QWEN, 16, alignment=0)


def test_preset_block_follows_the_gdn_backend_only_for_gdn() -> None:
    assert build_cache(QWEN, 1 << 36, "vllm").pool.details["attn_block_tokens"] == 576
    triton = build_cache(QWEN, 1 << 36, "vllm", gdn_backend="triton")
    assert triton.pool.details["attn_block_tokens"] == 544
    for backend in ("flashinfer", "triton"):  # Mamba2 layers carry no GDN alignment
        cache = build_cache(NEMOTRON, 1 << 36, "vllm", gdn_backend=backend)
        assert cache.pool.details["attn_block_tokens"] == 2096
    with pytest.raises(ConfigError, match="gdn_backend"):
        build_cache(QWEN, 1 << 36, "vllm", gdn_backend="cutedsl")


def test_layer_groups_take_the_largest_kind_when_close() -> None:
    """vLLM pads 12 sliding-window + 13 full layers to groups of 13, not 12."""
    spec = ModelSpec(
        name="close",
        groups=(
            FullAttentionGroup(layers=13, q_heads=2, kv_heads=1, head_dim=8, dtype_bytes=2),
            SlidingWindowGroup(
                layers=12, q_heads=2, kv_heads=1, head_dim=8, dtype_bytes=2, window=64
            ),
        ),
        hidden_size=64,
        vocab_size=100,
        active_mlp_params_per_token=8192,
        num_layers=25,
    )
    geo = unified_layout(spec, 16)
    assert geo.layers_per_group == 13 and geo.groups == {"full": 1, "swa": 1}


# ====================================================================== vLLM planner
def _vllm(retention: int | None, internal: bool = True) -> VllmAlignPlanner:
    return VllmAlignPlanner(
        576, 576, retention, internal_checkpoints=internal, checkpoint_alignment=576
    )


def test_flashinfer_exports_the_prompt_checkpoint_inside_the_last_chunk() -> None:
    request = PlanInput(20_000, 0, 0, 576, 8192, 0, {}, 64)
    sparse = _vllm(0).plan(request)
    assert sparse.chunk_ends == (8064, 16128, 20_000)
    assert _points(sparse) == [(19_584, "prompt_end")]
    # dense: every chunk also exports the block boundary before its end
    dense = _vllm(None).plan(request)
    assert dense.chunk_ends == (8064, 16128, 20_000)
    assert [p for p, _ in _points(dense)] == [7488, 8064, 15_552, 16_128, 19_584]
    # without a kernel grid (serial replay) the exported states end chunks
    serial = _vllm(None).plan(PlanInput(20_000, 0, 0, 576, 8192, 0))
    assert {7488, 15_552, 19_584} <= set(serial.chunk_ends)


def test_triton_cuts_the_last_chunk_at_the_replay_boundary() -> None:
    plan = _vllm(0, internal=False).plan(PlanInput(20_000, 0, 0, 576, 8192, 0, {}, 64))
    assert plan.chunk_ends == (8064, 16128, 19_584, 20_000)
    assert _points(plan) == [(19_584, "prompt_end")]


def test_every_retention_stops_at_the_shared_prefix_junction() -> None:
    for retention in (None, 0):
        plan = _vllm(retention).plan(PlanInput(6000, 0, 5000, 576, 8192, 0, {}, 64))
        assert 4608 in plan.chunk_ends and (4608, "branch") in _points(plan)


def test_replay_boundary_is_below_the_last_prompt_token() -> None:
    """A block-aligned prompt keeps the state one block down: a resend is capped at n - 1."""
    plan = _vllm(0, internal=False).plan(PlanInput(1152, 0, 0, 576, 8192, 0))
    assert _points(plan) == [(576, "prompt_end")]


# ====================================================================== SGLang
def test_auto_strategy_is_extra_buffer_where_kernels_keep_chunk_states() -> None:
    assert sglang_strategy(QWEN, "auto") == "extra_buffer"
    assert sglang_strategy(NEMOTRON, "auto") == "extra_buffer"
    mamba1 = ModelSpec(
        name="mamba1",
        groups=(
            FullAttentionGroup(layers=2, q_heads=2, kv_heads=1, head_dim=8, dtype_bytes=2),
            RecurrentGroup(
                layers=4,
                mixer="mamba",
                recurrent_state_bytes=256,
                conv_state_bytes=64,
                state_dtype="float32",
                conv_dtype="float32",
                proj_params_per_layer=4096,
            ),
        ),
        hidden_size=64,
        vocab_size=100,
        active_mlp_params_per_token=8192,
        num_layers=6,
    )
    assert sglang_strategy(mamba1, "auto") == "no_buffer"
    assert sglang_strategy(QWEN, "no_buffer") == "no_buffer"
    assert build_cache(QWEN, 1 << 36, "sglang").config.running_slots == 3


def test_sglang_prices_a_state_slot_as_sglang_stores_it() -> None:
    assert sglang_state_bytes(QWEN, "float32") == 77_266_944  # float32 SSM, bf16 conv
    assert sglang_state_bytes(QWEN, "bfloat16") == QWEN.state_bytes
    assert sglang_state_bytes(NEMOTRON, "float32") == 49_082_368
    budget = 4000 * VLLM_BLOCK_BYTES
    pool = build_cache(QWEN, budget, "sglang").pool
    assert pool.budgets["state"] == 346 * 77_266_944
    assert pool.budgets["kv"] // QWEN.kv_bytes_per_token == 1_213_032
    assert split_pool(QWEN, budget).budgets["state"] % QWEN.state_bytes == 0


def test_extra_buffer_tracks_one_state_per_chunk() -> None:
    planner = SglangPlanner("extra_buffer", 1, 256)
    plan = planner.plan(PlanInput(20_000, 512, 512, 1, 8192, 0, {}, 64))
    assert plan.chunk_ends == (8704, 16_896, 20_000)
    assert _points(plan) == [(8704, "chunk"), (16_896, "chunk"), (19_968, "prompt_end")]
    # a chunk shorter than the grid tracks nothing
    assert planner.plan(PlanInput(8240, 0, 0, 1, 8192, 0, {}, 64)).checkpoints[-1].position == 8192


# ====================================================================== hardware
def test_hardware_profiles_pick_the_gdn_prefill_backend() -> None:
    assert {hw.gdn_prefill_backend for hw in HARDWARE.values()} == {"flashinfer"}
    other = Hardware(
        name="other",
        peak_flops=1e14,
        hbm_bandwidth=1e12,
        hbm_bytes=10**10,
        host_to_device_bandwidth=1e10,
    )
    assert other.gdn_prefill_backend == "triton"
    assert hardware_knobs("vllm", other) == {"gdn_backend": "triton"}
    assert hardware_knobs("sglang", other) == {}
    config = SimulationConfig(QWEN, CostModel(QWEN, other))
    assert preset_knobs(config, "vllm") == {"gdn_backend": "triton"}
    pinned = SimulationConfig(
        QWEN, CostModel(QWEN, other), knobs={"vllm": {"gdn_backend": "flashinfer"}}
    )
    assert preset_knobs(pinned, "vllm") == {"gdn_backend": "flashinfer"}
    with pytest.raises(ConfigError, match="gdn_prefill_backend"):
        Hardware(
            name="bad",
            peak_flops=1e14,
            hbm_bandwidth=1e12,
            hbm_bytes=10**10,
            host_to_device_bandwidth=1e10,
            gdn_prefill_backend="cutedsl",
        )
