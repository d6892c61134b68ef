"""The pool layouts: vLLM's unified padded pool, SGLang's split pools, one shared budget, and
a host tier's pool (separate KV and state budgets).

Unit kinds are the model's group kinds: ``"full"``/``"swa"`` (one KV page of ``page_tokens``
tokens over all layers of the group) and ``"recurrent"`` (one sequence's state over all
recurrent layers).
"""

from __future__ import annotations

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


def unified_layout(spec: ModelSpec, block_size: int) -> UnifiedLayout:
    """Pad the attention block so one page holds one layer's state:
    ``attn_block = kalign * ceil(state_bytes_per_layer / (kalign * kv_bytes_per_token_per_layer))``
    with ``kalign = max(16, block_size)`` (e.g. 3.12 MiB / 4 KiB per token -> 896 for 128)."""
    if block_size <= 0:
        raise ConfigError(f"block_size must be positive, got {block_size}")
    kalign = max(16, block_size)
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
    groups: dict[str, int] = {g.kind: _ceil_div(g.layers, per_group) for g in spec.groups}
    return UnifiedLayout(attn_block, max(per_layer), per_group, groups)


def unified_pool(
    spec: ModelSpec, budget_bytes: int, block_size: int = 16, *, track_ids: bool = True
) -> MemoryPool:
    """One pool of equal blocks shared by every group (vLLM hybrid KV cache manager)."""
    _check_budget(budget_bytes)
    geo = unified_layout(spec, block_size)
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
    track_ids: bool = True,
) -> MemoryPool:
    """SGLang: a KV page pool plus a recurrent-state slot pool; states get ``r / (1 + r)`` of
    the budget (``--mamba-full-memory-ratio`` r, default 0.9)."""
    _check_budget(budget_bytes)
    if ratio <= 0:
        raise ConfigError(f"mamba_full_memory_ratio must be positive, got {ratio}")
    budgets: dict[str, int] = {}
    costs: dict[str, UnitCost] = {}
    kv_budget = budget_bytes
    if spec.recurrent is not None:
        state = spec.recurrent.state_bytes
        slots = int(budget_bytes * ratio / (1 + ratio)) // state
        budgets["state"] = slots * state
        costs["recurrent"] = UnitCost("state", state, state)
        kv_budget = budget_bytes - int(budget_bytes * ratio / (1 + ratio))
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


def host_pool(spec: ModelSpec, budget_bytes: int, page_size: int, state_share: float) -> MemoryPool:
    """A host tier's pool: KV pages (resource ``host_kv``) and states (``host_state``) with
    separate budgets; states get ``state_share`` of the bytes (rounded down to whole
    states), KV the rest. Unit kinds ``full`` and ``recurrent``, unpadded."""
    if isinstance(budget_bytes, bool) or not isinstance(budget_bytes, int) or budget_bytes < 0:
        raise ConfigError(f"host capacity must be a whole number of bytes >= 0: {budget_bytes}")
    if not 0.0 <= state_share <= 1.0:
        raise ConfigError(f"host state share must be in [0, 1], got {state_share}")
    if any(g.kind == "swa" for g in spec.attention_groups):
        raise ConfigError("a host tier holds full-attention KV and states; no sliding windows")
    budgets = {"host_kv": budget_bytes, "host_state": 0}
    costs: dict[str, UnitCost] = {}
    if spec.recurrent is not None:
        state = spec.recurrent.state_bytes
        budgets["host_state"] = int(budget_bytes * state_share) // state * state
        budgets["host_kv"] = budget_bytes - budgets["host_state"]
        costs["recurrent"] = UnitCost("host_state", state, state)
    for g in spec.attention_groups:
        page = page_size * g.kv_bytes_per_token
        costs[g.kind] = UnitCost("host_kv", page, page)
    return MemoryPool("host", budgets, costs, details={"state_share": state_share}, track_ids=False)
