"""Model specifications: what a model's layers cache and cost.

``from hycache.spec import ModelSpec`` is the usual entry point; ``ModelSpec.named(name)`` and
``ModelSpec.from_hf_config(path)`` build specs. The submodules import each other without cycles
(``model`` imports ``hf.parse`` and ``named``, which import only ``groups``, ``moe`` and
``fields``); this package module only re-exports.
"""

from hycache.spec.fields import LayerKind, SpecFields
from hycache.spec.groups import (
    FullAttentionGroup,
    LayerGroup,
    RecurrentGroup,
    SlidingWindowGroup,
    canonical_dtype,
    dtype_bytes,
)
from hycache.spec.model import NAMED_SPECS, ModelSpec, load_spec
from hycache.spec.moe import MoEShape

__all__ = [
    "NAMED_SPECS",
    "FullAttentionGroup",
    "LayerGroup",
    "LayerKind",
    "MoEShape",
    "ModelSpec",
    "RecurrentGroup",
    "SlidingWindowGroup",
    "SpecFields",
    "canonical_dtype",
    "dtype_bytes",
    "load_spec",
]
