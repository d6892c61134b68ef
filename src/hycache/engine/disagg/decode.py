"""``DecodeSide``: the decode instance's ``PrefillSource``.

Called by ``Engine`` once the request's own hit is restored (KV ``[0, hit)`` and the state at
``hit``). It asks the prefill instance only for what the decode cache lacks (``Pull``): the KV
from the end of what it holds (its hit, or the end of the KV it reads in place) to ``N - 1``,
and the state at ``N - 1`` unless its own hit ends there. The KV lands in ``LandingPages``
(tails zeroed), the state replaces the restored one, and the engine computes the last prompt
token itself. Each request's ``TransferReport`` compares the payload bytes with the analytic
minimum.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hycache.engine.disagg.arrival import LandingPages, set_state
from hycache.engine.disagg.base import Pull, TransferReport
from hycache.engine.disagg.payload import recv_prefilled
from hycache.errors import IntegrityError

if TYPE_CHECKING:
    import torch

    from hycache.cache.lease import Lease
    from hycache.engine.disagg.base import Channel
    from hycache.engine.engine import Engine
    from hycache.engine.request import RequestResult


class DecodeSide:
    """See the module docstring. ``zero_tail=False`` with ``donor`` KV: the
    ``no-tail-zero`` fault (landing pages pre-filled with another request's data)."""

    def __init__(self, engine: Engine, channel: Channel, *, zero_tail: bool = True) -> None:
        self.engine = engine
        self.channel = channel
        self.model = engine.model
        self.check = engine.transfer.check_owners
        self.landing = LandingPages(engine.model, engine.page_size, zero_tail=zero_tail)
        width = self.model.dtype.itemsize
        full = self.model.layout.attention_of("full")
        self.kv_bytes_per_token = width * sum(a.elements_per_token for a in full)
        slots = engine.store.slots
        self.state_bytes = slots.bytes_per_slot if slots is not None else 0
        self.report: TransferReport | None = None

    def pull_for(self, lease: Lease) -> Pull:
        end = lease.prompt_len - 1
        if lease.hit > end:
            raise IntegrityError(f"hit {lease.hit} covers the last prompt token ({end})")
        start = max(lease.hit, min(lease.kv_read_end, end))
        return Pull(start, end, lease.hit < end and self.state_bytes > 0)

    def receive(self, lease: Lease, dc: Any, result: RequestResult) -> int:
        pull = self.pull_for(lease)
        result.hit, result.kv_hit = lease.hit, lease.kv_hit
        self.report = None
        before = self.channel.payload_bytes
        self.channel.send_obj(("pull", pull))
        arrived = recv_prefilled(self.channel)
        if (arrived.kv_from, arrived.kv_to) != (pull.kv_from, pull.kv_to):
            raise IntegrityError(
                f"pulled KV [{pull.kv_from}, {pull.kv_to}), received "
                f"[{arrived.kv_from}, {arrived.kv_to})"
            )
        if pull.needs_state != (arrived.rec is not None or arrived.conv is not None):
            raise IntegrityError("the prefill instance sent a state that was not pulled, or none")
        keys, values, ids = self.landing.land(arrived)
        self._check_landing(lease, arrived, ids, result)
        in_keys, in_values = self._in_place(lease, pull.kv_from)
        for i, layer in enumerate(self.model.layout.attention_of("full")):
            parts_k = [t for t in (in_keys[i], keys[i] if keys else None) if t is not None]
            parts_v = [t for t in (in_values[i], values[i] if values else None) if t is not None]
            if parts_k:
                self._append(dc.layers[layer.index], parts_k, parts_v)
        if arrived.conv is not None and arrived.rec is not None:
            set_state(self.model, dc, arrived.conv, arrived.rec)
        kv_tokens = pull.kv_to - pull.kv_from
        page = self.engine.page_size
        self.report = TransferReport(
            moved_bytes=self.channel.payload_bytes - before,
            minimum_bytes=kv_tokens * self.kv_bytes_per_token
            + (self.state_bytes if pull.needs_state else 0),
            kv_tokens=kv_tokens,
            state_bytes=self.state_bytes if pull.needs_state else 0,
            decode_hit=lease.hit,
            pages_lacked=-(-pull.kv_to // page) - pull.kv_from // page if kv_tokens else 0,
        )
        return pull.kv_to

    @staticmethod
    def _append(layer: Any, keys: list[torch.Tensor], values: list[torch.Tensor]) -> None:
        import torch

        k = torch.cat(keys) if len(keys) > 1 else keys[0]
        v = torch.cat(values) if len(values) > 1 else values[0]
        layer.update(k.transpose(0, 1).unsqueeze(0), v.transpose(0, 1).unsqueeze(0))

    def _in_place(
        self, lease: Lease, upto: int
    ) -> tuple[list[torch.Tensor | None], list[torch.Tensor | None]]:
        """KV the decode cache holds for ``[hit, upto)`` (read in place), per full layer."""
        count = len(self.model.layout.attention_of("full"))
        if upto <= lease.hit:
            return [None] * count, [None] * count
        pages = self.engine.store.pages["full"]
        refs = [r for r in lease.in_place_pages if r.start < upto]
        if not refs or refs[0].start != lease.hit:
            raise IntegrityError(f"KV read in place for [{lease.hit}, {upto}) is incomplete")
        keys, values = pages.read([r.page for r in refs])
        span = upto - lease.hit
        return [k[:span] for k in keys], [v[:span] for v in values]

    def _check_landing(
        self, lease: Lease, arrived: Any, ids: list[int], result: RequestResult
    ) -> None:
        """Pages outside the pulled positions must hold zeros: otherwise another request's KV
        sits in a page this request owns (reported; counted as a fired fault)."""
        dirty = self.landing.dirty(arrived)
        faults = self.engine.faults
        if dirty:
            faults.pages_corrupted("landing", dirty)
            faults.pages_read(lease.request_id, "landing", dirty)
            if self.check:
                for page_id in dirty:
                    result.violations.append(
                        f"landing page {page_id}: positions outside the pulled "
                        f"[{arrived.kv_from}, {arrived.kv_to}) hold another request's KV "
                        "(tail not zeroed on arrival)"
                    )
        faults.pages_written("landing", ids)
