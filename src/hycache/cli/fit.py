"""Capacities checked before a simulation runs: each must hold at least the smallest request.

The simulator serves a request that no cache of the capacity could ever hold uncached and counts
it as rejected; the cache decides that in ``admit``, which raises ``CapacityError`` when the
request's whole working set (KV pages of prompt + output, its running states) does not fit
the empty pool of the preset's layout. A capacity where even the smallest request (fewest
prompt + output tokens) is refused would reject everything and print zeros, so it is an error
here (``CapacityError``, exit 2) naming the capacity, the smallest request and, per preset,
the smallest capacity that holds it (found by bisection over fresh caches).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from hycache.cache.lease import Lease
from hycache.cache.presets import build_cache
from hycache.cli.sizes import Size, format_bytes
from hycache.errors import CapacityError, ConfigError
from hycache.sim.request import Request
from hycache.sim.simulate import SimulationConfig, preset_knobs

_MAX_BYTES = 1 << 62


@dataclass(frozen=True)
class Capacity:
    """A capacity as given on the command line and in bytes."""

    size: Size
    nbytes: int
    footprint: int | None

    def describe(self) -> str:
        if self.size.relative and self.footprint is not None:
            whole = format_bytes(self.footprint)
            return f"{self.size.text} ({format_bytes(self.nbytes)} of the {whole} footprint)"
        return f"{self.size.text} ({self.nbytes} B)"


def resolve(sizes: Sequence[Size], footprint: int | None) -> list[Capacity]:
    """Each size in bytes (percentages of ``footprint``)."""
    return [Capacity(size, size.resolve(footprint), footprint) for size in sizes]


def smallest_request(requests: Iterable[Request]) -> Request | None:
    """The request with the fewest prompt + output tokens (the first of equals)."""
    best: Request | None = None
    for request in requests:
        if best is None or request.prompt_len + request.output_len < (
            best.prompt_len + best.output_len
        ):
            best = request
    return best


def holds(config: SimulationConfig, policy: str, capacity: int, request: Request) -> bool:
    """Whether an empty ``policy`` cache of ``capacity`` bytes admits ``request``."""
    knobs = preset_knobs(config, policy)
    cache = build_cache(config.spec, capacity, policy, track_ids=False, **knobs)
    try:
        lease = cache.admit(
            request.prompt,
            max_new_tokens=request.output_len,
            namespace=request.namespace,
            session=request.session,
            kernel_grid=config.mode == "engine",
        )
    except CapacityError:
        return False
    if isinstance(lease, Lease):
        cache.abort(lease)
    return True


def smallest_capacity(
    config: SimulationConfig, policy: str, request: Request, refused: int
) -> int | None:
    """The fewest bytes (above ``refused``, which does not hold it) at which ``policy`` holds
    ``request``; None when no capacity up to 2^62 bytes does."""
    low, high = refused, max(2 * refused, 1 << 20)
    while not holds(config, policy, high, request):
        if high >= _MAX_BYTES:
            return None
        low, high = high, min(2 * high, _MAX_BYTES)
    while high - low > 1:
        middle = (low + high) // 2
        if holds(config, policy, middle, request):
            high = middle
        else:
            low = middle
    return high


def check_capacities(
    config: SimulationConfig,
    requests: Iterable[Request],
    capacities: Sequence[Capacity],
    policies: Sequence[str],
    label: str,
) -> None:
    """CapacityError when some capacity cannot hold the smallest request under some policy;
    ConfigError when there is no request at all. Builds caches, runs nothing."""
    request = smallest_request(requests)
    if request is None:
        raise ConfigError(f"{label}: no requests to replay")
    tokens = f"{request.prompt_len} + {request.output_len} tokens"
    needs: dict[str, int | None] = {}
    lines: list[str] = []
    for capacity in capacities:
        short = [p for p in policies if not holds(config, p, capacity.nbytes, request)]
        if not short:
            continue
        parts = []
        for policy in short:
            if policy not in needs:
                needs[policy] = smallest_capacity(config, policy, request, capacity.nbytes)
            need = needs[policy]
            shown = "no capacity" if need is None else f"at least {format_bytes(need)} ({need} B)"
            parts.append(f"{policy} needs {shown}")
        lines.append(
            f"capacity {capacity.describe()} cannot hold even the smallest request of {label} "
            f"({request.request_id}: {tokens}): {'; '.join(parts)}"
        )
    if lines:
        raise CapacityError("\n".join(lines))
