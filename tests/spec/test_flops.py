"""A model's prefill FLOPs as one table of coefficients (``PrefillFlops``): float for float
what the spec's per-group sum gives, and what the groups' formulas give counted token by
token."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hycache.spec.flops import PrefillFlops
from hycache.spec.groups import DTYPE_BYTES, RecurrentGroup
from hycache.spec.model import NAMED_SPECS, ModelSpec


def _counted(spec: ModelSpec, cached: int, new: int) -> float:
    """The FLOPs summed as the groups define them, keys counted token by token: per group
    ``float(layers * (2 * projection * new + 4 * q_heads * head_dim * keys))`` (recurrent:
    ``float(layers * new * per_token)``), summed from 0 in the groups' order, plus the MLP."""
    total = 0.0
    for group in spec.groups:
        if isinstance(group, RecurrentGroup):
            per_token = (
                2 * group.proj_params_per_layer
                + 6 * (group.recurrent_state_bytes // DTYPE_BYTES[group.state_dtype])
                + 2 * (group.conv_state_bytes // DTYPE_BYTES[group.conv_dtype])
            )
            total += float(group.layers * new * per_token)
            continue
        window = getattr(group, "window", None)
        keys = sum(
            i + 1 if window is None else min(i + 1, window) for i in range(cached, cached + new)
        )
        proj = 2 * group.projection_params(spec.hidden_size) * new
        total += float(group.layers * (proj + 4 * group.q_heads * group.head_dim * keys))
    return total + 2.0 * spec.active_mlp_params_per_token * new


@settings(max_examples=60)
@given(
    name=st.sampled_from(sorted(NAMED_SPECS)),
    cached=st.integers(0, 40_000),
    new=st.integers(0, 3_000),
)
def test_the_table_gives_the_specs_floats(name: str, cached: int, new: int) -> None:
    spec = NAMED_SPECS[name]
    table = spec.prefill_flops_table()
    flops = table.prefill_flops(cached, new)
    assert flops == spec.prefill_flops(cached, new) == _counted(spec, cached, new)
    assert isinstance(flops, float)


def test_every_named_spec_at_long_contexts() -> None:
    """Past the sliding windows and at 1M tokens: still equal, float for float."""
    for spec in NAMED_SPECS.values():
        table = spec.prefill_flops_table()
        for cached, new in ((0, 1), (1, 0), (4095, 2), (131_071, 1), (10**6, 513), (0, 10**6)):
            assert table.prefill_flops(cached, new) == spec.prefill_flops(cached, new)


def test_negative_lengths_are_refused() -> None:
    table = PrefillFlops(((3, 0, None),), 1)
    assert table.prefill_flops(0, 2) == 3 * 2 + 2.0 * 1 * 2
    for cached, new in ((-1, 2), (0, -1)):
        with pytest.raises(ValueError, match="prefill lengths must be >= 0"):
            table.prefill_flops(cached, new)


def test_groups_are_summed_in_their_order_from_zero() -> None:
    """As ``sum`` over the groups does: terms whose float sum depends on the order."""
    terms = ((2**53, 0, None), (1, 0, None), (1, 0, None))
    table = PrefillFlops(terms, 0)
    in_order = sum(float(per_new) for per_new, _, _ in terms)
    assert table.prefill_flops(0, 1) == in_order == 2.0**53
    assert in_order != sum(float(per_new) for per_new, _, _ in reversed(terms))
