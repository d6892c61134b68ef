"""``instance_meta``: what an instance announces in the handshake (``InstanceMeta``).

The model is identified by a digest of its ``config.json`` and of its weight files (their
names, sizes and first MiB: two checkpoints of one architecture drawn with different seeds
differ there), the layout by a digest of the shapes and dtypes ``measure_layout`` found.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

from hycache.engine.disagg.base import PROTOCOL, InstanceMeta
from hycache.engine.layout import dtype_name

if TYPE_CHECKING:
    from pathlib import Path

    from hycache.cache.facade import HybridPrefixCache
    from hycache.engine.model import LoadedModel

_HEAD = 1 << 20


def model_digest(path: Path) -> str:
    """Digest of ``config.json`` and the weight files of a checkpoint directory."""
    h = hashlib.blake2b(digest_size=12)
    h.update((path / "config.json").read_bytes())
    for weights in sorted(path.glob("*.safetensors")):
        h.update(weights.name.encode())
        h.update(str(weights.stat().st_size).encode())
        with weights.open("rb") as f:
            h.update(f.read(_HEAD))
    return h.hexdigest()


def layout_digest(model: LoadedModel) -> str:
    return hashlib.blake2b(repr(model.layout).encode(), digest_size=12).hexdigest()


def pool_kind(cache: HybridPrefixCache) -> str:
    """How the cache's pool lays memory out, named by its budget resources."""
    resources = sorted(cache.pool.budgets)
    if resources == ["blocks"]:
        return "unified padded blocks"
    if resources == ["kv", "state"]:
        return "split KV / state pools"
    return "one shared byte pool"


def instance_meta(model: LoadedModel, cache: HybridPrefixCache, preset: str) -> InstanceMeta:
    return InstanceMeta(
        PROTOCOL,
        dtype_name(model.dtype),
        model.model_type,
        model_digest(model.path),
        layout_digest(model),
        preset,
        cache.page_size,
        pool_kind(cache),
    )
