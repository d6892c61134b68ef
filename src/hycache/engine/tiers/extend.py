"""``plan_extension``: how far the tiers extend a lease's device hit, and the data for it.

The device reuses ``[0, hit)``. Beyond it, up to the last whole page before the prompt's last
token, an extension to ``end`` needs, from the tiers:

* every full-attention page of ``[hit, end)`` (contiguous: attention reads all of it);
* with sliding-window layers, the window's pages before ``end`` that the device does not
  hold (``[max(hit, window start), end)``; the device holds the window before ``hit``);
* with recurrent layers, the state after ``end`` tokens: an attention-only extension is
  useless to a recurrent model, so ``end`` is cut back to the longest prefix whose state
  exists.

``locate`` finds the candidates in one pass over the tiers, ``fetch`` loads them (fastest
holder); an object that turns out missing or invalid on the way is marked absent and the
plan is made again (at most ``ROUNDS`` times), so a store that lies or forgets costs only a
shorter extension. The tokens of ``[hit, end)`` are counted by the tier their full-attention
KV came from (the state's tier, for models without full attention).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from hycache.engine.tiers.base import ObjectKey, TierObject
from hycache.engine.tiers.chain import TierChain

if TYPE_CHECKING:
    import torch

ROUNDS = 3


@dataclass(frozen=True)
class Extension:
    """The prefix ``[hit, end)`` loaded from the tiers. ``kv``: per KV kind the per-layer K
    and V of positions ``[kv_lo[kind], end)``; ``state``: conv windows and recurrent states
    after ``end`` tokens (per state of the layout); ``tokens``: per tier name, tokens of
    ``[hit, end)`` whose KV came from it; ``foreign``: of them, written by another instance."""

    hit: int
    end: int
    kv: dict[str, tuple[list[torch.Tensor], list[torch.Tensor]]]
    kv_lo: dict[str, int]
    state: tuple[list[torch.Tensor | None], list[torch.Tensor | None]] | None
    tokens: dict[str, int]
    foreign: int


class _Planner:
    def __init__(
        self, chain: TierChain, key: bytes, ns: str | None, hit: int, limit: int, window: int | None
    ) -> None:
        self.chain = chain
        self.page = chain.page
        self.hit = hit
        self.limit = limit
        self.window = window
        self.kinds = [k for k in ("full", "swa") if k in chain.identity.specs]
        self.recurrent = "state" in chain.identity.specs
        self.digests = chain.digests(key, ns, limit)
        self.known: dict[ObjectKey, bool] = {}

    def kv_key(self, kind: str, start: int) -> ObjectKey:
        return self.chain.key(kind, self.digests[start // self.page])

    def state_key(self, end: int) -> ObjectKey:
        return self.chain.key("state", self.digests[end // self.page - 1])

    def window_lo(self, end: int) -> int:
        if self.window is None:
            return 0
        lo = max(0, end - self.window + 1)
        return lo - lo % self.page

    def locate(self) -> None:
        starts = range(self.hit, self.limit, self.page)
        keys = [self.kv_key(kind, s) for kind in self.kinds for s in starts]
        if self.recurrent:
            keys += [self.state_key(s + self.page) for s in starts]
        for k, found in zip(keys, self.chain.locate(keys), strict=True):
            self.known[k] = found

    def needs(self, end: int) -> dict[ObjectKey, int]:
        """The objects an extension to ``end`` loads, with the prefix length each completes."""
        keys: dict[ObjectKey, int] = {}
        for kind in self.kinds:
            lo = self.hit if kind == "full" else max(self.hit, self.window_lo(end))
            keys |= {self.kv_key(kind, s): s + self.page for s in range(lo, end, self.page)}
        if self.recurrent:
            keys[self.state_key(end)] = end
        return keys

    def best(self) -> int:
        """The longest end whose objects are all believed held (``hit``: none). Every full
        page below ``top`` is held, so each candidate end checks only its state and the
        window before it: linear in the pages (times the window's)."""
        top = self.hit
        if "full" in self.kinds:
            while top < self.limit and self.known.get(self.kv_key("full", top), False):
                top += self.page
        else:
            top = self.limit
        for end in range(top, self.hit, -self.page):
            if self.recurrent and not self.known.get(self.state_key(end), False):
                continue
            if "swa" in self.kinds:
                lo = max(self.hit, self.window_lo(end))
                window = range(lo, end, self.page)
                if not all(self.known.get(self.kv_key("swa", s), False) for s in window):
                    continue
            return end
        return self.hit


def plan_extension(
    chain: TierChain,
    key: bytes,
    ns: str | None,
    *,
    hit: int,
    prompt_len: int,
    window: int | None,
) -> Extension | None:
    """The longest loadable extension of ``hit`` for the prompt ``key`` (None: none)."""
    page = chain.page
    limit = (prompt_len - 1) // page * page
    if limit <= hit:
        return None
    planner = _Planner(chain, key, ns, hit, limit, window)
    planner.locate()
    for _ in range(ROUNDS):
        end = planner.best()
        if end <= hit:
            return None
        wanted = planner.needs(end)
        got = chain.fetch(list(wanted))
        objects: dict[ObjectKey, tuple[TierObject, str]] = {}
        for (k, tokens), found in zip(wanted.items(), got, strict=True):
            if found is None or found[0].tokens != tokens:
                planner.known[k] = False
            else:
                objects[k] = found
        if len(objects) == len(wanted):
            return _assemble(planner, end, objects)
    return None


def _assemble(
    planner: _Planner, end: int, objects: dict[ObjectKey, tuple[TierObject, str]]
) -> Extension:
    import torch

    page, hit, chain = planner.page, planner.hit, planner.chain
    kv: dict[str, tuple[list[torch.Tensor], list[torch.Tensor]]] = {}
    kv_lo: dict[str, int] = {}
    tokens = dict.fromkeys(chain.hit_tokens, 0)
    foreign = 0
    for kind in planner.kinds:
        lo = hit if kind == "full" else max(hit, planner.window_lo(end))
        pages = [objects[planner.kv_key(kind, s)][0] for s in range(lo, end, page)]
        layers = len(chain.identity.specs[kind]) // 2
        keys = [torch.cat([p.tensors[2 * i] for p in pages]) for i in range(layers)]
        values = [torch.cat([p.tensors[2 * i + 1] for p in pages]) for i in range(layers)]
        kv[kind] = (keys, values)
        kv_lo[kind] = lo
    counted = "full" if "full" in planner.kinds else "state"
    for k, (obj, tier) in objects.items():
        if k.component != counted:
            continue
        n = page if counted == "full" else end - hit
        tokens[tier] += n
        if obj.writer and obj.writer != chain.writer:
            foreign += n
    state = None
    if planner.recurrent:
        state = _state(chain, objects[planner.state_key(end)][0])
    return Extension(hit, end, kv, kv_lo, state, tokens, foreign)


def _state(
    chain: TierChain, obj: TierObject
) -> tuple[list[torch.Tensor | None], list[torch.Tensor | None]]:
    """Split a state object back into per-state conv windows and recurrent states."""
    conv: list[torch.Tensor | None] = []
    rec: list[torch.Tensor | None] = []
    tensors = iter(obj.tensors)
    for has_conv, has_rec in chain.identity.state_parts:
        conv.append(next(tensors) if has_conv else None)
        rec.append(next(tensors) if has_rec else None)
    return conv, rec
