"""Checks of the arguments of the cache's public calls, made before anything changes.

Each raises ``ArgumentError`` naming the argument; none mutates anything.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Sequence

from hycache.errors import ArgumentError
from hycache.tree.keys import TOKEN_BYTES, TokenKey, encode_tokens
from hycache.tree.runkey import RunKey


def token_key(name: str, tokens: object) -> TokenKey:
    """``tokens`` (a sequence of int token ids, an ``array('q')`` or an encoded ``bytes`` key)
    as a key; a run key passes as it is."""
    if isinstance(tokens, RunKey):
        return tokens
    if isinstance(tokens, bytes):
        if len(tokens) % TOKEN_BYTES:
            raise ArgumentError(
                name, f"an encoded key holds whole {TOKEN_BYTES}-byte ids; got {len(tokens)} bytes"
            )
        return tokens
    if isinstance(tokens, array):
        if tokens.typecode != "q":
            raise ArgumentError(name, f"an array of token ids must be 'q', got {tokens.typecode!r}")
        return tokens.tobytes()
    if isinstance(tokens, str | bytearray | memoryview) or not isinstance(tokens, Sequence):
        raise ArgumentError(name, f"expected a sequence of int token ids, got {_kind(tokens)}")
    try:
        return encode_tokens(tokens)
    except Exception:
        bad = next((t for t in tokens if isinstance(t, bool) or not isinstance(t, int)), None)
        detail = f"{bad!r} ({_kind(bad)})" if bad is not None else "an id outside int64"
        raise ArgumentError(name, f"token ids must be int64 integers, got {detail}") from None


def whole(name: str, value: object, *, minimum: int) -> int:
    """An int (not a bool) >= ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ArgumentError(name, f"expected an integer >= {minimum}, got {_kind(value)}")
    if value < minimum:
        raise ArgumentError(name, f"must be >= {minimum}, got {value}")
    return value


def optional_whole(name: str, value: object, *, minimum: int) -> int | None:
    return None if value is None else whole(name, value, minimum=minimum)


def optional_text(name: str, value: object) -> str | None:
    if value is not None and not isinstance(value, str):
        raise ArgumentError(name, f"expected a string or None, got {_kind(value)}")
    return value


def text(name: str, value: object) -> str:
    if not isinstance(value, str):
        raise ArgumentError(name, f"expected a string, got {_kind(value)}")
    return value


def flag(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise ArgumentError(name, f"expected True or False, got {_kind(value)}")
    return value


def finite(name: str, value: object) -> float:
    """A real number that is neither NaN nor infinite."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ArgumentError(name, f"expected a number, got {_kind(value)}")
    if not math.isfinite(value):
        raise ArgumentError(name, f"must be finite, got {value}")
    return float(value)


def _kind(value: object) -> str:
    return "None" if value is None else f"{type(value).__name__} {value!r}"[:80]
