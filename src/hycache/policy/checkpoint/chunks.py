"""Where prefill chunks end, and which checkpoints the recurrent kernel serves without a cut.

A chunked prefill runs ``[start, c1) [c1, c2) ... [ck, n)``. A state can be copied at a chunk
end, or inside a chunk at a multiple of the kernel's chunk from the chunk's start (the
intermediate states chunked GDN / KDA / Mamba2 kernels compute anyway; see
hycache.policy.base). These helpers are pure.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence


def floor_to(x: int, grid: int) -> int:
    """``x`` rounded down to a multiple of ``grid``."""
    return x - x % grid


def chunk_ends(
    start: int, end: int, budget: int | None, *, grid: int = 1, must_end_at: tuple[int, ...] = ()
) -> list[int]:
    """Cut ``[start, end)`` into chunks of at most ``budget`` tokens. A chunk that does not reach
    ``end`` is cut down to the ``grid`` (when that leaves it non-empty); chunks also end at every
    position of ``must_end_at`` inside the range."""
    ends: list[int] = []
    forced = sorted(p for p in set(must_end_at) if start < p < end)
    pos = start
    while pos < end:
        stop = end if budget is None else min(end, pos + budget)
        if stop < end and floor_to(stop, grid) > pos:
            stop = floor_to(stop, grid)
        for p in forced:
            if pos < p < stop:
                stop = p
                break
        ends.append(stop)
        pos = stop
    return ends


def chunk_start_of(start: int, ends: Sequence[int], position: int) -> tuple[int, bool]:
    """The start of the chunk of ``ends`` (prefill from ``start``) that holds ``position``, and
    whether ``position`` is that chunk's end."""
    index = bisect.bisect_left(ends, position)
    at_end = index < len(ends) and ends[index] == position
    return (ends[index - 1] if index else start), at_end


def in_kernel(start: int, ends: Sequence[int], position: int, kernel_chunk: int | None) -> bool:
    """Whether a state at ``position`` (start < position) of a prefill from ``start`` cut at
    ``ends`` is a chunk end or an in-kernel point: a multiple of ``kernel_chunk`` from the
    start of the chunk holding it (see hycache.policy.base)."""
    chunk_start, at_end = chunk_start_of(start, ends, position)
    if at_end:
        return True
    return kernel_chunk is not None and (position - chunk_start) % kernel_chunk == 0


def onto_kernel_grid(
    start: int, ends: Sequence[int], position: int, kernel_chunk: int, page: int
) -> int:
    """``position`` moved down to the nearest in-kernel point or chunk end of its chunk (a
    multiple of lcm(kernel_chunk, page) from the chunk's start); ``position`` itself when that
    is the prefill's start (nothing to move to) or not on the page grid."""
    chunk_start, at_end = chunk_start_of(start, ends, position)
    if at_end:
        return position
    moved = chunk_start + floor_to(position - chunk_start, math.lcm(kernel_chunk, page))
    return moved if moved > start and moved % page == 0 else position


def settle_ends(
    start: int, end: int, budget: int | None, points: Sequence[int], kernel_chunk: int | None
) -> list[int]:
    """Chunk ends for ``[start, end)`` in chunks of at most ``budget`` such that every prefill
    point of ``points`` (start < p < end) is a chunk end or in-kernel: those that are not end a
    chunk (re-checked, since a forced end moves the chunks after it)."""
    inside = sorted({p for p in points if start < p < end})
    forced: set[int] = set()
    while True:
        ends = chunk_ends(start, end, budget, must_end_at=tuple(forced))
        missing = {p for p in inside if not in_kernel(start, ends, p, kernel_chunk)}
        if not missing:
            return ends
        forced |= missing
