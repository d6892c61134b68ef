"""Run keys: a token key kept as runs of consecutive ids, for block-hashed traces.

A Mooncake prompt is a few runs of consecutive ids (a 512-token block ``h`` is the ids
``h*512 .. h*512+511``, consecutive hash ids make one longer run), a synthetic output one run.
:class:`RunKey` stores those runs, not one int64 per token, and behaves as the encoded key
(:mod:`hycache.tree.keys`) of the same ids does wherever the tree and the cache use one: its
length and slice bounds count bytes (8 per token), slicing, ``==``, ``hash``, ``startswith``
and ``+`` give what they give on the encoded bytes, and ``bytes(key)`` is the encoded key.
So a cache fed run keys takes exactly the decisions it takes fed the expanded ids, while a
prompt of 100k tokens is a handful of numbers and is compared run by run.

Runs are canonical (no empty run, no run that continues the previous one), so two run keys are
equal exactly when their ids are; a run key equals an encoded key of the same ids, and hashes
as it (hashing expands the ids: only page-sized slices are hashed, as dictionary keys).
"""

from __future__ import annotations

import bisect
import sys
from array import array
from collections.abc import Iterable

from hycache.errors import CacheUsageError

#: Bytes per id, as in an encoded key.
ID_BYTES = 8

_WINDOW = 1 << 16
#: short keys' hashes remembered (firsts, ends) -> hash, before the memo starts over: a tree
#: looks the same pages up again and again (a fresh slice each time), and each hash would
#: expand the runs
RUN_HASH_MEMO = 1 << 16
#: the most runs a remembered key has: a page-sized slice spans a few trace blocks
RUN_HASH_MEMO_RUNS = 4
_RUN_HASHES: dict[tuple[tuple[int, ...], tuple[int, ...]], int] = {}
_LITTLE = sys.byteorder == "little"
_RAMP: list[memoryview] = []


def ramp(start: int, length: int) -> bytes:
    """The encoded ids ``start .. start+length-1`` (``0 <= start``, end ``< 2**63``).

    Much faster than ``array('q', range(...))`` for long runs: the low 16 bits of each id are
    copied from one precomputed ramp, the high bytes are set with one strided store per byte.
    """
    if length <= 64:
        return array("q", range(start, start + length)).tobytes()
    if not _RAMP:
        _RAMP.append(memoryview(array("q", range(_WINDOW)).tobytes()))
    window = _RAMP[0]
    parts: list[bytearray] = []
    pos, end = start, start + length
    while pos < end:
        high, low = divmod(pos, _WINDOW)
        count = min(end - pos, _WINDOW - low)
        chunk = bytearray(window[low * 8 : (low + count) * 8])
        if high:
            for index, value in enumerate((high << 16).to_bytes(8, "little")):
                if value:
                    chunk[(index if _LITTLE else 7 - index) :: 8] = bytes((value,)) * count
        parts.append(chunk)
        pos += count
    return b"".join(parts)


class RunKey:
    """Token ids as canonical runs: run ``i`` holds ids ``firsts[i] ..`` up to token offset
    ``ends[i]`` (cumulative). Immutable."""

    __slots__ = ("_ends", "_firsts", "_hash", "_nbytes")

    def __init__(self, firsts: tuple[int, ...], ends: tuple[int, ...]) -> None:
        """Trusted: canonical runs (use :meth:`of_runs` otherwise)."""
        self._firsts = firsts
        self._ends = ends
        self._nbytes = ends[-1] * ID_BYTES if ends else 0
        self._hash: int | None = None

    @classmethod
    def of_runs(cls, runs: Iterable[tuple[int, int]]) -> RunKey:
        """The key of ``(first id, count)`` runs, made canonical."""
        firsts: list[int] = []
        ends: list[int] = []
        total = 0
        for first, count in runs:
            if count < 0 or first < 0:
                raise CacheUsageError(f"a run needs a first id and a count >= 0, got {count}")
            if not count:
                continue
            if firsts and firsts[-1] + (total - (ends[-2] if len(ends) > 1 else 0)) == first:
                total += count
                ends[-1] = total
                continue
            total += count
            firsts.append(first)
            ends.append(total)
        return cls(tuple(firsts), tuple(ends))

    @classmethod
    def of_key(cls, key: bytes | RunKey) -> RunKey:
        """``key`` as runs (an encoded key is read id by id)."""
        if isinstance(key, RunKey):
            return key
        if len(key) % ID_BYTES:
            raise CacheUsageError("a token key must hold whole int64 ids")
        ids = array("q")
        ids.frombytes(key)
        return cls.of_runs((i, 1) for i in ids)

    def runs(self) -> tuple[tuple[int, int], ...]:
        """``(first id, count)`` of every run."""
        starts = (0, *self._ends[:-1]) if self._ends else ()
        counts = (end - start for end, start in zip(self._ends, starts, strict=True))
        return tuple(zip(self._firsts, counts, strict=True))

    @property
    def tokens(self) -> int:
        return self._ends[-1] if self._ends else 0

    def __len__(self) -> int:
        return self._nbytes

    def __bytes__(self) -> bytes:
        if len(self._ends) == 1:
            return ramp(self._firsts[0], self._ends[0])
        return b"".join(ramp(first, count) for first, count in self.runs())

    def __getitem__(self, index: slice) -> RunKey:
        if not isinstance(index, slice):
            raise CacheUsageError("a run key is sliced, not indexed")
        start, stop = index.start or 0, index.stop
        if stop is None or stop > self._nbytes:
            stop = self._nbytes
        if start < 0 or stop < 0 or index.step is not None:
            start, stop, step = index.indices(self._nbytes)
            if step != 1:
                raise CacheUsageError("a run key is sliced at whole ids")
        if start % ID_BYTES or stop % ID_BYTES:
            raise CacheUsageError("a run key is sliced at whole ids")
        a, b = start // ID_BYTES, stop // ID_BYTES
        if a >= b:
            return _EMPTY
        ends = self._ends
        if len(ends) == 1:
            if a == 0 and b == ends[0]:
                return self
            return RunKey((self._firsts[0] + a,), (b - a,))
        if a == 0 and b == ends[-1]:
            return self
        i = bisect.bisect_right(ends, a)
        j = bisect.bisect_left(ends, b)
        before = ends[i - 1] if i else 0
        firsts = (self._firsts[i] + a - before, *self._firsts[i + 1 : j + 1])
        if a == 0:
            return RunKey(firsts, (*ends[i:j], b))
        return RunKey(firsts, (*map((-a).__add__, ends[i:j]), b - a))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, RunKey):
            return self._ends == other._ends and self._firsts == other._firsts
        if isinstance(other, bytes | bytearray):
            return len(other) == self._nbytes and bytes(self) == other
        return NotImplemented

    def __hash__(self) -> int:
        if self._hash is None:
            if len(self._ends) <= RUN_HASH_MEMO_RUNS:  # a page looked up in a node's children
                runs = (self._firsts, self._ends)
                known = _RUN_HASHES.get(runs)
                if known is None:
                    if len(_RUN_HASHES) >= RUN_HASH_MEMO:
                        _RUN_HASHES.clear()
                    known = _RUN_HASHES[runs] = hash(bytes(self))
                self._hash = known
            else:
                self._hash = hash(bytes(self))
        return self._hash

    def __add__(self, other: bytes | RunKey) -> RunKey:
        right = RunKey.of_key(other)
        if not right._ends:
            return self
        if not self._ends:
            return right
        ends, n = self._ends, self._ends[-1]
        shifted = tuple(e + n for e in right._ends)
        last = n - (ends[-2] if len(ends) > 1 else 0)
        if self._firsts[-1] + last == right._firsts[0]:  # the last run goes on
            return RunKey(self._firsts + right._firsts[1:], ends[:-1] + shifted)
        return RunKey(self._firsts + right._firsts, ends + shifted)

    def __radd__(self, other: bytes) -> RunKey:
        return RunKey.of_key(other) + self

    def common_tokens(self, other: RunKey, offset: int) -> int:
        """How many leading ids of ``self`` equal ``other``'s from id ``offset`` on (one step
        per run boundary, not per id)."""
        ends, firsts = self._ends, self._firsts
        oends, ofirsts = other._ends, other._firsts
        limit = min(self.tokens, other.tokens - offset)
        p = 0
        i = 0
        j = bisect.bisect_right(oends, offset)
        while p < limit:
            q = p + offset
            while ends[i] <= p:
                i += 1
            while oends[j] <= q:
                j += 1
            start = ends[i - 1] if i else 0
            ostart = oends[j - 1] if j else 0
            if firsts[i] + p - start != ofirsts[j] + q - ostart:
                break
            p = min(ends[i], oends[j] - offset, limit)
        return min(p, limit) if limit > 0 else 0

    def startswith(self, prefix: bytes | RunKey) -> bool:
        return len(prefix) <= len(self) and self[: len(prefix)] == prefix

    def __repr__(self) -> str:
        return f"RunKey({list(self.runs())})"


_EMPTY = RunKey((), ())
