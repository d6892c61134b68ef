"""The pool layouts: vLLM's unified padded pool, SGLang's split pools, one shared budget.

Unit kinds are the model's group kinds: ``"full"``/``"swa"`` (one KV page of ``page_tokens``
tokens over all layers of the group) and ``"recurrent"`` (one sequence's state over all
recurrent layers).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from hycache.errors import ConfigError
from hycache.memory.pool import MemoryPool, UnitCost
from hycache.spec.model import ModelSpec


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _check_budget(budget_bytes: int) -> None:
    if budget_bytes <= 0:
        raise ConfigError(f"memory budget must be positive, got {budget_bytes} bytes")


@dataclass(frozen=True)
class UnifiedLayout:
    """vLLM's hybrid page geometry (``attn_block`` tokens per attention page)."""

    attn_block: int
    page_bytes_per_layer: int
    layers_per_group: int
    groups: dict[str, int]

    @property
    def block_bytes(self) -> int:
        return self.page_bytes_per_layer * self.layers_per_group


def unified_layout(spec: ModelSpec, block_size: int, alignment: int = 1) -> UnifiedLayout:
    """Pad the attention block so one page holds one layer's state:
    ``attn_block = kalign * ceil(state_bytes_per_layer / (kalign * kv_bytes_per_token_per_layer))``
    with ``kalign = lcm(max(16, block_size), alignment)`` (e.g. 3.12 MiB / 4 KiB per token -> 896
    for 128); ``alignment``: the recurrent layers' prefill checkpoint alignment (FlashInfer's
    GDN prefill: 64). Layers are grouped as vLLM does: groups of the smallest kind's layer count,
    or of the largest kind's when that is under 1.5 times the smallest."""
    if block_size <= 0:
        raise ConfigError(f"block_size must be positive, got {block_size}")
    if alignment <= 0:
        raise ConfigError(f"alignment must be positive, got {alignment}")
    kalign = math.lcm(max(16, block_size), alignment)
    attn = spec.full or spec.swa
    rec = spec.recurrent
    attn_block = kalign
    if attn is not None and rec is not None:
        per_token = attn.kv_bytes_per_token_per_layer
        attn_block = kalign * _ceil_div(rec.state_bytes_per_layer, kalign * per_token)
    per_layer = [g.kv_bytes_per_token_per_layer * attn_block for g in spec.attention_groups]
    if rec is not None:
        per_layer.append(rec.state_bytes_per_layer)
    layer_counts = [g.layers for g in spec.groups]
    per_group = min(layer_counts)
    if max(layer_counts) < 1.5 * per_group:  # _get_kv_cache_groups_uniform_page_size
        per_group = max(layer_counts)
    groups: dict[str, int] = {g.kind: _ceil_div(g.layers, per_group) for g in spec.groups}
    return UnifiedLayout(attn_block, max(per_layer), per_group, groups)


def unified_pool(
    spec: ModelSpec,
    budget_bytes: int,
    block_size: int = 16,
    *,
    alignment: int = 1,
    track_ids: bool = True,
) -> MemoryPool:
    """One pool of equal blocks shared by every group (vLLM hybrid KV cache manager)."""
    _check_budget(budget_bytes)
    geo = unified_layout(spec, block_size, alignment)
    n_blocks = budget_bytes // geo.block_bytes
    costs: dict[str, UnitCost] = {}
    for g in spec.attention_groups:
        data = geo.attn_block * g.kv_bytes_per_token
        costs[g.kind] = UnitCost("blocks", geo.groups[g.kind] * geo.block_bytes, data)
    if spec.recurrent is not None:
        charged = geo.groups["recurrent"] * geo.block_bytes
        costs["recurrent"] = UnitCost("blocks", charged, spec.recurrent.state_bytes)
    details = {
        "attn_block_tokens": geo.attn_block,
        "block_bytes": geo.block_bytes,
        "num_blocks": n_blocks,
        "layers_per_group": geo.layers_per_group,
    }
    budgets = {"blocks": n_blocks * geo.block_bytes}
    return MemoryPool("unified", budgets, costs, details=details, track_ids=track_ids)


def split_pool(
    spec: ModelSpec,
    budget_bytes: int,
    page_size: int = 1,
    ratio: float = 0.9,
    *,
    state_bytes: int | None = None,
    track_ids: bool = True,
) -> MemoryPool:
    """SGLang: a KV page pool plus a recurrent-state slot pool, sized as SGLang sizes them
    (``kv_cache_configurator._handle_max_mamba_cache``): ``r / (1 + r)`` of the budget
    (``--mamba-full-memory-ratio`` r, default 0.9) holds ``floor(that / state) - 1`` usable
    slots plus one padding slot; the rest of the budget holds KV. ``state_bytes``: bytes of
    one state slot as the engine stores it (default: the spec's)."""
    _check_budget(budget_bytes)
    if ratio <= 0:
        raise ConfigError(f"mamba_full_memory_ratio must be positive, got {ratio}")
    budgets: dict[str, int] = {}
    costs: dict[str, UnitCost] = {}
    kv_budget = budget_bytes
    if spec.recurrent is not None:
        data = spec.recurrent.state_bytes
        if state_bytes is not None and state_bytes <= 0:
            raise ConfigError(f"state_bytes must be positive, got {state_bytes}")
        # a slot is charged as the engine stores it; the spec's bytes are the data it holds
        state = data if state_bytes is None else max(state_bytes, data)
        slots = max(0, int((budget_bytes * ratio / (1 + ratio) - state) // state))
        budgets["state"] = slots * state
        costs["recurrent"] = UnitCost("state", state, data)
        kv_budget = max(0, budget_bytes - (slots + 1) * state)
    if spec.attention_groups:
        budgets["kv"] = kv_budget
        for g in spec.attention_groups:
            page = page_size * g.kv_bytes_per_token
            costs[g.kind] = UnitCost("kv", page, page)
    return MemoryPool("split", budgets, costs, details={"ratio": ratio}, track_ids=track_ids)


def shared_pool(
    spec: ModelSpec, budget_bytes: int, page_size: int = 1, *, track_ids: bool = True
) -> MemoryPool:
    """One byte budget for KV pages and states with no fixed split (Marconi, hycache)."""
    _check_budget(budget_bytes)
    costs: dict[str, UnitCost] = {}
    for g in spec.attention_groups:
        page = page_size * g.kv_bytes_per_token
        costs[g.kind] = UnitCost("bytes", page, page)
    if spec.recurrent is not None:
        state = spec.recurrent.state_bytes
        costs["recurrent"] = UnitCost("bytes", state, state)
    return MemoryPool("shared", {"bytes": budget_bytes}, costs, track_ids=track_ids)
