"""``TierChain``: the tiers under the device, fastest first (host, disk, Redis).

Writes go through to every tier (``put``; each keeps what its own budget allows). Reads
cascade: ``locate`` asks each tier in turn for the keys no faster tier holds, ``fetch`` takes
each object from the fastest tier that returns a valid one, and copies objects found below
the host into the host (promotion). Objects of one prefix are named by the page-hash chain
of its tokens (``cache.tierkeys.chain``): page ``i`` of a kind by the chain value after
page ``i``, the state after ``p`` tokens by the value after page ``p / page - 1``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from hycache.cache.tierkeys import chain
from hycache.engine.tiers.base import ObjectKey, TierBackend, TierCounters, TierObject
from hycache.engine.tiers.fingerprint import TierIdentity
from hycache.engine.tiers.host import HostTier
from hycache.errors import ConfigError

if TYPE_CHECKING:
    import torch


class TierChain:
    """The tiers in order; ``writer``: this engine instance's id, stored in every object."""

    def __init__(
        self, backends: Sequence[TierBackend], identity: TierIdentity, *, writer: str = ""
    ) -> None:
        if not backends:
            raise ConfigError("a tier chain needs at least one tier")
        names = [b.name for b in backends]
        if len(set(names)) != len(names):
            raise ConfigError(f"tiers named twice: {names}")
        self.backends = tuple(backends)
        self.identity = identity
        self.page = identity.page
        self.writer = writer
        #: prompt tokens reused beyond the device's hit, by the tier their KV was loaded from
        self.hit_tokens = dict.fromkeys(names, 0)
        #: of those, tokens whose objects another instance wrote
        self.foreign_tokens = 0
        #: objects loaded below the host, then copied into it
        self.promoted = 0

    @property
    def host(self) -> HostTier | None:
        first = self.backends[0]
        return first if isinstance(first, HostTier) else None

    def counters(self) -> dict[str, TierCounters]:
        return {b.name: b.counters for b in self.backends}

    # ------------------------------------------------------------------ keys
    def digests(self, key: bytes, namespace: str | None, tokens: int) -> list[bytes]:
        """Chain values of the whole pages of the first ``tokens`` tokens of ``key``."""
        return chain(key, namespace, tokens // self.page, self.page)

    def key(self, component: str, digest: bytes) -> ObjectKey:
        return ObjectKey(component, self.page, digest)

    # ------------------------------------------------------------------ reads
    def locate(self, keys: Sequence[ObjectKey]) -> list[bool]:
        found = [False] * len(keys)
        for backend in self.backends:
            todo = [i for i, f in enumerate(found) if not f]
            if not todo:
                break
            held = backend.locate([keys[i] for i in todo])
            for i, h in zip(todo, held, strict=True):
                found[i] = h
        return found

    def fetch(self, keys: Sequence[ObjectKey]) -> list[tuple[TierObject, str] | None]:
        """Each object from the fastest tier that returns it valid (None: no tier did)."""
        out: list[tuple[TierObject, str] | None] = [None] * len(keys)
        promote: list[TierObject] = []
        for backend in self.backends:
            todo = [i for i, o in enumerate(out) if o is None]
            if not todo:
                break
            got = backend.get([keys[i] for i in todo])
            for i, obj in zip(todo, got, strict=True):
                if obj is not None:
                    out[i] = (obj, backend.name)
                    if backend is not self.backends[0]:
                        promote.append(obj)
        host = self.host
        if host is not None and promote:
            self.promoted += host.put(promote)
        return out

    # ------------------------------------------------------------------ writes
    def put(self, objects: Sequence[TierObject]) -> None:
        """Write through to every tier (what a tier holds already is not sent again)."""
        if not objects:
            return
        for backend in self.backends:
            held = backend.locate([o.key for o in objects])
            missing = [o for o, h in zip(objects, held, strict=True) if not h]
            if missing:
                backend.put(missing)

    def put_pages(
        self,
        kind: str,
        key: bytes,
        namespace: str | None,
        starts: Sequence[int],
        keys: Sequence[torch.Tensor],
        values: Sequence[torch.Tensor],
    ) -> None:
        """KV pages of ``kind`` starting at ``starts`` of the prefix ``key``, from per-layer
        ``[len(starts) * page, *shape]`` tensors (the order of ``starts``)."""
        if not starts:
            return
        page = self.page
        digests = self.digests(key, namespace, max(starts) + page)
        objects = []
        for j, start in enumerate(starts):
            rows = slice(j * page, (j + 1) * page)
            tensors = tuple(
                t[rows].clone() for pair in zip(keys, values, strict=True) for t in pair
            )
            obj_key = self.key(kind, digests[start // page])
            objects.append(TierObject(obj_key, start + page, tensors, self.writer))
        self.put(objects)

    def put_state(
        self,
        key: bytes,
        namespace: str | None,
        position: int,
        conv: Sequence[torch.Tensor | None],
        rec: Sequence[torch.Tensor | None],
    ) -> None:
        """The state after the first ``position`` tokens of ``key`` (whole pages only)."""
        if position <= 0 or position % self.page:
            return
        tensors: list[torch.Tensor] = []
        for c, r in zip(conv, rec, strict=True):
            tensors += [t.clone() for t in (c, r) if t is not None]
        digest = self.digests(key, namespace, position)[-1]
        self.put([TierObject(self.key("state", digest), position, tuple(tensors), self.writer)])

    def clear(self) -> None:
        for backend in self.backends:
            backend.clear()

    def close(self) -> None:
        for backend in self.backends:
            backend.close()
