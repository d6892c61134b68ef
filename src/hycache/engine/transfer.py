"""``Transfer``: moving tensors between the model's cache object (``dc``) and the
``TensorStore`` that backs the pool's ids.

* restore: gather the KV pages a lease reuses (``Lease.reused_pages``; SWA: only the window
  before the hit) into a fresh ``DynamicCache`` and load the cached state into it (a copy: the
  store's slot is never written by a reader), reporting owner-tag mismatches as violations;
  with an ``Extension`` from the tiers, its KV follows the device's and its state is loaded;
* read in place: the full-attention KV a lease reads in place replaces the recomputed one;
* state copies: read the running conv/recurrent state out of the model's cache and write it
  into a store slot with its owner tag;
* scatter: write the request's KV into the pages ``publish``/``finish`` filed its tokens under
  whose owner tag is not this prefix.

With tiers (``self.tiers``), every whole page the request computed (``kv_to_tiers``, at the
end of the prefill and at finish) and every exact state copy, kept by the device or not, is
written through to them (``TierChain.put_pages`` / ``put_state``).

Every read and write is reported to the ``FaultLog`` so that injected faults are counted.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hycache.engine.store import PrefixTags
from hycache.errors import IntegrityError

if TYPE_CHECKING:
    import torch

    from hycache.cache.lease import Lease, PageRef
    from hycache.engine.faults import FaultLog
    from hycache.engine.model import LoadedModel
    from hycache.engine.store import TensorStore
    from hycache.engine.tiers.chain import TierChain
    from hycache.engine.tiers.extend import Extension


class Transfer:
    """KV gather/scatter and state copies between ``dc`` (the model's cache) and the store."""

    def __init__(
        self, model: LoadedModel, store: TensorStore, faults: FaultLog, *, check_owners: bool
    ) -> None:
        self.model = model
        self.store = store
        self.faults = faults
        self.page_size = store.page_size
        self.window = model.layout.window
        self.check_owners = check_owners
        #: pages filed for positions this request never computed (revived SWA KV), left
        #: unclaimed so that a read of them is reported
        self.unfilled_pages = 0
        #: the tiers under the device: every page and exact state written is written through
        self.tiers: TierChain | None = None

    # ------------------------------------------------------------------ restore
    def restore(
        self,
        lease: Lease,
        dc: Any,
        tags: PrefixTags,
        violations: list[str],
        extension: Extension | None = None,
    ) -> dict[str, int]:
        """Load the reused prefix into ``dc``: the device's ``[0, hit)`` and, with an
        ``extension`` from the tiers, ``[hit, extension.end)`` after it (its state replaces
        the device's). Per KV kind the first position loaded. Reports a read of corrupted
        data to the fault log."""
        hit = lease.hit
        end = hit if extension is None else extension.end
        kv_start = dict.fromkeys(self.store.pages, 0)
        if end == 0:
            return kv_start
        page = self.page_size
        for kind, pages in self.store.pages.items():
            lo = 0
            if kind == "swa":
                if self.window is None:
                    raise IntegrityError("sliding-window pages without a window")
                lo = max(0, end - self.window + 1)
                lo -= lo % page
            keys, values = self._device_kv(lease, kind, lo, tags, violations)
            if extension is not None:
                if extension.kv_lo[kind] != max(lo, hit):
                    raise IntegrityError(f"{kind} KV loaded from the tiers starts off the window")
                more_k, more_v = extension.kv[kind]
                keys = [more_k[i] if k is None else _cat(k, more_k[i]) for i, k in enumerate(keys)]
                values = [
                    more_v[i] if v is None else _cat(v, more_v[i]) for i, v in enumerate(values)
                ]
            for i, layer in enumerate(pages.layers):
                k, v = keys[i], values[i]
                if k is None or v is None:
                    raise IntegrityError(f"{kind} KV for [{lo}, {end}) is missing")
                cache_layer = dc.layers[layer.index]
                cache_layer.update(k.transpose(0, 1).unsqueeze(0), v.transpose(0, 1).unsqueeze(0))
                if kind == "swa":
                    cache_layer.cumulative_length = end
            kv_start[kind] = lo
        slots = self.store.slots
        if slots is not None:
            if extension is not None and extension.state is not None:
                self._load_state(dc, *extension.state)
                return kv_start
            source = lease.source_state
            if source is None:
                raise IntegrityError(f"hit {hit} without a state to resume from")
            slots.ensure(source)
            if self.check_owners and slots.owner[source] != tags.tag(hit):
                violations.append(
                    f"state slot {source} restored at position {hit} was not taken there"
                )
            self.faults.slot_read(lease.request_id, source)
            conv, rec = slots.read(source)
            self._load_state(dc, conv, rec)
        return kv_start

    def _device_kv(
        self, lease: Lease, kind: str, lo: int, tags: PrefixTags, violations: list[str]
    ) -> tuple[list[torch.Tensor | None], list[torch.Tensor | None]]:
        """Per layer the device's K and V of ``[lo, hit)`` (None per layer when empty)."""
        pages = self.store.pages[kind]
        hit, page = lease.hit, self.page_size
        refs = [r for r in lease.reused_pages.get(kind, ()) if r.start + page > lo]
        ids = [r.page for r in refs]
        starts = [r.start for r in refs]
        if starts != list(range(lo, hit, page)):
            raise IntegrityError(f"{kind} KV the cache reused for [{lo}, {hit}) is incomplete")
        if not ids:
            return [None] * len(pages.layers), [None] * len(pages.layers)
        pages.ensure(max(ids))
        for page_id, start in zip(ids, starts, strict=True):
            if self.check_owners and pages.owner[page_id] != tags.tag(start + page):
                violations.append(
                    f"{kind} page {page_id} read for positions [{start}, {start + page})"
                    " holds another prefix's KV"
                )
        self.faults.pages_read(lease.request_id, kind, ids)
        keys, values = pages.read(ids)
        return list(keys), list(values)

    def read_in_place(
        self,
        lease: Lease,
        dc: Any,
        kv_start: dict[str, int],
        tags: PrefixTags,
        violations: list[str],
    ) -> None:
        """Make the full-attention layers attend to the cached KV the lease reads in place
        (``lease.in_place_pages``, positions ``[hit, kv_read_end)``): the request recomputed
        those tokens only to rebuild the recurrent state, and holds no pages of its own for
        them. Their KV in ``dc`` is replaced by the pages' content."""
        pages = self.store.pages.get("full")
        refs = lease.in_place_pages
        if pages is None or not refs:
            return
        page = self.page_size
        if [r.start for r in refs] != list(range(lease.hit, lease.kv_read_end, page)):
            raise IntegrityError(
                f"KV read in place for [{lease.hit}, {lease.kv_read_end}) is incomplete"
            )
        ids = [r.page for r in refs]
        pages.ensure(max(ids))
        for ref in refs:
            if self.check_owners and pages.owner[ref.page] != tags.tag(ref.start + page):
                violations.append(
                    f"full page {ref.page} read in place for [{ref.start}, {ref.start + page})"
                    " holds another prefix's KV"
                )
        self.faults.pages_read(lease.request_id, "full", ids)
        keys, values = pages.read(ids)
        lo = lease.hit - kv_start["full"]
        hi = lease.kv_read_end - kv_start["full"]
        for i, layer in enumerate(pages.layers):
            cache_layer = dc.layers[layer.index]
            cache_layer.keys[0, :, lo:hi] = keys[i].transpose(0, 1)
            cache_layer.values[0, :, lo:hi] = values[i].transpose(0, 1)

    def _load_state(
        self, dc: Any, conv: list[torch.Tensor | None], rec: list[torch.Tensor | None]
    ) -> None:
        import torch

        for i, s in enumerate(self.model.layout.states):
            layer = dc.layers[s.layer]
            window = conv[i]
            if window is not None:
                full = torch.zeros((*window.shape[:-1], s.kernel), dtype=window.dtype)
                full[..., 1:] = window  # the oldest column is never read again
                layer.update_conv_state(full.unsqueeze(0), s.state_idx, conv_kernel_size=s.kernel)
            state = rec[i]
            if state is not None:
                layer.update_recurrent_state(state.unsqueeze(0), s.state_idx)

    # ------------------------------------------------------------------ state copies
    def read_state(self, dc: Any) -> tuple[list[torch.Tensor | None], list[torch.Tensor | None]]:
        conv: list[torch.Tensor | None] = []
        rec: list[torch.Tensor | None] = []
        for s in self.model.layout.states:
            layer = dc.layers[s.layer]
            window = layer.conv_states[s.state_idx] if s.conv_shape is not None else None
            conv.append(None if window is None else window[0, ..., 1:])
            state = layer.recurrent_states[s.state_idx] if s.rec_shape is not None else None
            rec.append(None if state is None else state[0])
        return conv, rec

    def write_state(
        self, dc: Any, slot: int | None, tags: PrefixTags, position: int, *, exact: bool = True
    ) -> None:
        """Copy the running state into ``slot`` (None: the device keeps none here), filed as
        the state after ``position`` tokens of ``tags``'s prefix; written through to the
        tiers too when it is ``exact`` (an injected late copy is not)."""
        if self.store.slots is None:
            raise IntegrityError("a state copy on a model without recurrent layers")
        conv, rec = self.read_state(dc)
        if slot is not None:
            self.store.slots.write(slot, conv, rec, tags.tag(position))
            self.faults.slot_written(slot)
        if self.tiers is not None and exact:
            self.tiers.put_state(tags.key, tags.namespace, position, conv, rec)

    def kv_to_tiers(
        self, dc: Any, key: bytes, ns: str | None, kv_start: dict[str, int], lo: int, hi: int
    ) -> None:
        """Write the whole pages of ``[lo, hi)`` the model's cache holds through to the tiers
        (what this request computed; whether the device keeps it or not)."""
        tiers = self.tiers
        if tiers is None:
            return
        page = self.page_size
        for kind, pages in self.store.pages.items():
            first = max(lo, kv_start[kind])
            first += -first % page
            last = hi - hi % page
            if last <= first:
                continue
            base = kv_start[kind]
            keys = [dc.layers[a.index].keys[0, :, first - base : last - base] for a in pages.layers]
            values = [
                dc.layers[a.index].values[0, :, first - base : last - base] for a in pages.layers
            ]
            tiers.put_pages(
                kind,
                key,
                ns,
                list(range(first, last, page)),
                [k.transpose(0, 1) for k in keys],
                [v.transpose(0, 1) for v in values],
            )

    # ------------------------------------------------------------------ scatter
    def scatter(
        self,
        full_key: bytes,
        ns: str | None,
        dc: Any,
        kv_start: dict[str, int],
        kv_len: int,
        cached: dict[str, tuple[PageRef, ...]],
    ) -> None:
        """Write the request's KV into every page the cache filed its tokens under
        (``cached``: from ``publish`` or ``finish``) whose owner tag is not this prefix (new
        pages; reused ids still holding an earlier owner's data)."""
        import torch

        page = self.page_size
        tags = PrefixTags(ns, full_key)
        for kind, pages in self.store.pages.items():
            lo = kv_start[kind]
            ids: list[int] = []
            starts: list[int] = []
            partial: list[tuple[int, int]] = []
            for ref in cached.get(kind, ()):
                start, page_id = ref.start, ref.page
                tag = tags.tag(start + page)
                pages.ensure(page_id)
                if pages.owner[page_id] == tag:
                    continue
                if start < lo:
                    # revived SWA KV this request never had: leave it unclaimed, a read
                    # of it is then reported as a violation
                    pages.owner[page_id] = None
                    self.unfilled_pages += 1
                elif start + page > kv_len:
                    partial.append((page_id, start))  # only with the stale-tail fault
                else:
                    ids.append(page_id)
                    starts.append(start)
            if not ids and not partial:
                continue
            sources_k = []
            sources_v = []
            for layer in pages.layers:
                cache_layer = dc.layers[layer.index]
                sources_k.append(cache_layer.keys[0].transpose(0, 1))  # [T, *k_shape]
                sources_v.append(cache_layer.values[0].transpose(0, 1))
                if sources_k[-1].shape[0] != kv_len - lo:
                    raise IntegrityError(
                        f"{kind}: the model holds {sources_k[-1].shape[0]} positions of KV, "
                        f"expected [{lo}, {kv_len})"
                    )
            if ids:
                offsets = torch.tensor(starts, dtype=torch.long)[:, None] - lo
                index = (offsets + torch.arange(page)[None]).flatten()
                pages.write(
                    ids,
                    [s[index] for s in sources_k],
                    [s[index] for s in sources_v],
                    [tags.tag(s + page) for s in starts],
                )
                self.faults.pages_written(kind, ids)
            for page_id, start in partial:
                valid = kv_len - start
                pages.write_partial(
                    page_id,
                    valid,
                    [s[start - lo : kv_len - lo] for s in sources_k],
                    [s[start - lo : kv_len - lo] for s in sources_v],
                    tags.tag(start + page),
                )
                self.faults.pages_corrupted(kind, [page_id])


def _cat(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    import torch

    return torch.cat([a, b])
