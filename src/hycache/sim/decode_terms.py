"""One decode token's FLOPs as an exact affine function of its context, for batch sums in
closed form.

A decode token with ``c`` tokens of context costs ``spec.prefill_flops(c, 1)`` plus the LM
head. Per group, with ``new = 1``:

- full attention: ``layers * (2 * projection_params + 4 * q_heads * head_dim * (c + 1))``;
- sliding window: the same with ``min(c + 1, window)`` keys, i.e. ``1 + min(c, window - 1)``;
- recurrent layers and the MLP: independent of ``c``.

So ``f(c) = base + full * c + window_slope * min(c, window - 1)`` with integer coefficients
(every count in a spec is an integer). :func:`decode_terms` reads the three coefficients off
``f`` itself (no second copy of the FLOP formulas) and checks them on probe contexts on both
sides of the window; a spec where ``f`` is not of that form, or not integer-valued, gets None
and the caller sums per sequence.

Why the closed form gives the per-sequence float sum bit for bit: every ``f(c)`` is an
integer, and so is every partial sum of a batch. A float holds every integer below ``2 **
53`` exactly, so while the batch total stays below it, summing floats left to right and
summing integers give the same number (:meth:`DecodeTerms.total` returns None above it).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

#: every integer up to this is exact in a float (53-bit significand)
EXACT_FLOAT_INTEGERS = 2**53


@dataclass(frozen=True)
class DecodeTerms:
    """``f(c) = base + full * c + window_slope * min(c, window - 1)`` (``window`` 0: no
    sliding-window term)."""

    base: int
    full: int
    window_slope: int
    window: int

    def at(self, context: int) -> int:
        """``f(context)``."""
        total = self.base + self.full * context
        if self.window_slope:
            total += self.window_slope * min(context, self.window - 1)
        return total

    def total(self, contexts: Sequence[int]) -> float | None:
        """``sum(f(c) for c in contexts)`` as a float, exactly; None when the sum reaches
        ``EXACT_FLOAT_INTEGERS`` (a float sum could round there). ValueError for a negative
        context."""
        if not contexts:
            return 0.0
        if min(contexts) < 0:
            raise ValueError(f"context must be >= 0, got {min(contexts)}")
        total = self.base * len(contexts) + self.full * sum(contexts)
        if self.window_slope:
            edge = self.window - 1
            total += self.window_slope * sum(c if c < edge else edge for c in contexts)
        if total >= EXACT_FLOAT_INTEGERS:
            return None
        return float(total)


def decode_terms(flops: Callable[[int], float], window: int) -> DecodeTerms | None:
    """The terms of ``flops`` (one decode token's FLOPs by context; ``window`` the
    sliding-window size, 0 for none), or None when ``flops`` is not integer-valued and of the
    module's form on every probe context."""
    probes = [0, 1, 2, 3, 1000, 123_457, 2**20]
    if window:
        probes += [window - 2, window - 1, window, window + 1, 2 * window, 3 * window + 7]
    values = {c: flops(c) for c in sorted({p for p in probes if p >= 0})}
    if not all(v.is_integer() and 0 <= v < EXACT_FLOAT_INTEGERS for v in values.values()):
        return None
    exact = {c: int(v) for c, v in values.items()}
    base = exact[0]
    if window >= 2:
        # below the window every key adds both slopes; past it only the full one
        inside = exact[1] - exact[0]
        full = exact[window] - exact[window - 1]
        terms = DecodeTerms(base, full, inside - full, window)
    else:
        terms = DecodeTerms(base, exact[1] - exact[0], 0, 0)
    if any(terms.at(c) != value for c, value in exact.items()):
        return None
    return terms
