"""Run keys behave as the encoded bytes of their ids: slices, equality, hashing, joins."""

from __future__ import annotations

from array import array

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hycache.tree import runkey
from hycache.tree.keys import TOKEN_BYTES, concat, decode_tokens, encode_tokens
from hycache.tree.runkey import RunKey

runs = st.lists(st.tuples(st.integers(0, 2**40), st.integers(0, 40)), max_size=6)


def _ids(spec: list[tuple[int, int]]) -> list[int]:
    return [i for first, count in spec for i in range(first, first + count)]


@given(runs, st.integers(0, 300), st.integers(0, 300))
def test_slices_match_the_encoded_bytes(spec: list[tuple[int, int]], a: int, b: int) -> None:
    key = RunKey.of_runs(spec)
    encoded = encode_tokens(_ids(spec))
    assert len(key) == len(encoded) and bytes(key) == encoded
    piece = key[a * TOKEN_BYTES : b * TOKEN_BYTES]
    expected = encoded[a * TOKEN_BYTES : b * TOKEN_BYTES]
    assert piece == expected and expected == piece
    assert hash(piece) == hash(expected)
    assert piece == RunKey.of_key(expected)  # canonical: equal ids, equal runs
    assert key[: a * TOKEN_BYTES] == encoded[: a * TOKEN_BYTES]
    assert key[a * TOKEN_BYTES :] == encoded[a * TOKEN_BYTES :]
    assert piece.startswith(expected[: len(expected) // 2 // TOKEN_BYTES * TOKEN_BYTES])
    assert not piece.startswith(expected + b"\0" * TOKEN_BYTES)


@given(runs, runs)
def test_joins_match_the_encoded_bytes(
    left: list[tuple[int, int]], right: list[tuple[int, int]]
) -> None:
    a, b = RunKey.of_runs(left), RunKey.of_runs(right)
    joined = encode_tokens(_ids(left) + _ids(right))
    assert a + b == joined and a + bytes(b) == joined and bytes(a) + b == joined
    assert concat([a, bytes(b)]) == joined
    assert decode_tokens(a + b) == tuple(array("q", joined))
    assert (a + b) == RunKey.of_key(joined)


def test_unequal_ids_are_unequal() -> None:
    key = RunKey.of_runs([(0, 4)])
    assert key != RunKey.of_runs([(0, 3), (9, 1)])
    assert key != encode_tokens([0, 1, 2, 4])
    assert key != b"x" and not RunKey.of_runs([])


@given(runs, runs, st.integers(0, 100))
def test_common_tokens_counts_the_shared_ids(
    left: list[tuple[int, int]], right: list[tuple[int, int]], offset: int
) -> None:
    a, b = RunKey.of_runs(left), RunKey.of_runs(left[:1] + right)
    ids_a, ids_b = _ids(left), _ids(left[:1] + right)[offset:]
    shared = 0
    while shared < min(len(ids_a), len(ids_b)) and ids_a[shared] == ids_b[shared]:
        shared += 1
    assert a.common_tokens(b, offset) == shared


def test_a_page_that_spans_blocks_is_hashed_from_the_memo(monkeypatch: pytest.MonkeyPatch) -> None:
    """A page slice spanning two trace blocks (two runs) is looked up again as a fresh slice:
    its hash comes from the memo, without expanding its ids again, and equals the bytes'."""
    expanded: list[int] = []
    real_ramp = runkey.ramp

    def counting_ramp(start: int, length: int) -> bytes:
        expanded.append(length)
        return real_ramp(start, length)

    monkeypatch.setattr(runkey, "ramp", counting_ramp)
    prompt = RunKey.of_runs([(7 * 512, 512), (90 * 512, 512), (3 * 512, 512)])
    page = slice(500 * TOKEN_BYTES, 1076 * TOKEN_BYTES)  # 12 ids of one block, 564 of the next
    encoded = bytes(prompt)
    first = hash(prompt[page])
    assert expanded[3:], "the first hash expands the ids"
    expanded.clear()
    assert hash(prompt[page]) == first == hash(encoded[page])
    assert not expanded  # the fresh slice's hash came from the memo
    monkeypatch.setattr(runkey, "RUN_HASH_MEMO", 1)  # a full memo starts over, hashes unchanged
    for start in range(0, 1000, 100):
        piece = prompt[start * TOKEN_BYTES : (start + 576) * TOKEN_BYTES]
        assert hash(piece) == hash(bytes(piece))
