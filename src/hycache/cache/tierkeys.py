"""Content keys of data held below the device (DESIGN.md section 4b).

KV is held in *host pages* of ``page`` tokens. Page ``j`` of a path is keyed by a hash chain:
``chain[j] = H(chain[j-1] || tokens of page j)`` starting from ``root(namespace)``, so a key
names one cached position whatever node boundaries the device tree had. A state at position
``p`` (any position, not only a page end) is keyed by the chain key of the whole pages before
it (its *base*) and the tokens after them (SGLang's TRAILING_PAGES, generalised to positions
inside a page); a tier indexes its states by base so a lookup costs one probe per page.
"""

from __future__ import annotations

import hashlib

from hycache.tree.keys import TOKEN_BYTES

_DIGEST = 16


def root(namespace: str | None) -> bytes:
    """The chain's start for ``namespace`` (distinct namespaces never share a key)."""
    return hashlib.blake2b(repr(namespace).encode(), digest_size=_DIGEST).digest()


def chain(key: bytes, namespace: str | None, pages: int, page: int) -> list[bytes]:
    """Chain keys of the first ``pages`` whole pages (``page`` tokens each) of ``key``."""
    step = page * TOKEN_BYTES
    h = root(namespace)
    out: list[bytes] = []
    for i in range(pages):
        h = hashlib.blake2b(h + key[i * step : (i + 1) * step], digest_size=_DIGEST).digest()
        out.append(h)
    return out


def base_of(links: list[bytes], namespace: str | None, position: int, page: int) -> bytes:
    """The chain key of the whole pages before ``position`` (``links`` covers them)."""
    whole = position // page
    return links[whole - 1] if whole else root(namespace)


def state_key(key: bytes, base: bytes, position: int, page: int) -> bytes:
    """The key of the state after ``position`` tokens of ``key``, whose base is ``base``."""
    tail = key[position // page * page * TOKEN_BYTES : position * TOKEN_BYTES]
    return hashlib.blake2b(base + b"state" + tail, digest_size=_DIGEST).digest()
