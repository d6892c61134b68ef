"""The prefill -> decode payload: a header, then the pulled KV of every full-attention layer
(K then V, ``[tokens, *shape]``, exactly the positions pulled: no page padding) and the state
(conv windows and recurrent states, as the store keeps them), one tensor each.

A header with ``ok: False`` says the prefill side could not run the request (the decode side
then fails it instead of waiting)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hycache.engine.layout import dtype_name
from hycache.errors import CapacityError, IntegrityError

if TYPE_CHECKING:
    import torch

    from hycache.engine.disagg.base import Channel, Pull
    from hycache.engine.model import LoadedModel
    from hycache.engine.transfer import Transfer


@dataclass(frozen=True)
class Arrived:
    """What the decode side received: per full-attention layer K and V of ``[kv_from, kv_to)``,
    and the state (None when not pulled)."""

    kv_from: int
    kv_to: int
    keys: tuple[torch.Tensor, ...]
    values: tuple[torch.Tensor, ...]
    conv: tuple[torch.Tensor | None, ...] | None
    rec: tuple[torch.Tensor | None, ...] | None


def _spec(t: torch.Tensor | None) -> tuple[tuple[int, ...], str] | None:
    return None if t is None else (tuple(int(d) for d in t.shape), dtype_name(t.dtype))


def send_failure(channel: Channel, error: str) -> None:
    channel.send_obj({"ok": False, "error": error})


def send_prefilled(
    channel: Channel,
    model: LoadedModel,
    transfer: Transfer,
    dc: Any,
    pull: Pull,
    *,
    state: bool,
) -> None:
    """Send KV ``[pull.kv_from, pull.kv_to)`` out of ``dc`` and, if ``state``, the state in
    ``dc`` (whatever position it is at: the caller makes sure it is ``pull.kv_to``)."""
    lo, hi = pull.kv_from, pull.kv_to
    tensors: list[torch.Tensor] = []
    for layer in model.layout.attention_of("full"):
        cache_layer = dc.layers[layer.index]
        held = int(cache_layer.keys.shape[2])
        if held < hi:
            raise IntegrityError(f"prefill holds {held} positions of KV, asked for [{lo}, {hi})")
        tensors.append(cache_layer.keys[0, :, lo:hi].transpose(0, 1).contiguous())
        tensors.append(cache_layer.values[0, :, lo:hi].transpose(0, 1).contiguous())
    conv: list[torch.Tensor | None] = []
    rec: list[torch.Tensor | None] = []
    if state:
        conv, rec = transfer.read_state(dc)
    channel.send_obj(
        {
            "ok": True,
            "kv_from": lo,
            "kv_to": hi,
            "kv": [_spec(t) for t in tensors],
            "conv": [_spec(t) for t in conv] if state else None,
            "rec": [_spec(t) for t in rec] if state else None,
        }
    )
    for t in tensors:
        channel.send_tensor(t)
    for s in (*conv, *rec):
        if s is not None:
            channel.send_tensor(s.contiguous())


def _recv_all(
    channel: Channel, specs: list[tuple[tuple[int, ...], str] | None]
) -> tuple[torch.Tensor | None, ...]:
    return tuple(None if s is None else channel.recv_tensor(s[0], s[1]) for s in specs)


def recv_prefilled(channel: Channel) -> Arrived:
    """Receive one payload; CapacityError when the prefill side failed the request."""
    header = channel.recv_obj()
    if not isinstance(header, dict) or "ok" not in header:
        raise IntegrityError(f"unexpected message from the prefill instance: {header!r}")
    if not header["ok"]:
        raise CapacityError(f"the prefill instance failed the request: {header['error']}")
    kv = _recv_all(channel, header["kv"])
    conv = _recv_all(channel, header["conv"]) if header["conv"] is not None else None
    rec = _recv_all(channel, header["rec"]) if header["rec"] is not None else None
    keys = tuple(t for t in kv[0::2] if t is not None)
    values = tuple(t for t in kv[1::2] if t is not None)
    return Arrived(header["kv_from"], header["kv_to"], keys, values, conv, rec)
