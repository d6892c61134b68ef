"""Loading a checkpoint through transformers and measuring what its cache holds.

``load_model(dir)`` goes through ``AutoModelForCausalLM.from_pretrained`` (the real loading
path: tiny checkpoints from ``hycache init-model`` and real ones alike), then runs a two-token
probe through a fresh ``DynamicCache`` (``hycache.engine.layout``) to learn, per decoder
layer, what the model caches:

* attention layers (``DynamicLayer`` full, ``DynamicSlidingWindowLayer`` SWA): K and V
  per-token shapes ``[kv_heads, head_dim]`` (Kimi's MLA caches a latent: K ``[1, kv_lora_rank]``,
  V ``[1, rope_dim]``);
* recurrent layers (``LinearAttentionLayer`` and the hybrid layer classes): per state index the
  conv window ``[channels, kernel]`` and the recurrent state shape.

The cache accounting uses the ``ModelSpec`` parsed from ``config.json``; where the model's real
tensors differ from it (dtype promotions, layouts transformers stores differently) the group is
re-sized to the measured bytes, so the pool's budget bounds the engine's real tensors.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hycache.engine.layout import CacheLayout, engine_spec, measure_layout
from hycache.errors import ConfigError, SpecError
from hycache.spec.model import ModelSpec

if TYPE_CHECKING:
    import torch

DTYPES = ("float32", "float64")


def require_engine() -> None:
    """ConfigError unless torch, transformers and safetensors can be imported."""
    missing = []
    for module in ("torch", "safetensors", "transformers"):
        try:
            __import__(module)
        except ImportError:
            missing.append(module)
    if missing:
        raise ConfigError(
            f"the engine needs {', '.join(missing)}: install the extra, "
            "pip install 'hycache[engine]' (torch==2.13.0, transformers, safetensors)"
        )
    import transformers

    tf: Any = transformers
    tf.logging.set_verbosity_error()
    tf.utils.logging.disable_progress_bar()


def torch_dtype(name: str) -> torch.dtype:
    import torch

    if name not in DTYPES:
        raise ConfigError(f"dtype must be one of {', '.join(DTYPES)}, got {name!r}")
    dtype: torch.dtype = getattr(torch, name)
    return dtype


@dataclass
class LoadedModel:
    """A transformers causal LM, its cache layout and the spec the cache accounts with."""

    path: Path
    model: Any
    config: Any
    model_type: str
    dtype: torch.dtype
    layout: CacheLayout
    spec: ModelSpec
    notes: tuple[str, ...]

    @property
    def vocab_size(self) -> int:
        return self.spec.vocab_size

    def new_cache(self) -> Any:
        """A fresh cache object of the kind the model builds itself (``DynamicCache`` with the
        model's per-layer classes), SWA layers recording their whole past so the engine can
        page out every position it computed."""
        from transformers import DynamicCache

        cache = DynamicCache(config=self.model.config)
        for a in self.layout.attention:
            if a.kind == "swa":
                layer: Any = cache.layers[a.index]
                layer.activate_past_recording()
        return cache

    def forward(self, cache: Any, tokens: list[int], start: int) -> torch.Tensor:
        """Run ``tokens`` at absolute positions ``start..`` through ``cache``; the logits of
        the last one (float64, 1-D)."""
        return self.forward_all(cache, tokens, start, keep=1)[-1]

    def forward_all(self, cache: Any, tokens: list[int], start: int, *, keep: int) -> torch.Tensor:
        """Like ``forward``, the logits of the last ``keep`` tokens (float64, ``[keep, vocab]``):
        what a verification pass over draft tokens needs."""
        import torch

        with torch.no_grad():
            ids = torch.tensor([tokens], dtype=torch.long)
            positions = torch.arange(start, start + len(tokens), dtype=torch.long)[None]
            out = self.model(
                input_ids=ids,
                position_ids=positions,
                cache=cache,
                use_cache=True,
                logits_to_keep=keep,
            )
            logits: torch.Tensor = out.logits[0].to(torch.float64)
        return logits


def _check_dir(path: Path) -> None:
    if not path.exists():
        raise ConfigError(f"{path}: no such model directory")
    if not path.is_dir():
        raise ConfigError(f"{path}: not a directory (expected a checkpoint directory)")
    if not (path / "config.json").is_file():
        raise ConfigError(f"{path}: missing config.json (not a transformers checkpoint)")
    weights = [
        p
        for p in path.iterdir()
        if p.name.endswith(".safetensors")
        or p.name.endswith(".safetensors.index.json")
        or p.name in ("pytorch_model.bin", "pytorch_model.bin.index.json")
    ]
    if not weights:
        raise ConfigError(f"{path}: missing model.safetensors (no weight files in the directory)")


def _model_type(path: Path) -> str:
    try:
        data = json.loads((path / "config.json").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{path / 'config.json'}: cannot read: {exc}") from exc
    model_type = data.get("model_type") if isinstance(data, dict) else None
    if not isinstance(model_type, str):
        raise SpecError(f"{path / 'config.json'}: missing field 'model_type'", field="model_type")
    return model_type


def load_model(path: str | os.PathLike[str], *, dtype: str = "float32") -> LoadedModel:
    """Load the checkpoint in ``path`` for the engine. ConfigError/SpecError naming what is
    missing (directory, config.json, weights, a config field) or unsupported."""
    require_engine()
    directory = Path(path)
    _check_dir(directory)
    model_type = _model_type(directory)
    # the spec parser knows which architectures hycache can account for: fail early and clearly
    ModelSpec.from_hf_config(directory, dtype=dtype)
    torch_type = torch_dtype(dtype)

    from transformers import AutoModelForCausalLM

    kwargs: dict[str, Any] = {"dtype": torch_type}
    model: Any
    try:
        try:
            model = AutoModelForCausalLM.from_pretrained(
                directory, experts_implementation="eager", **kwargs
            )
        except ValueError as exc:
            if "experts implementation" not in str(exc):
                raise
            model = AutoModelForCausalLM.from_pretrained(directory, **kwargs)
    except (OSError, ValueError, KeyError, RuntimeError) as exc:
        raise ConfigError(f"{directory}: transformers cannot load the checkpoint: {exc}") from exc
    model.eval()
    layout = measure_layout(model)
    spec, notes = engine_spec(directory, layout, dtype)
    return LoadedModel(
        directory, model, model.config, model_type, torch_type, layout, spec, tuple(notes)
    )
