"""Trace files: Mooncake, Marconi and hycache JSONL, read as a stream of :class:`Request`.

All three formats hold one JSON object per line; blank lines are skipped and line numbers count
every physical line from 1. The format is detected from the keys of the first non-empty line
(see :func:`detect_format`); :func:`read_trace` then reads the file line by line and yields one
:class:`~hycache.sim.request.Request` at a time, so a trace never sits in memory as a whole.
Any malformed line raises :class:`~hycache.errors.InputError` naming the file, the line and the
reason, when the reader reaches it.

``mooncake``
    ``timestamp`` (ms, int or float >= 0), ``input_length`` (int >= 1), ``output_length``
    (int >= 0), ``hash_ids`` (ints in [0, 2**31), one per 512-token block: exactly
    ``ceil(input_length / 512)`` of them). Hash id ``h`` stands for the tokens
    ``h*512 .. h*512+511``; the last block keeps ``input_length - 512*(len(hash_ids)-1)`` of
    them. ``arrival_s = timestamp / 1000``; ``request_id`` is the line number; no session.
``marconi``
    As written by the Marconi artifact (``utils/generate_trace.py``): ``session_id`` (int or
    str), ``ts`` (seconds), ``input_tokens`` (non-empty list of ids, the whole prompt including
    the history), ``output_tokens`` (list of ids); optional ``turn_id`` (int >= 0) and
    ``num_input_tokens`` / ``num_output_tokens`` (checked against the lists when present).
    ``request_id`` is ``"<session_id>:<turn_id>"`` (the line number without ``turn_id``).
``hycache``
    Optional header line ``{"format": "hycache", "version": 1}``, then per line: ``id`` (str or
    int), ``arrival`` (seconds), optional ``session`` (str, int or null) and ``namespace`` (str or
    null); exactly one of ``tokens`` or ``block_hashes`` + ``block_size`` + ``input_length``;
    exactly one of ``output_length`` or ``output_tokens``. Unknown keys are an error.

Explicit token ids must lie in ``[0, 2**40)``; a block-hashed prompt holds at most ``2**24``
tokens. A trace that only gives an output length gets ids from the reserved range above that,
``2**40 + line * 2**20 + i`` (so ``output_length`` must be below ``2**20``): unique to the
request and never equal to a prompt id. Timestamps need not
be sorted: requests are yielded in file order and a replayer decides what to do with them.
Extra keys are tolerated in the two external formats (Mooncake, Marconi), not in hycache's own.
A file whose name ends in ``.gz`` is read through gzip.
"""

from __future__ import annotations

import gzip
import json
import os
from collections.abc import Callable, Iterator
from typing import IO

from hycache.errors import ConfigError, InputError, IntegrityError
from hycache.sim.request import Request
from hycache.sim.trace_lines import PARSERS, Line, LineError, Obj, describe, is_int

#: The trace formats :func:`read_trace` understands, as :func:`detect_format` names them.
FORMATS: tuple[str, ...] = ("mooncake", "marconi", "hycache")

PathLike = str | os.PathLike[str]

_HYCACHE_HEADER_KEYS = frozenset({"format", "version"})


def _load(raw: bytes) -> Obj:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise LineError(f"not UTF-8 text: {exc.reason} at byte {exc.start}") from None
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise LineError(f"bad JSON: {exc.msg} (column {exc.colno})") from None
    except (ValueError, RecursionError) as exc:  # e.g. an integer with too many digits
        raise LineError(f"bad JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise LineError(f"expected a JSON object, got {describe(obj)}")
    return obj


def _is_header(obj: Obj) -> bool:
    return "format" in obj


def _check_header(obj: Obj) -> None:
    if obj.get("format") != "hycache":
        raise LineError(f"unknown trace format {obj.get('format')!r} (expected 'hycache')")
    unknown = sorted(set(obj) - _HYCACHE_HEADER_KEYS)
    if unknown:
        raise LineError(f"unknown header field(s) {', '.join(map(repr, unknown))}")
    version = obj.get("version")
    if version != 1 or not is_int(version):
        raise LineError(f"unsupported hycache trace version {version!r} (supported: 1)")


def _format_of(obj: Obj) -> str:
    if _is_header(obj):
        _check_header(obj)
        return "hycache"
    if "hash_ids" in obj:
        return "mooncake"
    if "input_tokens" in obj:
        return "marconi"
    if "arrival" in obj:
        return "hycache"
    keys = ", ".join(map(repr, sorted(obj))) or "none"
    raise LineError(
        f"unknown trace format: keys {keys}; expected Mooncake ('hash_ids', 'input_length', ...), "
        "Marconi ('session_id', 'input_tokens', ...) or hycache ('arrival', or a "
        '{"format": "hycache"} header)'
    )


def open_trace(path: PathLike) -> IO[bytes]:
    """Open a trace for binary reading; a name ending in ``.gz`` is read through gzip."""
    if os.fspath(path).endswith(".gz"):
        return gzip.open(path, "rb")  # type: ignore[return-value]  # a binary file object
    return open(path, "rb")


def _lines(path: PathLike) -> Iterator[tuple[int, bytes]]:
    """(line number, raw line) of every non-blank line; an unreadable file as InputError."""
    name = os.fspath(path)
    try:
        handle = open_trace(path)
    except OSError as exc:
        raise InputError(name, f"cannot open trace: {exc.strerror or exc}") from None
    with handle:
        try:
            for number, raw in enumerate(handle, start=1):
                if not raw.isspace():
                    yield number, raw
        except OSError as exc:
            raise InputError(name, f"cannot read trace: {exc.strerror or exc}") from None


def detect_format(path: PathLike) -> str:
    """The format of the trace at ``path``: one of :data:`FORMATS`.

    Decided by the keys of the first non-empty line: a ``{"format": "hycache", ...}`` header
    or an ``arrival`` key -> ``hycache``; ``hash_ids`` -> ``mooncake``; ``input_tokens`` ->
    ``marconi``. An empty file, bad JSON or unknown keys on that line raise InputError.
    """
    name = os.fspath(path)
    for number, raw in _lines(path):
        try:
            return _format_of(_load(raw))
        except LineError as exc:
            raise InputError(name, str(exc), line=number) from None
    raise InputError(name, "empty trace: no JSON line found")


def read_trace(
    path: PathLike, *, limit: int | None = None, trace_format: str | None = None
) -> Iterator[Request]:
    """Yield the requests of the trace at ``path`` one at a time, in file order.

    ``limit``: stop after that many requests. ``trace_format``: one of :data:`FORMATS`, to skip
    detection. A malformed line raises InputError (file, line, reason) when it is reached; the
    requests before it have been yielded already.
    """
    return (line.request() for line in read_lines(path, limit=limit, trace_format=trace_format))


def read_lines(
    path: PathLike, *, limit: int | None = None, trace_format: str | None = None
) -> Iterator[Line]:
    """As :func:`read_trace`, the parsed lines (token sequences not expanded yet)."""
    if limit is not None and (not is_int(limit) or limit < 0):
        raise ConfigError(f"trace limit must be a non-negative integer, got {limit!r}")
    if trace_format is not None and trace_format not in FORMATS:
        raise ConfigError(f"unknown trace format {trace_format!r}; known: {', '.join(FORMATS)}")
    return _read(path, limit, trace_format)


def _read(path: PathLike, limit: int | None, trace_format: str | None) -> Iterator[Line]:
    if limit == 0:
        return
    name = os.fspath(path)
    parse: Callable[[Obj, int], Line] | None = None
    yielded = 0
    first = True
    for number, raw in _lines(path):
        try:
            obj = _load(raw)
            if first:
                first = False
                fmt = trace_format or _format_of(obj)
                parse = PARSERS[fmt]
                if fmt == "hycache" and _is_header(obj):
                    _check_header(obj)
                    continue
            if parse is None:
                raise IntegrityError("parse missing")
            parsed = parse(obj, number)
        except LineError as exc:
            raise InputError(name, str(exc), line=number) from None
        yield parsed
        yielded += 1
        if limit is not None and yielded >= limit:
            return
    if first:
        raise InputError(name, "empty trace: no JSON line found")


def count_requests(path: PathLike) -> int:
    """Requests in the trace at ``path`` without parsing them: non-blank lines, less a header.

    Cheap (a byte scan), for progress bars; it does not validate the lines.
    """
    name = os.fspath(path)
    count = 0
    header_checked = False
    try:
        with open_trace(path) as handle:
            for raw in handle:
                if not raw.strip():
                    continue
                if not header_checked:
                    header_checked = True
                    if b'"format"' in raw:
                        try:
                            obj = json.loads(raw)
                        except ValueError:
                            obj = None
                        if isinstance(obj, dict) and _is_header(obj):
                            continue
                count += 1
    except OSError as exc:
        raise InputError(name, f"cannot open trace: {exc.strerror or exc}") from None
    return count
