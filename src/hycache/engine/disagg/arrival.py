"""Where the pulled KV lands on the decode side: ``LandingPages``, pages of the decode
instance's own page size, reused request after request (so they hold the previous request's
data), and ``set_state``, which overwrites the running state of the model's cache.

The pulled positions ``[kv_from, kv_to)`` rarely fill whole pages of the decode side's size:
the part of the first and last page outside them is *zeroed on arrival*, so no earlier
request's KV stays in a page this request owns (vLLM's NIXL connector zeroes untransferred
tails for the same reason). ``dirty`` finds pages where that did not happen; the decode side
reports them as violations.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hycache.engine.store import PageTensors

if TYPE_CHECKING:
    import torch

    from hycache.engine.disagg.payload import Arrived
    from hycache.engine.model import LoadedModel


class LandingPages:
    """Receive pages of ``page_size`` tokens for every full-attention layer."""

    def __init__(self, model: LoadedModel, page_size: int, *, zero_tail: bool = True) -> None:
        self.page_size = page_size
        self.zero_tail = zero_tail
        self.pages = PageTensors(model.layout.attention_of("full"), page_size, model.dtype)
        #: KV that fills every page before it lands (``--inject no-tail-zero``: the pool is
        #: pre-filled with another request's data); None: pages keep what they held
        self.donor: tuple[list[torch.Tensor], list[torch.Tensor]] | None = None

    def _span(self, arrived: Arrived) -> tuple[int, int]:
        base = arrived.kv_from - arrived.kv_from % self.page_size
        count = -(-(arrived.kv_to - base) // self.page_size)
        return base, count

    def land(self, arrived: Arrived) -> tuple[list[torch.Tensor], list[torch.Tensor], list[int]]:
        """Write the arrived KV into pages ``0..count-1``; per layer the landed positions
        (views of the pages) and the page ids used."""
        if arrived.kv_to <= arrived.kv_from:
            return [], [], []
        base, count = self._span(arrived)
        self.pages.ensure(count - 1)
        lo, hi = arrived.kv_from - base, arrived.kv_to - base
        keys: list[torch.Tensor] = []
        values: list[torch.Tensor] = []
        for i in range(len(self.pages.layers)):
            for store, sent, out in (
                (self.pages.k[i], arrived.keys[i], keys),
                (self.pages.v[i], arrived.values[i], values),
            ):
                flat = store[:count].flatten(0, 1)  # a view: the first ids are contiguous
                if self.donor is not None:
                    donor = (self.donor[0] if out is keys else self.donor[1])[i]
                    reps = -(-flat.shape[0] // donor.shape[0])
                    flat.copy_(donor.repeat(reps, *[1] * (donor.dim() - 1))[: flat.shape[0]])
                if self.zero_tail:
                    flat[:lo].zero_()
                    flat[hi:].zero_()
                flat[lo:hi] = sent
                out.append(flat[lo:hi])
        return keys, values, list(range(count))

    def dirty(self, arrived: Arrived) -> list[int]:
        """Landed pages whose positions outside ``[kv_from, kv_to)`` are not all zero."""
        if arrived.kv_to <= arrived.kv_from:
            return []
        base, count = self._span(arrived)
        lo, hi = arrived.kv_from - base, arrived.kv_to - base
        bad: set[int] = set()
        for store in (*self.pages.k, *self.pages.v):
            flat = store[:count].flatten(0, 1)
            for start, stop in ((0, lo), (hi, count * self.page_size)):
                outside = flat[start:stop].flatten(1).abs().sum(dim=1)
                for pos in outside.nonzero().flatten().tolist():
                    bad.add((start + int(pos)) // self.page_size)
        return sorted(bad)


def set_state(
    model: LoadedModel,
    dc: Any,
    conv: tuple[torch.Tensor | None, ...],
    rec: tuple[torch.Tensor | None, ...],
) -> None:
    """Make ``dc``'s running state the given one (overwriting a state restored before)."""
    import torch

    for i, s in enumerate(model.layout.states):
        layer = dc.layers[s.layer]
        window = conv[i]
        if window is not None:
            if layer.is_conv_states_initialized[s.state_idx]:
                target = layer.conv_states[s.state_idx]
                target[0, ..., 0] = 0  # the oldest column is never read again
                target[0, ..., 1:] = window
            else:
                full = torch.zeros((*window.shape[:-1], s.kernel), dtype=window.dtype)
                full[..., 1:] = window
                layer.update_conv_state(full.unsqueeze(0), s.state_idx, conv_kernel_size=s.kernel)
        state = rec[i]
        if state is not None:
            layer.update_recurrent_state(state.unsqueeze(0), s.state_idx)
