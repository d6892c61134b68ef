"""A trace parsed once into compact arrays, replayed as often as needed.

:class:`ParsedTrace` holds every request of a trace in a few flat arrays (``array`` of the
standard library): arrivals, and for each request's prompt and output a span of one of two
pools, explicit token ids (int64) or runs of consecutive ids (first id, count; a Mooncake
prompt is one run per stretch of consecutive hash ids, a synthetic output one run). Calling it
yields the requests again, one at a time, so a trace is parsed and validated once per process
(or loaded from the on-disk cache, :mod:`hycache.sim.trace_cache`) and shared by every policy,
bootstrap replay and capacity. The conversation trace (145M prompt tokens) takes under 2 MB
this way. The arrays need no numpy: importing it would be a large share of a short run.

Scale with blocks: runs are yielded as :class:`~hycache.tree.runkey.RunKey` keys, which the
cache slices, compares and stores run by run (a Mooncake block is one run or part of one, not
512 ids), and which it treats exactly as the expanded ids that
:func:`hycache.sim.trace.read_trace` yields (``with_run_keys(False)`` yields those).
"""

from __future__ import annotations

import json
import os
import sys
from array import array
from collections.abc import Iterable, Iterator
from typing import IO

from hycache.errors import IntegrityError
from hycache.sim.request import Request
from hycache.sim.trace_lines import Line, Part, Runs, expand
from hycache.tree.keys import TokenKey

#: Pools a span may point into.
TOKENS, RUNS = 0, 1
#: Bumped whenever the stored form's meaning changes (old cache files are then ignored).
SCHEMA = 2
#: numbers per request in ``spans``: prompt (pool, lo, hi), output (pool, lo, hi)
SPAN = 6
#: the stored arrays, in file order (``arrival`` float64, the others int64)
STORED = ("arrival", "spans", "tokens", "run_first", "run_count")
#: bytes per stored number
ITEM_BYTES = 8


class _Builder:
    """Accumulates lines into the pools."""

    def __init__(self) -> None:
        self.arrival: list[float] = []
        self.spans: list[tuple[int, int, int, int, int, int]] = []
        self.tokens: list[bytes] = []
        self.n_tokens = 0
        self.run_first: list[int] = []
        self.run_count: list[int] = []
        self.ids: list[str] = []
        self.sessions: list[str | None] = []
        self.namespaces: list[str | None] = []

    def _span(self, part: Part) -> tuple[int, int, int]:
        if isinstance(part, bytes):
            lo = self.n_tokens
            self.tokens.append(part)
            self.n_tokens += len(part) // 8
            return TOKENS, lo, self.n_tokens
        lo = len(self.run_first)
        for first, count in part:
            self.run_first.append(first)
            self.run_count.append(count)
        return RUNS, lo, len(self.run_first)

    def add(self, line: Line) -> None:
        self.arrival.append(line.arrival_s)
        self.spans.append((*self._span(line.prompt), *self._span(line.output)))
        self.ids.append(line.request_id)
        self.sessions.append(line.session)
        self.namespaces.append(line.namespace)

    def build(self) -> ParsedTrace:
        tokens = array("q")
        tokens.frombytes(b"".join(self.tokens))
        return ParsedTrace(
            arrival=array("d", self.arrival),
            spans=array("q", [n for span in self.spans for n in span]),
            tokens=tokens,
            run_first=array("q", self.run_first),
            run_count=array("q", self.run_count),
            ids=self.ids,
            sessions=self.sessions,
            namespaces=self.namespaces,
        )


class ParsedTrace:
    """Every request of a trace in compact arrays; ``trace()`` (a re-iterable source) yields
    them in file order, ``trace.head(n)`` the first ``n``. Picklable. ``run_keys``: runs of
    ids are yielded as run keys (default), else expanded to encoded keys (the same ids).
    ``spans`` holds ``SPAN`` numbers per request."""

    def __init__(
        self,
        *,
        arrival: array[float],
        run_keys: bool = True,
        spans: array[int],
        tokens: array[int],
        run_first: array[int],
        run_count: array[int],
        ids: list[str],
        sessions: list[str | None],
        namespaces: list[str | None],
    ) -> None:
        n = len(arrival)
        if not (len(spans) == SPAN * n and len(ids) == len(sessions) == len(namespaces) == n):
            raise IntegrityError("parsed trace arrays of different lengths")
        self.run_keys = run_keys
        self.arrival = arrival
        self.spans = spans
        self.tokens = tokens
        self.run_first = run_first
        self.run_count = run_count
        self.ids = ids
        self.sessions = sessions
        self.namespaces = namespaces

    @classmethod
    def of(cls, lines: Iterable[Line]) -> ParsedTrace:
        builder = _Builder()
        for line in lines:
            builder.add(line)
        return builder.build()

    def with_run_keys(self, run_keys: bool) -> ParsedTrace:
        """The same trace, yielding run keys or encoded keys (see the class docstring)."""
        return ParsedTrace(
            arrival=self.arrival,
            run_keys=run_keys,
            spans=self.spans,
            tokens=self.tokens,
            run_first=self.run_first,
            run_count=self.run_count,
            ids=self.ids,
            sessions=self.sessions,
            namespaces=self.namespaces,
        )

    def __len__(self) -> int:
        return len(self.arrival)

    def __call__(self) -> Iterator[Request]:
        return self.head(len(self))

    def head(self, stop: int) -> Iterator[Request]:
        """The first ``stop`` requests."""
        return self.window(0, stop)

    def window(self, start: int, stop: int) -> Iterator[Request]:
        """Requests ``start .. stop-1`` (clipped to the trace), with their own arrival times."""
        end = min(stop, len(self))
        arrival = self.arrival.tolist()
        spans = self.spans[: SPAN * end].tolist()
        for index in range(max(0, start), end):
            pk, plo, phi, ok, olo, ohi = spans[SPAN * index : SPAN * index + SPAN]
            yield Request(
                self.ids[index],
                arrival[index],
                self._expand(pk, plo, phi),
                self._expand(ok, olo, ohi),
                self.sessions[index],
                self.namespaces[index],
            )

    def _expand(self, kind: int, lo: int, hi: int) -> TokenKey:
        if kind == TOKENS:
            return self.tokens[lo:hi].tobytes()
        return expand(self.runs(lo, hi), runs=self.run_keys)

    def runs(self, lo: int, hi: int) -> Runs:
        """Runs ``lo .. hi-1`` of the run pool."""
        return tuple(zip(self.run_first[lo:hi], self.run_count[lo:hi], strict=True))

    def _arrays(self) -> tuple[array[float], array[int], array[int], array[int], array[int]]:
        """The numeric arrays, in ``STORED``'s order."""
        return (self.arrival, self.spans, self.tokens, self.run_first, self.run_count)

    @property
    def nbytes(self) -> int:
        """Bytes of the numeric arrays."""
        return sum(len(a) * a.itemsize for a in self._arrays())

    # ------------------------------------------------------------------ (de)serialising
    def write(self, handle: IO[bytes]) -> None:
        """Store the trace: one JSON line (schema, byte order, names, array lengths), then
        every array's machine bytes in ``STORED``'s order (:meth:`read` reads it back)."""
        header = {
            "schema": SCHEMA,
            "byteorder": sys.byteorder,
            "names": [self.ids, self.sessions, self.namespaces],
            "lengths": [len(a) for a in self._arrays()],
        }
        handle.write(json.dumps(header).encode() + b"\n")
        for values in self._arrays():
            values.tofile(handle)

    @classmethod
    def read(cls, handle: IO[bytes]) -> ParsedTrace:
        """The trace :meth:`write` stored (``handle`` seekable); IntegrityError when the file
        is of another schema or byte order, cut short, too long, or its arrays do not fit
        together."""
        try:
            header = json.loads(handle.readline())
            ids, sessions, namespaces = header["names"]
            lengths = [int(n) for n in header["lengths"]]
            foreign = header["schema"] != SCHEMA or header["byteorder"] != sys.byteorder
        except (ValueError, TypeError, KeyError) as exc:
            raise IntegrityError(f"unreadable parsed trace header: {exc}") from None
        if foreign or len(lengths) != len(STORED):
            raise IntegrityError("parsed trace of another schema or byte order")
        start = handle.tell()
        size = handle.seek(0, os.SEEK_END) - start
        handle.seek(start)
        if min(lengths) < 0 or ITEM_BYTES * sum(lengths) != size:
            # checked before reading: a damaged length must not size an allocation
            raise IntegrityError(
                f"parsed trace of {size} array bytes, its header says {ITEM_BYTES * sum(lengths)}"
            )
        arrival = array("d")
        spans, tokens, run_first, run_count = (array("q") for _ in range(4))
        filled: tuple[array[float] | array[int], ...] = (
            arrival,
            spans,
            tokens,
            run_first,
            run_count,
        )
        for values, length in zip(filled, lengths, strict=True):
            values.fromfile(handle, length)
        return cls(
            arrival=arrival,
            spans=spans,
            tokens=tokens,
            run_first=run_first,
            run_count=run_count,
            ids=ids,
            sessions=sessions,
            namespaces=namespaces,
        )
