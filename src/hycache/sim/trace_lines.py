"""One line of a trace file, parsed: the Mooncake, Marconi and hycache JSONL formats
(described in ``hycache.sim.trace``), block-hash expansion and synthetic output ids. A
malformed line raises ``LineError`` with the reason; the reader adds the file and line.

A parsed line (:class:`Line`) keeps each token sequence compact: explicit ids as an encoded
key, block-hashed prompts and synthetic outputs as runs of consecutive ids (``Runs``), which
:func:`expand` turns into the same key the ids would encode to."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hycache.errors import IntegrityError
from hycache.sim.request import Request
from hycache.tree.keys import TokenKey, encode_tokens
from hycache.tree.runkey import RunKey, ramp

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

Obj = dict[str, Any]
#: Runs of consecutive token ids: ``(first id, count)`` pairs, each count >= 1.
Runs = tuple[tuple[int, int], ...]
#: One token sequence of a parsed line: an encoded key, or runs of consecutive ids.
Part = bytes | Runs


@dataclass(frozen=True, slots=True)
class Line:
    """A trace line, validated; ``prompt``/``output`` not expanded yet (see :func:`expand`)."""

    request_id: str
    arrival_s: float
    prompt: Part
    output: Part
    session: str | None = None
    namespace: str | None = None

    def request(self, *, runs: bool = False) -> Request:
        """The request; ``runs``: runs of ids as run keys, else expanded to encoded keys."""
        return Request(
            self.request_id,
            self.arrival_s,
            expand(self.prompt, runs=runs),
            expand(self.output, runs=runs),
            self.session,
            self.namespace,
        )


def expand(part: Part, *, runs: bool = False) -> TokenKey:
    """The key of ``part``: an encoded key as it is; runs as a run key (``runs``) or expanded to
    the encoded key of their ids (the same ids: a cache treats both alike)."""
    if isinstance(part, bytes):
        return part
    if runs:
        return RunKey.of_runs(part)
    if len(part) == 1:
        return ramp(*part[0])
    return b"".join(ramp(start, count) for start, count in part)


class LineError(Exception):
    """A reason a line is malformed; turned into InputError with the file and line."""


def is_int(value: object) -> bool:
    return type(value) is int


def _field(obj: Obj, key: str) -> Any:
    try:
        return obj[key]
    except KeyError:
        raise LineError(f"missing field {key!r}") from None


def _int_field(obj: Obj, key: str, *, minimum: int) -> int:
    value = _field(obj, key)
    if not is_int(value):
        raise LineError(f"field {key!r} must be an integer, got {describe(value)}")
    if value < minimum:
        what = "negative" if value < 0 else f"below {minimum}"
        raise LineError(f"field {key!r} is {what}: {value} (must be >= {minimum})")
    result: int = value
    return result


def _time_field(obj: Obj, key: str) -> float:
    value = _field(obj, key)
    if not (is_int(value) or type(value) is float):
        raise LineError(f"field {key!r} must be a number, got {describe(value)}")
    try:
        number = float(value)
    except OverflowError:
        number = math.inf
    if not math.isfinite(number):
        raise LineError(f"field {key!r} must be a finite number, got {value}")
    if number < 0:
        raise LineError(f"field {key!r} is negative: {value}")
    return number


def describe(value: object) -> str:
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


def _int_list(obj: Obj, key: str, *, allow_empty: bool, bound: int = MAX_TOKEN_ID) -> list[int]:
    value = _field(obj, key)
    if not isinstance(value, list):
        raise LineError(f"field {key!r} must be a list of integers, got {describe(value)}")
    if not value:
        if allow_empty:
            return value
        raise LineError(f"field {key!r} must not be empty")
    for index, item in enumerate(value):
        if not is_int(item):
            raise LineError(f"{key}[{index}] must be an integer, got {describe(item)}")
    low, high = min(value), max(value)
    if low < 0 or high >= bound:
        index = value.index(low if low < 0 else high)
        raise LineError(f"{key}[{index}] = {value[index]} is outside [0, {bound})")
    return value


def _block_runs(hashes: list[int], block_size: int, length: int, key: str) -> Runs:
    """Token ids ``h*block_size + i`` for each hash, the last block cut to fit ``length``, as
    runs (consecutive hash ids make one run)."""
    if length > MAX_INPUT_LENGTH:
        raise LineError(f"input_length {length} is too large (must be <= {MAX_INPUT_LENGTH})")
    needed = -(-length // block_size)
    if len(hashes) < needed:
        raise LineError(
            f"{key} too short: {len(hashes)} blocks of {block_size} cover "
            f"{len(hashes) * block_size} tokens, input_length is {length} "
            f"(needs {needed} blocks)"
        )
    if len(hashes) > needed:
        raise LineError(
            f"{key} too long: input_length {length} needs {needed} blocks of {block_size}, "
            f"got {len(hashes)}"
        )
    # consecutive hash ids are one contiguous run of ids
    runs: list[tuple[int, int]] = []
    run_start = hashes[0]
    run_blocks = 1
    for h in hashes[1:]:
        if h == run_start + run_blocks:
            run_blocks += 1
        else:
            runs.append((run_start * block_size, run_blocks * block_size))
            run_start, run_blocks = h, 1
    tail = length - (needed - 1) * block_size
    runs.append((run_start * block_size, (run_blocks - 1) * block_size + tail))
    return tuple(runs)


def _synthetic_output(line: int, length: int) -> Runs:
    """``length`` ids unique to the request on ``line``, above every prompt id."""
    if length >= OUTPUT_ID_STRIDE:
        raise LineError(f"output_length {length} is too large (must be < {OUTPUT_ID_STRIDE})")
    if line > _MAX_LINE:
        raise LineError("too many lines for synthetic output ids")
    return ((OUTPUT_ID_BASE + line * OUTPUT_ID_STRIDE, length),) if length else ()


def _parse_mooncake(obj: Obj, line: int) -> Line:
    timestamp = _time_field(obj, "timestamp")
    length = _int_field(obj, "input_length", minimum=1)
    out_len = _int_field(obj, "output_length", minimum=0)
    hashes = _int_list(obj, "hash_ids", allow_empty=False, bound=MAX_MOONCAKE_HASH)
    prompt = _block_runs(hashes, MOONCAKE_BLOCK_SIZE, length, "hash_ids")
    return Line(
        request_id=str(line),
        arrival_s=timestamp / 1000.0,
        prompt=prompt,
        output=_synthetic_output(line, out_len),
    )


def _id_text(obj: Obj, key: str, *, optional: bool) -> str | None:
    if optional and obj.get(key) is None:
        return None
    value = _field(obj, key)
    if isinstance(value, str):
        return value
    if is_int(value):
        return str(value)
    raise LineError(f"field {key!r} must be a string or an integer, got {describe(value)}")


def _parse_marconi(obj: Obj, line: int) -> Line:
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
                raise LineError(
                    f"{count_key} is {count} but {tokens_key} holds {len(tokens)} tokens"
                )
    if "turn_id" in obj:
        turn = _int_field(obj, "turn_id", minimum=0)
        request_id = f"{session}:{turn}"
    else:
        request_id = str(line)
    return Line(
        request_id=request_id,
        arrival_s=arrival,
        prompt=encode_tokens(prompt),
        output=encode_tokens(output),
        session=session,
    )


def _exactly_one(obj: Obj, first: str, second: str) -> str:
    has_first, has_second = first in obj, second in obj
    if has_first == has_second:
        state = "both" if has_first else "neither"
        raise LineError(f"needs exactly one of {first!r} or {second!r}, got {state}")
    return first if has_first else second


def _parse_hycache(obj: Obj, line: int) -> Line:
    unknown = sorted(set(obj) - _HYCACHE_KEYS)
    if unknown:
        raise LineError(f"unknown field(s) {', '.join(map(repr, unknown))}")
    request_id = _id_text(obj, "id", optional=False)
    if request_id is None:
        raise IntegrityError("request_id missing")
    arrival = _time_field(obj, "arrival")
    session = _id_text(obj, "session", optional=True)
    namespace = obj.get("namespace")
    if namespace is not None and not isinstance(namespace, str):
        raise LineError(f"field 'namespace' must be a string or null, got {describe(namespace)}")
    prompt: Part
    output: Part
    if _exactly_one(obj, "tokens", "block_hashes") == "tokens":
        extra = sorted(k for k in ("block_size", "input_length") if k in obj)
        if extra:
            raise LineError(f"{', '.join(map(repr, extra))}: only allowed with 'block_hashes'")
        prompt = encode_tokens(_int_list(obj, "tokens", allow_empty=False))
    else:
        block_size = _int_field(obj, "block_size", minimum=1)
        length = _int_field(obj, "input_length", minimum=1)
        bound = MAX_TOKEN_ID // block_size  # every h*block_size + i stays < 2**40
        hashes = _int_list(obj, "block_hashes", allow_empty=False, bound=bound)
        prompt = _block_runs(hashes, block_size, length, "block_hashes")
    if _exactly_one(obj, "output_length", "output_tokens") == "output_length":
        output = _synthetic_output(line, _int_field(obj, "output_length", minimum=0))
    else:
        output = encode_tokens(_int_list(obj, "output_tokens", allow_empty=True))
    return Line(
        request_id=request_id,
        arrival_s=arrival,
        prompt=prompt,
        output=output,
        session=session,
        namespace=namespace,
    )


PARSERS: dict[str, Callable[[Obj, int], Line]] = {
    "mooncake": _parse_mooncake,
    "marconi": _parse_marconi,
    "hycache": _parse_hycache,
}
