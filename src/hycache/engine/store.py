"""Tensor backing for the pool's ids: KV pages and recurrent-state slots.

The cache hands out integer ids per unit kind (``MemoryPool``: dense, freed ids reused first).
Here every id maps to tensors:

* KV page id of kind "full" / "swa": for every attention layer of that kind, K and V of
  ``page_size`` tokens (``k[layer][id]`` is ``[page_size, *k_shape]``);
* state slot id: for every recurrent layer and state index, its conv window
  ``[channels, kernel - 1]`` and recurrent state.

Storage is one tensor per layer and role, ``[capacity, ...]``, grown by doubling as ids appear,
never beyond ``limit`` ids: the pool hands out the lowest free ids first, so no id reaches the
number of units of that kind the budget can hold.

Every id carries an *owner tag*: a digest of (namespace, token prefix) naming what the content
belongs to: a page is the KV of positions ``[end - page, end)`` of the prefix of length ``end``,
a slot the state after consuming the prefix. Ids are reused after eviction, so the engine
rewrites a page whenever its tag differs from the prefix the tree now files it under, and checks
tags on every read (a mismatch is an integrity violation: stale or misfiled data).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from hycache.engine.layout import AttnLayer, CacheLayout, StateTensor
from hycache.errors import IntegrityError
from hycache.tree.keys import TOKEN_BYTES

if TYPE_CHECKING:
    import torch

Tag = bytes


class PrefixTags:
    """Owner tags of the prefixes of one token key (namespace-qualified), computed once."""

    def __init__(self, namespace: str | None, key: bytes) -> None:
        self.key = key
        self.namespace = namespace
        self._key = key
        self._base = hashlib.blake2b(repr(namespace).encode(), digest_size=16)
        self._memo: dict[int, Tag] = {}
        self._done = 0
        self._running = self._base.copy()

    def tag(self, length: int) -> Tag:
        """Tag of the prefix of ``length`` tokens."""
        found = self._memo.get(length)
        if found is not None:
            return found
        if length < self._done:
            h = self._base.copy()
            h.update(self._key[: length * TOKEN_BYTES])
            digest = h.digest()
        else:
            self._running.update(self._key[self._done * TOKEN_BYTES : length * TOKEN_BYTES])
            self._done = length
            digest = self._running.copy().digest()
        self._memo[length] = digest
        return digest


def _capacity(current: int, max_id: int, limit: int | None) -> int:
    capacity = max(16, 2 * current)
    while capacity <= max_id:
        capacity *= 2
    if limit is not None:
        if max_id >= limit:
            raise IntegrityError(f"id {max_id} beyond the {limit} units the budget can hold")
        capacity = min(capacity, limit)
    return capacity


def _grown(t: torch.Tensor, capacity: int) -> torch.Tensor:
    import torch

    bigger = torch.zeros((capacity, *t.shape[1:]), dtype=t.dtype)
    bigger[: t.shape[0]] = t
    return bigger


class PageTensors:
    """KV pages of one unit kind ("full" or "swa") over the attention layers of that kind."""

    def __init__(
        self,
        layers: Sequence[AttnLayer],
        page_size: int,
        dtype: torch.dtype,
        limit: int | None = None,
    ) -> None:
        import torch

        self.limit = limit
        self.layers = tuple(layers)
        self.page_size = page_size
        self.k = [torch.zeros((0, page_size, *a.k_shape), dtype=dtype) for a in self.layers]
        self.v = [torch.zeros((0, page_size, *a.v_shape), dtype=dtype) for a in self.layers]
        self.owner: list[Tag | None] = []
        width = torch.finfo(dtype).bits // 8
        #: bytes of tensor data behind one page id
        self.bytes_per_page = page_size * width * sum(a.elements_per_token for a in self.layers)

    @property
    def capacity(self) -> int:
        return len(self.owner)

    def ensure(self, max_id: int) -> None:
        if max_id < self.capacity:
            return
        capacity = _capacity(self.capacity, max_id, self.limit)
        self.k = [_grown(t, capacity) for t in self.k]
        self.v = [_grown(t, capacity) for t in self.v]
        self.owner.extend([None] * (capacity - len(self.owner)))

    def write(
        self,
        ids: Sequence[int],
        keys: Sequence[torch.Tensor],
        values: Sequence[torch.Tensor],
        tags: Sequence[Tag],
    ) -> None:
        """Write pages ``ids`` from per-layer ``[len(ids) * page_size, *shape]`` tensors."""
        import torch

        if not ids:
            return
        self.ensure(max(ids))
        index = torch.tensor(list(ids), dtype=torch.long)
        n, p = len(ids), self.page_size
        for i in range(len(self.layers)):
            self.k[i][index] = keys[i].reshape(n, p, *keys[i].shape[1:])
            self.v[i][index] = values[i].reshape(n, p, *values[i].shape[1:])
        for page_id, tag in zip(ids, tags, strict=True):
            self.owner[page_id] = tag

    def write_partial(
        self,
        page_id: int,
        valid: int,
        keys: Sequence[torch.Tensor],
        values: Sequence[torch.Tensor],
        tag: Tag,
    ) -> None:
        """Write only the first ``valid`` token slots of a page (the rest keeps whatever an
        earlier owner left there) and claim the whole page. Only the ``stale-tail`` fault
        injection calls this."""
        self.ensure(page_id)
        for i in range(len(self.layers)):
            self.k[i][page_id, :valid] = keys[i][:valid]
            self.v[i][page_id, :valid] = values[i][:valid]
        self.owner[page_id] = tag

    def read(self, ids: Sequence[int]) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """Per-layer K and V of pages ``ids`` in order: ``[len(ids) * page_size, *shape]``."""
        import torch

        self.ensure(max(ids))
        index = torch.tensor(list(ids), dtype=torch.long)
        keys = [t[index].flatten(0, 1) for t in self.k]
        values = [t[index].flatten(0, 1) for t in self.v]
        return keys, values


def _empty(
    shape: tuple[int, ...] | None, name: str | None, default: torch.dtype
) -> torch.Tensor | None:
    import torch

    if shape is None:
        return None
    dtype = default if name is None else getattr(torch, name)
    return torch.zeros((0, *shape), dtype=dtype)


def _row_bytes(t: torch.Tensor) -> int:
    n = 1
    for d in t.shape[1:]:
        n *= int(d)
    return n * t.element_size()


class StateSlots:
    """Recurrent-state slots: per (layer, state index) the conv window and recurrent state."""

    def __init__(
        self, states: Sequence[StateTensor], dtype: torch.dtype, limit: int | None = None
    ) -> None:
        self.limit = limit
        self.states = tuple(states)
        self.conv: list[torch.Tensor | None] = []
        self.rec: list[torch.Tensor | None] = []
        for s in self.states:
            self.conv.append(_empty(s.conv_shape, s.conv_dtype, dtype))
            self.rec.append(_empty(s.rec_shape, s.rec_dtype, dtype))
        self.owner: list[Tag | None] = []
        #: bytes of tensor data behind one slot id
        self.bytes_per_slot = sum(_row_bytes(t) for t in (*self.conv, *self.rec) if t is not None)

    @property
    def capacity(self) -> int:
        return len(self.owner)

    def ensure(self, slot: int) -> None:
        if slot < self.capacity:
            return
        capacity = _capacity(self.capacity, slot, self.limit)
        self.conv = [None if t is None else _grown(t, capacity) for t in self.conv]
        self.rec = [None if t is None else _grown(t, capacity) for t in self.rec]
        self.owner.extend([None] * (capacity - len(self.owner)))

    def write(
        self,
        slot: int,
        conv: Sequence[torch.Tensor | None],
        rec: Sequence[torch.Tensor | None],
        tag: Tag,
    ) -> None:
        """Copy one sequence's states (per entry of ``states``) into ``slot``."""
        self.ensure(slot)
        for i in range(len(self.states)):
            dst_c, src_c = self.conv[i], conv[i]
            if dst_c is not None and src_c is not None:
                dst_c[slot].copy_(src_c)
            dst_r, src_r = self.rec[i], rec[i]
            if dst_r is not None and src_r is not None:
                dst_r[slot].copy_(src_r)
        self.owner[slot] = tag

    def read(self, slot: int) -> tuple[list[torch.Tensor | None], list[torch.Tensor | None]]:
        """Private copies (clones) of the states in ``slot``: copy-on-write."""
        self.ensure(slot)
        conv = [None if t is None else t[slot].clone() for t in self.conv]
        rec = [None if t is None else t[slot].clone() for t in self.rec]
        return conv, rec


class TensorStore:
    """All tensors behind one cache's ids (see the module docstring)."""

    def __init__(
        self,
        layout: CacheLayout,
        page_size: int,
        dtype: torch.dtype,
        limits: Mapping[str, int] | None = None,
    ) -> None:
        limits = limits or {}
        self.layout = layout
        self.page_size = page_size
        self.pages: dict[str, PageTensors] = {}
        for kind in ("full", "swa"):
            layers = layout.attention_of(kind)
            if layers:
                self.pages[kind] = PageTensors(layers, page_size, dtype, limits.get(kind))
        self.slots = (
            StateSlots(layout.states, dtype, limits.get("recurrent")) if layout.states else None
        )
