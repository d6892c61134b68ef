"""``SpecFields``: the fields of a ``ModelSpec`` as the config parsers and the built-in specs
produce them, before ``ModelSpec`` validates them.

It exists so that the parsers (``hycache.spec.hf``) and the built-in specs
(``hycache.spec.named``) do not import ``hycache.spec.model``: ``ModelSpec.from_hf_config`` and
``ModelSpec.named`` turn these fields into a ``ModelSpec`` (no import cycle in ``hycache.spec``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from hycache.spec.groups import LayerGroup
from hycache.spec.moe import MoEShape

LayerKind = Literal["full", "swa", "recurrent", "full+recurrent", "mlp"]
"""What one decoder layer caches: full-attention KV, sliding-window KV, a recurrent state, both
(parallel hybrids such as Falcon-H1), or nothing (NemotronH's MLP / MoE-only layers)."""


@dataclass(frozen=True, kw_only=True)
class SpecFields:
    """A model spec's fields, unvalidated (``ModelSpec`` checks them).

    ``layer_kinds``: one entry per decoder layer, in order (empty when unknown, e.g. for a spec
    written by hand); ``ModelSpec`` does not keep it. Other fields as in ``ModelSpec``.
    """

    name: str
    groups: tuple[LayerGroup, ...]
    hidden_size: int
    vocab_size: int
    active_mlp_params_per_token: int
    num_layers: int
    moe: MoEShape | None = None
    layer_kinds: tuple[LayerKind, ...] = ()
