"""The garbage collector's pace during a replay.

A replay allocates container objects by the million (heap entries, nodes, leases) and frees
nearly all of them by reference counting: the cache's own structures break their cycles
(a pruned node is unlinked from its parent). CPython still runs its cyclic collector on its
youngest generation after every 700 net container allocations, and each of those runs
traverses every young object and, every tenth and hundredth time, the older generations,
where the whole tree and the eviction heaps live. Those runs find next to nothing, yet
they cost a sizeable share of a replay's time (``docs/benchmarks.md``, "The collector's pace").

:func:`fewer_collections` raises the youngest generation's threshold for the duration of a
replay and puts the interpreter's settings back afterwards. It changes when cyclic garbage is
found, never what a replay computes. Forked workers inherit the setting from the process that
forks them inside the block.

What a replay drops whole is another matter: a cache's tree is a web of cycles (parents and
children), so the caches of a bootstrap's losing replays are garbage only the collector finds.
:func:`collect_dropped` finds them at once, before the replay that follows, instead of
carrying them (tens of megabytes) until a collection of the oldest generation comes round.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

from hycache.errors import ConfigError

#: net container allocations between two collections of the youngest generation during a
#: replay. At a few hundred bytes per young object the cyclic garbage a replay could hold
#: before a collection stays in the tens of megabytes; the ablation in docs/benchmarks.md
#: ("The collector's pace") shows 10,000 to 100,000 within noise of the collector off.
YOUNG_THRESHOLD = 50_000


@contextmanager
def fewer_collections(young: int | None = YOUNG_THRESHOLD) -> Iterator[None]:
    """Collect the youngest generation after ``young`` net container allocations inside the
    block (never more often than the interpreter already does); None leaves the settings
    alone, as does a collector whose threshold is 0 (off). ConfigError if ``young`` < 1,
    before anything changes."""
    if young is not None and young < 1:
        raise ConfigError(f"the young generation's threshold must be >= 1, got {young}")
    before = gc.get_threshold()
    if young is None or before[0] == 0 or young <= before[0]:
        yield
        return
    gc.set_threshold(young, *before[1:])
    try:
        yield
    finally:
        gc.set_threshold(*before)


def collect_dropped() -> None:
    """Collect every generation now: the caches a bootstrap dropped go before the next
    replay builds its own."""
    gc.collect()
