"""``TierIdentity``: what every stored object must match to be read back — the model/layout
fingerprint and, per component, the dtype and shape of each tensor.

The fingerprint digests the model type, the engine dtype, the device page size, the measured
cache layout (every attention layer's K/V shapes, every recurrent state's shapes and dtypes)
and a sample of the weights (each parameter's name, shape and its first and last 64 values),
so another model, another dtype or another layout writing to the same store never passes.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hycache.engine.layout import CacheLayout, dtype_name

if TYPE_CHECKING:
    from hycache.engine.model import LoadedModel

#: (dtype name, shape) of one tensor of an object
TensorSpec = tuple[str, tuple[int, ...]]

_SAMPLE = 64


@dataclass(frozen=True)
class TierIdentity:
    """``fingerprint`` (hex), ``page`` size and the tensors each component's object holds."""

    fingerprint: str
    page: int
    specs: dict[str, tuple[TensorSpec, ...]]
    #: per recurrent state of the layout: whether it has a conv window, a recurrent state
    state_parts: tuple[tuple[bool, bool], ...] = ()

    def nbytes(self, component: str) -> int:
        from hycache.spec.model import DTYPE_BYTES

        total = 0
        for dtype, shape in self.specs[component]:
            n = DTYPE_BYTES[dtype]
            for d in shape:
                n *= d
            total += n
        return total


def component_specs(
    layout: CacheLayout, page: int, dtype: str
) -> dict[str, tuple[TensorSpec, ...]]:
    """Per component the tensors of one object, in their stored order."""
    specs: dict[str, tuple[TensorSpec, ...]] = {}
    for kind in ("full", "swa"):
        layers = layout.attention_of(kind)
        if layers:
            specs[kind] = tuple(
                spec
                for a in layers
                for spec in ((dtype, (page, *a.k_shape)), (dtype, (page, *a.v_shape)))
            )
    state: list[TensorSpec] = []
    for s in layout.states:
        if s.conv_shape is not None:
            state.append((s.conv_dtype or dtype, s.conv_shape))
        if s.rec_shape is not None:
            state.append((s.rec_dtype or dtype, s.rec_shape))
    if state:
        specs["state"] = tuple(state)
    return specs


def model_identity(model: LoadedModel, page: int) -> TierIdentity:
    """The identity of ``model``'s objects with device pages of ``page`` tokens."""
    import torch

    dtype = dtype_name(model.dtype)
    specs = component_specs(model.layout, page, dtype)
    h = hashlib.blake2b(digest_size=16)
    h.update(f"{model.model_type}|{dtype}|{page}|{model.layout!r}".encode())
    with torch.no_grad():
        for name, param in model.model.named_parameters():
            flat = param.detach().reshape(-1)
            h.update(f"{name}{tuple(param.shape)}".encode())
            for part in (flat[:_SAMPLE], flat[-_SAMPLE:]):
                h.update(part.to(torch.float64).numpy().tobytes())
    parts = tuple((s.conv_shape is not None, s.rec_shape is not None) for s in model.layout.states)
    return TierIdentity(h.hexdigest(), page, specs, parts)
