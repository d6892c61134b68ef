"""``HostTier``: objects as CPU tensors (pinned when CUDA is present), LRU within a byte
budget. A put copies the tensors into freshly zeroed buffers, so nothing of an earlier
object ever shows through; an object larger than the whole budget is not stored."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import TYPE_CHECKING

from hycache.engine.tiers.base import ObjectKey, TierBackend, TierObject
from hycache.errors import ConfigError

if TYPE_CHECKING:
    import torch


class HostTier(TierBackend):
    name = "host"

    def __init__(self, budget_bytes: int) -> None:
        super().__init__()
        if budget_bytes <= 0:
            raise ConfigError(f"host tier: budget must be > 0 bytes, got {budget_bytes}")
        import torch

        self.budget_bytes = budget_bytes
        self.used_bytes = 0
        self.pinned = torch.cuda.is_available()
        self._objects: OrderedDict[ObjectKey, TierObject] = OrderedDict()

    def __len__(self) -> int:
        return len(self._objects)

    def locate(self, keys: Sequence[ObjectKey]) -> list[bool]:
        return [k in self._objects for k in keys]

    def get(self, keys: Sequence[ObjectKey]) -> list[TierObject | None]:
        out: list[TierObject | None] = []
        for key in keys:
            obj = self._objects.get(key)
            if obj is None:
                self.counters.misses += 1
            else:
                self._objects.move_to_end(key)
                self.counters.hits += 1
                self.counters.bytes_read += obj.nbytes
            out.append(obj)
        return out

    def put(self, objects: Sequence[TierObject]) -> int:
        stored = 0
        for obj in objects:
            if obj.key in self._objects:
                self._objects.move_to_end(obj.key)
                continue
            size = obj.nbytes
            if size > self.budget_bytes:
                self.counters.not_stored += 1
                continue
            while self.used_bytes + size > self.budget_bytes:
                _, victim = self._objects.popitem(last=False)
                self.used_bytes -= victim.nbytes
                self.counters.evictions += 1
            self._objects[obj.key] = TierObject(
                obj.key, obj.tokens, tuple(self._copy(t) for t in obj.tensors), obj.writer
            )
            self.used_bytes += size
            self.counters.stored += 1
            self.counters.bytes_written += size
            stored += 1
        return stored

    def _copy(self, t: torch.Tensor) -> torch.Tensor:
        import torch

        buffer = torch.zeros(t.shape, dtype=t.dtype, pin_memory=self.pinned)
        buffer.copy_(t)
        return buffer

    def clear(self) -> None:
        self._objects.clear()
        self.used_bytes = 0
