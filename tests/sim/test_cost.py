"""hycache.sim.cost: hardware profiles, parameter estimates, FLOPs/bytes/time of engine steps."""

from __future__ import annotations

import dataclasses
import math
import random
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hycache.errors import ConfigError
from hycache.sim.cost import CostModel
from hycache.sim.hardware import HARDWARE, Hardware, hardware
from hycache.sim.params import NAMED_MOE, MoEShape, estimate_params, moe_shape_from_hf_config
from hycache.spec.model import (
    NAMED_SPECS,
    FullAttentionGroup,
    ModelSpec,
    RecurrentGroup,
    SlidingWindowGroup,
)
from hycache.spec.named import HF_CONFIGS

QWEN = "qwen3-next-80b-a3b"
MS = 1e-3
CONFIGS = Path(__file__).resolve().parents[2] / "data" / "configs"


@pytest.fixture(scope="module")
def qwen_h200() -> CostModel:
    return CostModel(ModelSpec.named(QWEN), "h200")


def tiny_spec(*, window: int = 8) -> ModelSpec:
    """A small dense spec with all three group kinds (numbers easy to check by hand)."""
    return ModelSpec(
        name="tiny-hybrid",
        groups=(
            FullAttentionGroup(layers=1, q_heads=2, kv_heads=1, head_dim=4, dtype_bytes=2),
            SlidingWindowGroup(
                layers=2, q_heads=2, kv_heads=1, head_dim=4, dtype_bytes=2, window=window
            ),
            RecurrentGroup(
                layers=3,
                mixer="gdn",
                recurrent_state_bytes=64,
                conv_state_bytes=16,
                state_dtype="bfloat16",
                conv_dtype="bfloat16",
                proj_params_per_layer=100,
            ),
        ),
        hidden_size=8,
        vocab_size=32,
        active_mlp_params_per_token=1000,
        num_layers=6,
    )


# ---------------------------------------------------------------------------- hardware


def test_hardware_profiles_carry_datasheet_values() -> None:
    h100, h200, b200 = hardware("h100"), hardware("h200"), hardware("b200")
    assert (h100.peak_flops, h100.hbm_bandwidth, h100.hbm_bytes) == (989e12, 3.35e12, 80e9)
    assert (h200.peak_flops, h200.hbm_bandwidth, h200.hbm_bytes) == (989e12, 4.8e12, 141e9)
    assert (b200.peak_flops, b200.hbm_bandwidth) == (2.25e15, 8.0e12)
    for hw in HARDWARE.values():
        assert 0 < hw.mfu <= 1 and 0 < hw.mbu <= 1
        assert 2 * MS <= hw.step_overhead_s <= 5 * MS
        assert hw.host_to_device_bandwidth == 64e9
        assert hw.effective_flops == hw.peak_flops * hw.mfu
        assert hw.effective_bandwidth == hw.hbm_bandwidth * hw.mbu


def test_hardware_lookup_is_case_insensitive_and_rejects_unknown_names() -> None:
    assert hardware(" H200 ") is HARDWARE["h200"]
    with pytest.raises(ConfigError, match=r"unknown hardware 'a100'.*b200, h100, h200"):
        hardware("a100")
    with pytest.raises(ConfigError):
        CostModel(ModelSpec.named(QWEN), "tpu")


@pytest.mark.parametrize(
    "change",
    [
        {"peak_flops": 0.0},
        {"hbm_bandwidth": -1.0},
        {"hbm_bytes": 0},
        {"host_to_device_bandwidth": math.inf},
        {"mfu": 0.0},
        {"mbu": 1.5},
        {"step_overhead_s": -0.001},
    ],
)
def test_hardware_rejects_invalid_values(change: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        dataclasses.replace(HARDWARE["h100"], **change)


# ---------------------------------------------------------------------------- parameters


def test_moe_shapes_of_the_builtin_models() -> None:
    assert set(NAMED_MOE) == {
        "qwen3-next-80b-a3b",
        "kimi-linear-48b-a3b",
        "nemotron-3-nano-30b-a3b",
        "jamba-1.5-mini",
    }
    q = NAMED_MOE[QWEN]
    # 48 MoE layers x 10 routed experts x (gate, up, down: 3 x 2048 x 512)
    assert (q.experts, q.experts_per_token) == (512, 10)
    assert q.routed_params_per_token == 48 * 10 * 3 * 2048 * 512
    for name, shape in NAMED_MOE.items():
        assert shape.routed_params_per_token < NAMED_SPECS[name].active_mlp_params_per_token
    assert moe_shape_from_hf_config(HF_CONFIGS["qwen3.5-27b"]) is None  # dense
    assert moe_shape_from_hf_config({"model_type": "llama"}) is None


@pytest.mark.parametrize(
    ("name", "total_b", "active_b"),
    [
        # published sizes: Qwen3-Next 80B (3B activated, 3.9B with embeddings), Kimi Linear 48B,
        # Nemotron 3 Nano 31.6B, Jamba 1.5 Mini 52B (12B active), Qwen3.5 27B
        ("qwen3-next-80b-a3b", 79.7, 3.87),
        ("kimi-linear-48b-a3b", 49.1, 3.48),
        ("nemotron-3-nano-30b-a3b", 31.6, 3.58),
        ("jamba-1.5-mini", 51.6, 12.1),
        ("qwen3.5-27b", 26.9, 26.9),
    ],
)
def test_parameter_estimates_match_published_sizes(
    name: str, total_b: float, active_b: float
) -> None:
    params = CostModel(ModelSpec.named(name), "h200").params
    assert params.total / 1e9 == pytest.approx(total_b, abs=0.05)
    assert params.active / 1e9 == pytest.approx(active_b, abs=0.05)


def test_parameter_estimate_formulas() -> None:
    spec = tiny_spec()
    p = estimate_params(spec)
    # attention: full 1 layer + swa 2 layers, each hidden * (2*q + 2*kv) * head_dim = 8*6*4
    assert p.attention == 3 * 8 * 6 * 4
    assert p.recurrent == 3 * 100
    assert p.mlp_active == p.mlp_total == p.mlp_dense_part == 1000
    assert p.embedding == p.lm_head == 32 * 8
    assert p.total == p.active == p.attention + p.recurrent + 1000 + 2 * 256
    assert p.dense_active == p.active - p.embedding
    assert estimate_params(spec, tied_embeddings=True).lm_head == 0
    moe = MoEShape(experts=8, experts_per_token=2, routed_params_per_token=400)
    pm = estimate_params(spec, moe)
    assert pm.mlp_routed_total == 1600
    assert pm.mlp_total == 1000 - 400 + 1600
    assert pm.dense_active == p.dense_active - 400
    with pytest.raises(ConfigError, match="exceed"):
        estimate_params(
            spec, MoEShape(experts=8, experts_per_token=2, routed_params_per_token=2000)
        )


def test_moe_shape_validation_and_coverage() -> None:
    moe = MoEShape(experts=512, experts_per_token=10, routed_params_per_token=100)
    assert moe.coverage(0) == 0.0
    assert moe.coverage(1) == pytest.approx(10 / 512)
    assert moe.coverage(32) == pytest.approx(1 - (1 - 10 / 512) ** 32)
    assert moe.coverage(10_000) == pytest.approx(1.0)
    assert moe.routed_params_total == pytest.approx(100 * 512 / 10)
    with pytest.raises(ConfigError):
        MoEShape(experts=4, experts_per_token=8, routed_params_per_token=1)
    with pytest.raises(ConfigError):
        MoEShape(experts=4, experts_per_token=0, routed_params_per_token=1)


def test_moe_auto_takes_the_spec_own_shape() -> None:
    spec = ModelSpec.named(QWEN)
    assert spec.moe is not None
    assert CostModel(spec, "h200").moe == spec.moe == NAMED_MOE[QWEN]
    assert CostModel(spec, "h200", moe=None).moe is None
    renamed = dataclasses.replace(spec, name="my-qwen")  # the shape travels with the spec
    assert CostModel(renamed, "h200").moe == spec.moe
    assert CostModel(tiny_spec(), "h200").moe is None


def test_a_moe_spec_from_config_json_costs_as_the_builtin_spec() -> None:
    """Qwen3-Next from its published config.json: 79.7B total / 3.87B active parameters and the
    same TTFT as the built-in spec (it used to be costed as a dense 3.9B model)."""
    from_file = ModelSpec.from_hf_config(CONFIGS / "qwen3_next" / "config.json")
    named = ModelSpec.named(QWEN)
    a, b = CostModel(from_file, "h200"), CostModel(named, "h200")
    assert a.moe == b.moe is not None
    assert a.params == b.params
    assert a.params.total / 1e9 == pytest.approx(79.7, abs=0.05)
    assert a.params.active / 1e9 == pytest.approx(3.87, abs=0.05)
    for cached, new in ((0, 4096), (0, 32_768), (8192, 512)):
        assert a.prefill_time(cached, new) == b.prefill_time(cached, new)
    assert a.decode_time([1000, 5000]) == b.decode_time([1000, 5000])
    # the routed experts are read: a 4k-token prefill touches nearly all 512 of them
    assert a.weight_bytes(4096) > 10 * a.weight_bytes(1)


# ---------------------------------------------------------------------------- FLOPs and bytes


def test_prefill_flops_delegate_to_the_spec(qwen_h200: CostModel) -> None:
    spec = qwen_h200.spec
    assert qwen_h200.prefill_flops(1000, 500) == spec.prefill_flops(1000, 500)
    assert qwen_h200.decode_flops([100, 200]) == pytest.approx(
        spec.prefill_flops(100, 1) + spec.prefill_flops(200, 1) + 2 * qwen_h200.lm_head_flops
    )
    with pytest.raises(ValueError):
        qwen_h200.prefill_flops(-1, 5)


def test_decode_flops_are_the_per_sequence_sum_whatever_the_memo_holds() -> None:
    """The memo of per-context FLOPs gives the plain loop's sum, exactly, on contexts met
    before and new ones, repeated within a step, in any order."""
    model = CostModel(ModelSpec.named(QWEN), "h200")
    rng = random.Random(7)
    for _ in range(50):
        contexts = [rng.choice([1, 17, 4096, rng.randrange(1, 200_000)]) for _ in range(40)]
        assert model.decode_flops(contexts) == sum_left_to_right(model, contexts)
        assert model.decode_flops(contexts[::-1]) == sum_left_to_right(model, contexts[::-1])
    assert model.decode_flops([]) == 0.0


def sum_left_to_right(model: CostModel, contexts: list[int]) -> float:
    total = 0.0
    for context in contexts:
        total += model.spec.prefill_flops(context, 1) + model.lm_head_flops
    return total


def test_decode_bytes_formula_on_a_dense_hybrid() -> None:
    spec = tiny_spec(window=8)
    cm = CostModel(spec, "h100")
    assert cm.moe is None and cm.weight_bytes_per_param == 2
    weights = 2 * cm.params.dense_active
    full_kv = 2 * 1 * 4 * 2  # K and V, 1 kv head, head_dim 4, bf16, 1 layer
    swa_kv = 2 * full_kv  # 2 layers
    state = 3 * 80
    assert cm.kv_bytes(5) == full_kv * 5 + swa_kv * 5
    assert cm.kv_bytes(100) == full_kv * 100 + swa_kv * 8  # sliding window capped
    per_seq = [cm.kv_bytes(c) + spec.kv_bytes_per_token + 2 * state for c in (5, 100)]
    assert cm.decode_bytes([5, 100]) == weights + sum(per_seq)
    assert cm.decode_bytes([]) == 0.0
    assert cm.weight_bytes(0) == 0.0 and cm.weight_bytes(7) == weights


def test_weight_bytes_cover_the_experts_a_batch_touches(qwen_h200: CostModel) -> None:
    p, wb = qwen_h200.params, qwen_h200.weight_bytes_per_param
    one = qwen_h200.weight_bytes(1)
    assert one == pytest.approx(wb * (p.active - p.embedding))  # exactly the active parameters
    many = qwen_h200.weight_bytes(100_000)
    assert many == pytest.approx(wb * (p.total - p.embedding))  # every expert
    sizes = [1, 2, 8, 32, 256, 4096]
    touched = [qwen_h200.weight_bytes(n) for n in sizes]
    assert touched == sorted(touched) and len(set(touched)) == len(touched)


def test_step_time_is_the_roofline_plus_overhead(qwen_h200: CostModel) -> None:
    hw = qwen_h200.hw
    prefill, decode = [(0, 3000), (500, 700)], [1000, 20_000, 5]
    flops = qwen_h200.step_flops(prefill, decode)
    data = qwen_h200.step_bytes(prefill, decode)
    expected = max(flops / hw.effective_flops, data / hw.effective_bandwidth) + hw.step_overhead_s
    assert qwen_h200.step_time(prefill, decode) == pytest.approx(expected)
    assert qwen_h200.step_time([], []) == 0.0
    assert qwen_h200.step_time([(100, 0)], []) == 0.0  # nothing to compute
    assert qwen_h200.prefill_time(0, 10) == qwen_h200.step_time([(0, 10)], [])
    assert qwen_h200.decode_time([10]) == qwen_h200.step_time([], [10])
    with pytest.raises(ValueError):
        qwen_h200.step_time([(0, -1)], [])
    with pytest.raises(ValueError):
        qwen_h200.decode_bytes([-3])


# ---------------------------------------------------------------------------- monotonicity


@given(total=st.integers(1, 200_000), cached=st.integers(0, 200_000), step=st.integers(1, 5000))
def test_more_cached_tokens_means_less_prefill_time(total: int, cached: int, step: int) -> None:
    cm = CostModel(ModelSpec.named(QWEN), "h200")
    cached = min(cached, total - 1)
    more = min(cached + step, total - 1)
    assert cm.prefill_time(more, total - more) <= cm.prefill_time(cached, total - cached)
    assert cm.prefill_time(cached, total - cached) >= cm.hw.step_overhead_s


@given(
    name=st.sampled_from(sorted(NAMED_SPECS)),
    hw=st.sampled_from(sorted(HARDWARE)),
    contexts=st.lists(st.integers(0, 300_000), min_size=1, max_size=40),
    prefill=st.lists(st.tuples(st.integers(0, 50_000), st.integers(1, 8192)), max_size=3),
    grow=st.integers(1, 100_000),
)
def test_step_time_monotone_in_context_and_batch(
    name: str, hw: str, contexts: list[int], prefill: list[tuple[int, int]], grow: int
) -> None:
    cm = CostModel(ModelSpec.named(name), hw)
    base = cm.step_time(prefill, contexts)
    assert base >= cm.hw.step_overhead_s
    longer = [c + grow for c in contexts]
    assert cm.step_time(prefill, longer) >= base
    assert cm.decode_time(longer) >= cm.decode_time(contexts)
    assert cm.step_time(prefill, [*contexts, grow]) >= base  # one more sequence


# ---------------------------------------------------------------------------- magnitudes


def test_qwen3_next_on_h200_has_sane_magnitudes(qwen_h200: CostModel) -> None:
    # 10k-token prefill: ~76 TFLOP at 989 TFLOP/s * 0.5 -> ~0.15 s
    assert 0.1 <= qwen_h200.prefill_time(0, 10_000) <= 0.5
    # 1k tokens touch nearly every expert: bound by reading ~159 GB of weights, not by FLOPs
    one_k = qwen_h200.prefill_time(0, 1000)
    assert 0.02 <= one_k <= 0.1
    assert qwen_h200.step_bytes([(0, 1000)], []) / qwen_h200.hw.effective_bandwidth > (
        qwen_h200.step_flops([(0, 1000)], []) / qwen_h200.hw.effective_flops
    )
    # 100k: attention is quadratic -> seconds
    assert 1.0 <= qwen_h200.prefill_time(0, 100_000) <= 10.0
    # decode at 10k context: batch 1 reads ~7.4 GB (active weights + KV + state) -> a few ms;
    # batch 32 touches ~47% of the experts -> ~87 GB -> ~29 ms
    b1, b32 = qwen_h200.decode_time([10_000]), qwen_h200.decode_time([10_000] * 32)
    assert 4 * MS <= b1 <= 30 * MS
    assert 15 * MS <= b32 <= 60 * MS
    assert 7e9 <= qwen_h200.decode_bytes([10_000]) <= 8e9
    # a cached prefix saves prefill time: a 90% hit on a 10k prompt is ~10x cheaper
    assert qwen_h200.prefill_time(9000, 1000) < 0.5 * qwen_h200.prefill_time(0, 10_000)


def test_recompute_seconds_per_token(qwen_h200: CostModel) -> None:
    beta = qwen_h200.recompute_seconds_per_token(10_000)
    expected = qwen_h200.prefill_flops(0, 10_000) / 10_000 / qwen_h200.hw.effective_flops
    assert beta == pytest.approx(expected)
    assert 5e-6 <= beta <= 5e-5
    assert qwen_h200.recompute_seconds_per_token(100_000) > beta  # attention grows with context
    with pytest.raises(ValueError):
        qwen_h200.recompute_seconds_per_token(0)
    assert repr(qwen_h200) == "CostModel('qwen3-next-80b-a3b', 'h200')"


def test_faster_hardware_is_faster() -> None:
    spec = ModelSpec.named(QWEN)
    times = [CostModel(spec, h).decode_time([10_000] * 8) for h in ("h100", "h200", "b200")]
    assert times == sorted(times, reverse=True)
    custom = Hardware(
        name="slow",
        peak_flops=1e14,
        hbm_bandwidth=1e12,
        hbm_bytes=10**10,
        host_to_device_bandwidth=1e10,
        step_overhead_s=0.0,
    )
    assert CostModel(spec, custom).prefill_time(0, 1000) > CostModel(spec, "h100").prefill_time(
        0, 1000
    )


def test_a_config_whose_cost_model_is_of_another_model_is_refused() -> None:
    """Prefill times and the FLOPs a replay counts both come from the cost model: it must be
    of the config's model."""
    from hycache.sim.simulate import SimulationConfig

    qwen, other = NAMED_SPECS["qwen3-next-80b-a3b"], NAMED_SPECS["marconi-7b"]
    with pytest.raises(ConfigError, match="the cost model is of 'marconi-7b'"):
        SimulationConfig(qwen, CostModel(other, hardware("h200")))
    SimulationConfig(qwen, CostModel(qwen, hardware("h200")))
