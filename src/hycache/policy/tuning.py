"""hycache's one-time self-tuning: which eviction and checkpoint-skipping suit this workload.

The value eviction (``hycache.policy.value``) wins where what is worth keeping is long and
reused again and again (conversations, shared documents); plain recency wins where reuse is
mostly temporal and short-lived (the Mooncake traces at small capacities). Whether to skip
checkpoint kinds that were rarely reused is likewise workload-dependent. Like Marconi's alpha,
the choice is made once: the caller replays a bootstrap window with every candidate and scores
each (the simulator: tokens reused); the best wins, but the first listed (the default) keeps
its place unless another beats it by ``MARGIN``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

#: the candidates, best-first for ties: the defaults first
CANDIDATES: tuple[Mapping[str, object], ...] = (
    {"eviction": "value", "adaptive": True},
    {"eviction": "value", "adaptive": False},
    {"eviction": "lru", "adaptive": False},
)
#: another candidate replaces the first (the default) only if it saves this much more: a short
#: window is noisy, and the default is the better bet when they are close
MARGIN = 0.1


def tune_knobs(
    replay: Callable[[Mapping[str, object]], float],
    candidates: Sequence[Mapping[str, object]] = CANDIDATES,
) -> tuple[Mapping[str, object], list[float]]:
    """``replay(knobs)`` replays the bootstrap window with those knobs and returns its score
    (higher is better). The first candidate wins unless another scores ``MARGIN`` more.
    Returns the winning knobs and every candidate's score, in ``candidates`` order."""
    scores = [replay(knobs) for knobs in candidates]
    best = max(range(len(candidates)), key=lambda i: (scores[i], -i))
    if scores[best] <= scores[0] * (1 + MARGIN):
        best = 0
    return candidates[best], scores
