"""What a replay reads: a re-iterable source of requests, and the sources any stretch of which
is cheap to read again (a parsed trace)."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator
from typing import Protocol, runtime_checkable

from hycache.sim.request import Request

#: A re-iterable source of requests (a trace is read again for every policy).
Source = Callable[[], Iterable[Request]]


@runtime_checkable
class PrefixSource(Protocol):
    """A source any stretch of which is cheap to read again (a parsed trace): the bootstrap
    replays read their window from it instead of holding it in a list, and the winner's replay
    carried on reads the rest."""

    def window(self, start: int, stop: int) -> Iterator[Request]: ...

    def __len__(self) -> int: ...


def head(source: Source, count: int) -> Iterator[Request]:
    """``source``'s first ``count`` requests."""
    if isinstance(source, PrefixSource):
        return source.window(0, count)
    return itertools.islice(source(), count)


def rest(source: Source, start: int) -> Iterator[Request]:
    """``source``'s requests after its first ``start``."""
    if isinstance(source, PrefixSource):
        return source.window(start, len(source))
    return itertools.islice(source(), start, None)
