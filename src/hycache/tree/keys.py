"""Token keys: token ids as the tree stores and compares them.

The tree keeps every edge as ``bytes`` of native int64 token ids. Slicing and comparing bytes is
a memcmp, with no per-token Python object touched, which is what makes matching long prompts
cheap. Callers may pass any sequence of ints (encoded once per call) or an already encoded key
(``bytes``; an ``array('q')`` is encoded with one memcpy). A key may also be a
:class:`~hycache.tree.runkey.RunKey` (runs of consecutive ids, for block-hashed traces), which
slices, compares and hashes as the encoded bytes of its ids do.
"""

from __future__ import annotations

import struct
from array import array
from collections.abc import Iterable, Sequence
from typing import overload

from hycache.errors import CacheUsageError
from hycache.tree.runkey import ID_BYTES, RunKey

#: Bytes per token id in a key.
TOKEN_BYTES = ID_BYTES

TokenKey = bytes | RunKey
#: What the tree's methods accept: any sequence of ints, ``bytes`` meaning an encoded key, or
#: a run key.
TokenInput = Sequence[int] | RunKey


@overload
def encode_tokens(tokens: RunKey) -> RunKey: ...
@overload
def encode_tokens(tokens: Sequence[int]) -> bytes: ...
def encode_tokens(tokens: TokenInput) -> TokenKey:
    """``tokens`` as a key; ``bytes`` and run keys pass through unchanged (no copy)."""
    if isinstance(tokens, RunKey):
        return tokens
    if isinstance(tokens, bytes):
        if len(tokens) % TOKEN_BYTES:
            raise CacheUsageError("a token key must hold whole int64 ids")
        return tokens
    if isinstance(tokens, array):
        if tokens.itemsize != TOKEN_BYTES:
            raise CacheUsageError("an array of token ids must hold int64 ids")
        return tokens.tobytes()
    # struct packs a list about 3x faster than array("q", ...) does
    try:
        return struct.pack(f"{len(tokens)}q", *tokens)
    except struct.error as exc:
        raise CacheUsageError(f"token ids must be int64 integers: {exc}") from None


def decode_tokens(key: TokenKey) -> tuple[int, ...]:
    """The token ids of ``key``."""
    ids = array("q")
    ids.frombytes(bytes(key))
    return tuple(ids)


def concat(parts: Iterable[TokenKey]) -> TokenKey:
    """The key of ``parts`` one after the other (a run key if any part is one)."""
    items = list(parts)
    if all(isinstance(p, bytes) for p in items):
        return b"".join(items)  # type: ignore[arg-type]  # all bytes, checked
    return RunKey.of_runs(r for p in items for r in RunKey.of_key(p).runs())


def key_length(key: TokenKey) -> int:
    """Number of tokens in ``key``."""
    return len(key) // TOKEN_BYTES
