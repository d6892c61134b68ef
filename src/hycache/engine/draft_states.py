"""Per-draft-step recurrent states: one verification forward that keeps the state after
every draft token, the copy-back of one of them, and the KV rollback of rejected tokens.

A recurrent layer overwrites its state at every token: after a forward over ``[x0, d1..dk]``
the cache holds the state after ``dk`` only, and when the verifier rejects ``d(a+1)`` the
state after ``d(a)`` is gone. SGLang keeps one intermediate state per draft step
(``intermediate_ssm``, written by its kernels) and copies the accepted step back.

transformers' recurrent mixers (Gated DeltaNet, Mamba2, KDA) return only the final state of a
multi-token call, so ``StepRecorder.verify`` runs the verification as one model forward in
which each recurrent mixer is stepped token by token: while the forward runs, a mixer's
``forward`` is replaced by a loop that calls the original on one token at a time (its
single-token decode path, exactly what plain decoding runs) and clones the layer's conv and
recurrent tensors after each token. Attention, MLPs and the LM head run once over all
``k + 1`` tokens, so every position's logits come out of that one forward; only the mixers'
scans are sequential. ``copy_back`` writes a recorded step into the live cache layers (in
place: the model's tensors keep their identity) and ``rollback_kv`` drops the attention KV of
the rejected tokens (full and sliding-window layers alike; the engine keeps every position).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hycache.errors import ConfigError, IntegrityError

if TYPE_CHECKING:
    import torch

    from hycache.engine.model import LoadedModel


@dataclass(frozen=True)
class LayerState:
    """A recurrent layer's conv windows and recurrent states (per state index) at one step."""

    conv: tuple[torch.Tensor | None, ...]
    rec: tuple[torch.Tensor | None, ...]


#: per draft step (index i: after the (i + 1)-th fed token), per recurrent layer index
StepStates = list[dict[int, LayerState]]


@dataclass(frozen=True)
class Verification:
    """What one verification forward over ``k + 1`` fed tokens returns: the logits after each
    fed token (``[k + 1, vocab]``) and the recurrent state after each (``steps``)."""

    logits: torch.Tensor
    steps: StepStates


def find_mixers(model: LoadedModel) -> dict[int, Any]:
    """The recurrent mixer module of every recurrent layer: the submodule whose ``layer_idx`` is
    the layer's and which owns a causal ``Conv1d`` (Gated DeltaNet, Mamba2, KDA all do).
    ConfigError when a layer has none or several (a layout this recorder does not know)."""
    from torch import nn

    wanted = set(model.layout.recurrent_layers)
    found: dict[int, list[Any]] = {index: [] for index in wanted}
    for module in model.model.modules():
        index = getattr(module, "layer_idx", None)
        if index not in wanted:
            continue
        if any(isinstance(child, nn.Conv1d) for child in module.children()):
            found[index].append(module)
    mixers: dict[int, Any] = {}
    for index, modules in sorted(found.items()):
        if len(modules) != 1:
            raise ConfigError(
                f"speculative decoding: layer {index} of {model.model_type} has {len(modules)} "
                "recurrent mixer modules (expected one with layer_idx and a Conv1d)"
            )
        mixers[index] = modules[0]
    return mixers


class StepRecorder:
    """Runs verification forwards that record the recurrent state after every fed token."""

    def __init__(self, model: LoadedModel) -> None:
        self.model = model
        self.mixers = find_mixers(model)

    def verify(self, dc: Any, tokens: list[int], start: int) -> Verification:
        """One forward of ``tokens`` at positions ``start..`` through ``dc``, the recurrent
        mixers stepped token by token; afterwards ``dc`` holds the state after the last token
        and the KV of all of them."""
        steps: StepStates = [{} for _ in tokens]
        originals = {index: mixer.forward for index, mixer in self.mixers.items()}
        try:
            for index, mixer in self.mixers.items():
                mixer.forward = self._stepping(index, originals[index], dc, steps)
            logits = self.model.forward_all(dc, tokens, start, keep=len(tokens))
        finally:
            for mixer in self.mixers.values():
                del mixer.forward  # the class's forward again
        for i, step in enumerate(steps):
            if set(step) != set(self.mixers):
                raise IntegrityError(f"draft step {i}: no state recorded for some recurrent layer")
        return Verification(logits, steps)

    @staticmethod
    def _stepping(
        index: int, original: Callable[..., Any], dc: Any, steps: StepStates
    ) -> Callable[..., Any]:
        import torch

        def forward(*args: Any, **kwargs: Any) -> Any:
            hidden = args[0] if args else kwargs.pop("hidden_states")
            length = hidden.shape[1]
            if length != len(steps):
                raise IntegrityError(f"layer {index}: mixer saw {length} tokens, not {len(steps)}")
            outputs = []
            for t in range(length):
                outputs.append(original(hidden[:, t : t + 1], *args[1:], **kwargs))
                steps[t][index] = snapshot(dc.layers[index])
            return torch.cat(outputs, dim=1)

        return forward

    @staticmethod
    def copy_back(dc: Any, state: dict[int, LayerState]) -> None:
        """Write a recorded step's states into ``dc``'s recurrent layers (in place)."""
        for index, saved in state.items():
            layer = dc.layers[index]
            for i, conv in enumerate(saved.conv):
                if conv is not None:
                    layer.conv_states[i].copy_(conv)
            for i, rec in enumerate(saved.rec):
                if rec is not None:
                    layer.recurrent_states[i].copy_(rec)

    def rollback_kv(self, dc: Any, tokens: int) -> None:
        """Drop the attention KV of the last ``tokens`` positions (rejected draft tokens)."""
        if tokens <= 0:
            return
        for attn in self.model.layout.attention:
            layer = dc.layers[attn.index]
            if layer.keys.shape[-2] < tokens:
                raise IntegrityError(f"layer {attn.index}: cannot roll back {tokens} tokens")
            layer.keys = layer.keys[..., :-tokens, :]
            layer.values = layer.values[..., :-tokens, :]
            if attn.kind == "swa":
                layer.cumulative_length -= tokens


def snapshot(layer: Any) -> LayerState:
    """Clones of a recurrent cache layer's conv and recurrent tensors."""
    conv = tuple(
        layer.conv_states[i].clone() if layer.is_conv_states_initialized[i] else None
        for i in range(layer.number_of_states)
    )
    rec = tuple(
        layer.recurrent_states[i].clone() if layer.is_recurrent_states_initialized[i] else None
        for i in range(layer.number_of_states)
    )
    return LayerState(conv, rec)
