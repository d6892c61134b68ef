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
"""

from __future__ import annotations

import json
import math
import os
import sys
from array import array
from collections.abc import Callable, Iterator
from typing import Any

from hycache.errors import ConfigError, InputError
from hycache.sim.request import Request
from hycache.tree.keys import encode_tokens

#: The trace formats :func:`read_trace` understands, as :func:`detect_format` names them.
FORMATS: tuple[str, ...] = ("mooncake", "marconi", "hycache")

#: Tokens per Mooncake hash id.
MOONCAKE_BLOCK_SIZE = 512
#: Explicit token ids (and expanded block ids) lie in ``[0, MAX_TOKEN_ID)``.
MAX_TOKEN_ID = 2**40
#: Synthetic output ids: ``OUTPUT_ID_BASE + line * OUTPUT_ID_STRIDE + i``.
OUTPUT_ID_BASE = 2**40
OUTPUT_ID_STRIDE = 2**20
#: Largest ``input_length`` of a block-hashed prompt (Mooncake, hycache ``block_hashes``).
MAX_INPUT_LENGTH = 2**24
#: Largest Mooncake hash id (so that every expanded id stays below ``MAX_TOKEN_ID``).
MAX_MOONCAKE_HASH = 2**31
#: Largest line number that still gets collision-free synthetic output ids.
_MAX_LINE = (2**63 - OUTPUT_ID_BASE) // OUTPUT_ID_STRIDE - 1

_HYCACHE_HEADER_KEYS = frozenset({"format", "version"})
_HYCACHE_KEYS = frozenset(
    {
        "id",
        "arrival",
        "session",
        "namespace",
        "tokens",
        "block_hashes",
        "block_size",
        "input_length",
        "output_length",
        "output_tokens",
    }
)

PathLike = str | os.PathLike[str]
_Obj = dict[str, Any]


class _LineError(Exception):
    """A reason a line is malformed; turned into InputError with the file and line."""


def _is_int(value: object) -> bool:
    return type(value) is int


def _field(obj: _Obj, key: str) -> Any:
    try:
        return obj[key]
    except KeyError:
        raise _LineError(f"missing field {key!r}") from None


def _int_field(obj: _Obj, key: str, *, minimum: int) -> int:
    value = _field(obj, key)
    if not _is_int(value):
        raise _LineError(f"field {key!r} must be an integer, got {_describe(value)}")
    if value < minimum:
        what = "negative" if value < 0 else f"below {minimum}"
        raise _LineError(f"field {key!r} is {what}: {value} (must be >= {minimum})")
    result: int = value
    return result


def _time_field(obj: _Obj, key: str) -> float:
    value = _field(obj, key)
    if not (_is_int(value) or type(value) is float):
        raise _LineError(f"field {key!r} must be a number, got {_describe(value)}")
    try:
        number = float(value)
    except OverflowError:
        number = math.inf
    if not math.isfinite(number):
        raise _LineError(f"field {key!r} must be a finite number, got {value}")
    if number < 0:
        raise _LineError(f"field {key!r} is negative: {value}")
    return number


def _describe(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, float):
        return f"the number {value}"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return repr(value)


def _int_list(obj: _Obj, key: str, *, allow_empty: bool, bound: int = MAX_TOKEN_ID) -> list[int]:
    value = _field(obj, key)
    if not isinstance(value, list):
        raise _LineError(f"field {key!r} must be a list of integers, got {_describe(value)}")
    if not value:
        if allow_empty:
            return value
        raise _LineError(f"field {key!r} must not be empty")
    for index, item in enumerate(value):
        if not _is_int(item):
            raise _LineError(f"{key}[{index}] must be an integer, got {_describe(item)}")
    low, high = min(value), max(value)
    if low < 0 or high >= bound:
        index = value.index(low if low < 0 else high)
        raise _LineError(f"{key}[{index}] = {value[index]} is outside [0, {bound})")
    return value


_WINDOW = 1 << 16
_LITTLE = sys.byteorder == "little"
_RAMP: list[memoryview] = []


def _ramp(start: int, length: int) -> bytes:
    """The encoded ids ``start .. start+length-1`` (``0 <= start``, end ``< 2**63``).

    Much faster than ``array('q', range(...))`` for long runs: the low 16 bits of each id are
    copied from one precomputed ramp, the high bytes are set with one strided store per byte.
    """
    if length <= 64:
        return array("q", range(start, start + length)).tobytes()
    if not _RAMP:
        _RAMP.append(memoryview(array("q", range(_WINDOW)).tobytes()))
    ramp = _RAMP[0]
    parts: list[bytearray] = []
    pos, end = start, start + length
    while pos < end:
        high, low = divmod(pos, _WINDOW)
        count = min(end - pos, _WINDOW - low)
        chunk = bytearray(ramp[low * 8 : (low + count) * 8])
        if high:
            for index, value in enumerate((high << 16).to_bytes(8, "little")):
                if value:
                    chunk[(index if _LITTLE else 7 - index) :: 8] = bytes((value,)) * count
        parts.append(chunk)
        pos += count
    return b"".join(parts)


def _expand_blocks(hashes: list[int], block_size: int, length: int, key: str) -> bytes:
    """Token ids ``h*block_size + i`` for each hash, the last block cut to fit ``length``."""
    if length > MAX_INPUT_LENGTH:
        raise _LineError(f"input_length {length} is too large (must be <= {MAX_INPUT_LENGTH})")
    needed = -(-length // block_size)
    if len(hashes) < needed:
        raise _LineError(
            f"{key} too short: {len(hashes)} blocks of {block_size} cover "
            f"{len(hashes) * block_size} tokens, input_length is {length} "
            f"(needs {needed} blocks)"
        )
    if len(hashes) > needed:
        raise _LineError(
            f"{key} too long: input_length {length} needs {needed} blocks of {block_size}, "
            f"got {len(hashes)}"
        )
    # consecutive hash ids are one contiguous run of ids: expand each run at once
    parts: list[bytes] = []
    run_start = hashes[0]
    run_blocks = 1
    for h in hashes[1:]:
        if h == run_start + run_blocks:
            run_blocks += 1
        else:
            parts.append(_ramp(run_start * block_size, run_blocks * block_size))
            run_start, run_blocks = h, 1
    tail = length - (needed - 1) * block_size
    parts.append(_ramp(run_start * block_size, (run_blocks - 1) * block_size + tail))
    return parts[0] if len(parts) == 1 else b"".join(parts)


def _synthetic_output(line: int, length: int) -> bytes:
    """``length`` ids unique to the request on ``line``, above every prompt id."""
    if length >= OUTPUT_ID_STRIDE:
        raise _LineError(f"output_length {length} is too large (must be < {OUTPUT_ID_STRIDE})")
    if line > _MAX_LINE:
        raise _LineError("too many lines for synthetic output ids")
    return _ramp(OUTPUT_ID_BASE + line * OUTPUT_ID_STRIDE, length)


def _parse_mooncake(obj: _Obj, line: int) -> Request:
    timestamp = _time_field(obj, "timestamp")
    length = _int_field(obj, "input_length", minimum=1)
    out_len = _int_field(obj, "output_length", minimum=0)
    hashes = _int_list(obj, "hash_ids", allow_empty=False, bound=MAX_MOONCAKE_HASH)
    prompt = _expand_blocks(hashes, MOONCAKE_BLOCK_SIZE, length, "hash_ids")
    return Request(
        request_id=str(line),
        arrival_s=timestamp / 1000.0,
        prompt=prompt,
        output=_synthetic_output(line, out_len),
    )


def _id_text(obj: _Obj, key: str, *, optional: bool) -> str | None:
    if optional and obj.get(key) is None:
        return None
    value = _field(obj, key)
    if isinstance(value, str):
        return value
    if _is_int(value):
        return str(value)
    raise _LineError(f"field {key!r} must be a string or an integer, got {_describe(value)}")


def _parse_marconi(obj: _Obj, line: int) -> Request:
    session = _id_text(obj, "session_id", optional=False)
    arrival = _time_field(obj, "ts")
    prompt = _int_list(obj, "input_tokens", allow_empty=False)
    output = _int_list(obj, "output_tokens", allow_empty=True)
    for count_key, tokens_key, tokens in (
        ("num_input_tokens", "input_tokens", prompt),
        ("num_output_tokens", "output_tokens", output),
    ):
        if count_key in obj:
            count = _int_field(obj, count_key, minimum=0)
            if count != len(tokens):
                raise _LineError(
                    f"{count_key} is {count} but {tokens_key} holds {len(tokens)} tokens"
                )
    if "turn_id" in obj:
        turn = _int_field(obj, "turn_id", minimum=0)
        request_id = f"{session}:{turn}"
    else:
        request_id = str(line)
    return Request(
        request_id=request_id,
        arrival_s=arrival,
        prompt=encode_tokens(prompt),
        output=encode_tokens(output),
        session=session,
    )


def _exactly_one(obj: _Obj, first: str, second: str) -> str:
    has_first, has_second = first in obj, second in obj
    if has_first == has_second:
        state = "both" if has_first else "neither"
        raise _LineError(f"needs exactly one of {first!r} or {second!r}, got {state}")
    return first if has_first else second


def _parse_hycache(obj: _Obj, line: int) -> Request:
    unknown = sorted(set(obj) - _HYCACHE_KEYS)
    if unknown:
        raise _LineError(f"unknown field(s) {', '.join(map(repr, unknown))}")
    request_id = _id_text(obj, "id", optional=False)
    assert request_id is not None
    arrival = _time_field(obj, "arrival")
    session = _id_text(obj, "session", optional=True)
    namespace = obj.get("namespace")
    if namespace is not None and not isinstance(namespace, str):
        raise _LineError(f"field 'namespace' must be a string or null, got {_describe(namespace)}")
    if _exactly_one(obj, "tokens", "block_hashes") == "tokens":
        extra = sorted(k for k in ("block_size", "input_length") if k in obj)
        if extra:
            raise _LineError(f"{', '.join(map(repr, extra))}: only allowed with 'block_hashes'")
        prompt = encode_tokens(_int_list(obj, "tokens", allow_empty=False))
    else:
        block_size = _int_field(obj, "block_size", minimum=1)
        length = _int_field(obj, "input_length", minimum=1)
        bound = MAX_TOKEN_ID // block_size  # every h*block_size + i stays < 2**40
        hashes = _int_list(obj, "block_hashes", allow_empty=False, bound=bound)
        prompt = _expand_blocks(hashes, block_size, length, "block_hashes")
    if _exactly_one(obj, "output_length", "output_tokens") == "output_length":
        output = _synthetic_output(line, _int_field(obj, "output_length", minimum=0))
    else:
        output = encode_tokens(_int_list(obj, "output_tokens", allow_empty=True))
    return Request(
        request_id=request_id,
        arrival_s=arrival,
        prompt=prompt,
        output=output,
        session=session,
        namespace=namespace,
    )


_PARSERS: dict[str, Callable[[_Obj, int], Request]] = {
    "mooncake": _parse_mooncake,
    "marconi": _parse_marconi,
    "hycache": _parse_hycache,
}


def _load(raw: bytes) -> _Obj:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _LineError(f"not UTF-8 text: {exc.reason} at byte {exc.start}") from None
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise _LineError(f"bad JSON: {exc.msg} (column {exc.colno})") from None
    except (ValueError, RecursionError) as exc:  # e.g. an integer with too many digits
        raise _LineError(f"bad JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise _LineError(f"expected a JSON object, got {_describe(obj)}")
    return obj


def _is_header(obj: _Obj) -> bool:
    return "format" in obj


def _check_header(obj: _Obj) -> None:
    if obj.get("format") != "hycache":
        raise _LineError(f"unknown trace format {obj.get('format')!r} (expected 'hycache')")
    unknown = sorted(set(obj) - _HYCACHE_HEADER_KEYS)
    if unknown:
        raise _LineError(f"unknown header field(s) {', '.join(map(repr, unknown))}")
    version = obj.get("version")
    if version != 1 or not _is_int(version):
        raise _LineError(f"unsupported hycache trace version {version!r} (supported: 1)")


def _format_of(obj: _Obj) -> str:
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
    raise _LineError(
        f"unknown trace format: keys {keys}; expected Mooncake ('hash_ids', 'input_length', ...), "
        "Marconi ('session_id', 'input_tokens', ...) or hycache ('arrival', or a "
        '{"format": "hycache"} header)'
    )


def _lines(path: PathLike) -> Iterator[tuple[int, bytes]]:
    """(line number, raw line) of every non-blank line; an unreadable file as InputError."""
    name = os.fspath(path)
    try:
        handle = open(path, "rb")  # noqa: SIM115 - closed by the with below
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
        except _LineError as exc:
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
    if limit is not None and (not _is_int(limit) or limit < 0):
        raise ConfigError(f"trace limit must be a non-negative integer, got {limit!r}")
    if trace_format is not None and trace_format not in FORMATS:
        raise ConfigError(f"unknown trace format {trace_format!r}; known: {', '.join(FORMATS)}")
    return _read(path, limit, trace_format)


def _read(path: PathLike, limit: int | None, trace_format: str | None) -> Iterator[Request]:
    if limit == 0:
        return
    name = os.fspath(path)
    parse: Callable[[_Obj, int], Request] | None = None
    yielded = 0
    first = True
    for number, raw in _lines(path):
        try:
            obj = _load(raw)
            if first:
                first = False
                fmt = trace_format or _format_of(obj)
                parse = _PARSERS[fmt]
                if fmt == "hycache" and _is_header(obj):
                    _check_header(obj)
                    continue
            assert parse is not None
            request = parse(obj, number)
        except _LineError as exc:
            raise InputError(name, str(exc), line=number) from None
        yield request
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
        with open(path, "rb") as handle:
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
