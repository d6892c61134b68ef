"""Prefill FLOPs in closed form: the formulas every layer group counts with, and a model's
coefficients in one object for the hot paths.

A layer group's prefill of ``new`` tokens after ``cached`` ones costs
``float(per_new * new + per_key * keys)``, where ``keys`` counts the keys the new tokens attend
to (:func:`attended_keys`; none for a recurrent group). The groups of
:mod:`hycache.spec.groups` give their two coefficients (``flops_terms``) and count their FLOPs
with :func:`group_flops`; :class:`PrefillFlops` keeps a model's coefficients and sums the
groups' floats in their order (``ModelSpec.prefill_flops`` is its sum; the eviction policies
and the cost model keep one and call it for every entry and step, without touching the spec's
dataclasses).
Integers only until the one conversion per group, so the sums are exact where Python's are.
"""

from __future__ import annotations


def check_prefill_args(cached: int, new: int) -> None:
    """Prefill lengths are token counts; a negative one is a caller bug (ValueError)."""
    if cached < 0 or new < 0:
        raise ValueError(f"prefill lengths must be >= 0, got cached={cached}, new={new}")


def sum_range(lo: int, hi: int) -> int:
    """Sum of the integers in [lo, hi] (0 when empty)."""
    return (lo + hi) * (hi - lo + 1) // 2 if hi >= lo else 0


def full_attended_keys(cached: int, new: int) -> int:
    """Keys the new tokens attend to under full causal attention, each itself included:
    ``sum_{i=cached}^{cached+new-1} (i + 1) = new * cached + new * (new + 1) / 2``."""
    return new * cached + new * (new + 1) // 2


def window_attended_keys(cached: int, new: int, window: int) -> int:
    """The same under a sliding window of ``window`` keys: ``sum_{p=cached+1}^{cached+new}
    min(p, window)``."""
    lo, hi = cached + 1, cached + new
    below = sum_range(lo, min(hi, window))
    above = max(0, hi - max(lo, window + 1) + 1) * window
    return below + above


def attended_keys(cached: int, new: int, window: int | None) -> int:
    """Keys attended to: full attention where ``window`` is None."""
    if window is None:
        return full_attended_keys(cached, new)
    return window_attended_keys(cached, new, window)


def group_flops(per_new: int, per_key: int, window: int | None, cached: int, new: int) -> float:
    """One group's prefill FLOPs (module docstring); ``per_key`` 0: no attention term."""
    keys = attended_keys(cached, new, window) if per_key else 0
    return float(per_new * new + per_key * keys)


class PrefillFlops:
    """A model's prefill FLOPs: ``prefill_flops(cached, new)`` sums the groups' ``group_flops``
    in the groups' order from 0, then adds the MLP's ``2.0 * mlp_params_per_token * new``."""

    __slots__ = ("_mlp", "_terms")

    def __init__(
        self, terms: tuple[tuple[int, int, int | None], ...], mlp_params_per_token: int
    ) -> None:
        """``terms``: per group, in the model's order, ``(per_new, per_key, window)``."""
        self._terms = terms
        self._mlp = mlp_params_per_token

    def prefill_flops(self, cached: int, new: int) -> float:
        check_prefill_args(cached, new)
        layers = 0.0
        for per_new, per_key, window in self._terms:
            layers += group_flops(per_new, per_key, window, cached, new)
        return layers + 2.0 * self._mlp * new
