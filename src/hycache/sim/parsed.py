"""A trace parsed once into compact arrays, replayed as often as needed.

:class:`ParsedTrace` holds every request of a trace in a few numpy arrays: arrivals, and for
each request's prompt and output a span of one of two pools, explicit token ids (int64) or
runs of consecutive ids (first id, count; a Mooncake prompt is one run per stretch of
consecutive hash ids, a synthetic output one run). Calling it yields the requests again, one
at a time, so a trace is parsed and validated once per process (or loaded from the on-disk
cache, :mod:`hycache.sim.trace_cache`) and shared by every policy, bootstrap replay and
capacity.
The conversation trace (145M prompt tokens) takes under 2 MB this way.

Scale with blocks: runs are yielded as :class:`~hycache.tree.runkey.RunKey` keys, which the
cache slices, compares and stores run by run (a Mooncake block is one run or part of one, not
512 ids), and which it treats exactly as the expanded ids that
:func:`hycache.sim.trace.read_trace` yields (``with_run_keys(False)`` yields those).

Needs numpy (the ``sim`` extra).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

from hycache.errors import IntegrityError
from hycache.sim.request import Request
from hycache.sim.trace_lines import Line, Part, Runs, expand
from hycache.tree.keys import TokenKey

#: Pools a span may point into.
TOKENS, RUNS = 0, 1
#: Bumped whenever the arrays' meaning changes (old cache files are then ignored).
SCHEMA = 1

Array = np.ndarray[Any, Any]


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
        tokens = np.frombuffer(b"".join(self.tokens), dtype=np.int64)
        return ParsedTrace(
            arrival=np.array(self.arrival, dtype=np.float64),
            spans=np.array(self.spans, dtype=np.int64).reshape(-1, 6),
            tokens=tokens,
            run_first=np.array(self.run_first, dtype=np.int64),
            run_count=np.array(self.run_count, dtype=np.int64),
            ids=self.ids,
            sessions=self.sessions,
            namespaces=self.namespaces,
        )


class ParsedTrace:
    """Every request of a trace in compact arrays; ``trace()`` (a re-iterable source) yields
    them in file order, ``trace.head(n)`` the first ``n``. Picklable. ``run_keys``: runs of
    ids are yielded as run keys (default), else expanded to encoded keys (the same ids)."""

    def __init__(
        self,
        *,
        arrival: Array,
        run_keys: bool = True,
        spans: Array,
        tokens: Array,
        run_first: Array,
        run_count: Array,
        ids: list[str],
        sessions: list[str | None],
        namespaces: list[str | None],
    ) -> None:
        n = len(arrival)
        if not (spans.shape == (n, 6) and len(ids) == len(sessions) == len(namespaces) == n):
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
        spans = self.spans[:end].tolist()
        for index in range(max(0, start), end):
            pk, plo, phi, ok, olo, ohi = spans[index]
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
        return tuple(
            zip(self.run_first[lo:hi].tolist(), self.run_count[lo:hi].tolist(), strict=True)
        )

    @property
    def nbytes(self) -> int:
        """Bytes of the numeric arrays."""
        arrays = (self.arrival, self.spans, self.tokens, self.run_first, self.run_count)
        return sum(a.nbytes for a in arrays)

    # ------------------------------------------------------------------ (de)serialising
    def arrays(self) -> dict[str, Array]:
        """Every field as an array (``np.savez`` of it is :meth:`from_arrays`' input)."""
        text = json.dumps([self.ids, self.sessions, self.namespaces]).encode()
        return {
            "schema": np.array([SCHEMA], dtype=np.int64),
            "arrival": self.arrival,
            "spans": self.spans,
            "tokens": self.tokens,
            "run_first": self.run_first,
            "run_count": self.run_count,
            "names": np.frombuffer(text, dtype=np.uint8),
        }

    @classmethod
    def from_arrays(cls, arrays: dict[str, Array]) -> ParsedTrace:
        """The inverse of :meth:`arrays`; IntegrityError when they do not fit together."""
        if int(arrays["schema"][0]) != SCHEMA:
            raise IntegrityError("parsed trace of another schema")
        ids, sessions, namespaces = json.loads(arrays["names"].tobytes().decode())
        return cls(
            arrival=arrays["arrival"].astype(np.float64, copy=False),
            spans=arrays["spans"].astype(np.int64, copy=False),
            tokens=arrays["tokens"].astype(np.int64, copy=False),
            run_first=arrays["run_first"].astype(np.int64, copy=False),
            run_count=arrays["run_count"].astype(np.int64, copy=False),
            ids=ids,
            sessions=sessions,
            namespaces=namespaces,
        )
