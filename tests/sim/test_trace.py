"""Trace readers: Mooncake, Marconi and hycache JSONL; streaming; every malformed line."""

from __future__ import annotations

import bisect
import gzip
import inspect
import json
from array import array
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hycache.errors import ConfigError, InputError
from hycache.sim.request import Request
from hycache.sim.trace import FORMATS, count_requests, detect_format, read_trace
from hycache.sim.trace_lines import MAX_TOKEN_ID, OUTPUT_ID_BASE
from hycache.tree.keys import decode_tokens, encode_tokens
from hycache.tree.runkey import ramp as _ramp

TRACES = Path(__file__).resolve().parents[2] / "data" / "traces"
CONVERSATION = TRACES / "mooncake_conversation.jsonl.gz"
SYNTHETIC = TRACES / "mooncake_synthetic.jsonl.gz"


def write_lines(path: Path, lines: list[Any]) -> Path:
    """Objects are dumped as JSON, strings written verbatim."""
    text = "".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines)
    path.write_text(text)
    return path


def ids(key: bytes) -> list[int]:
    return list(decode_tokens(key))


def block(h: int, n: int = 512) -> list[int]:
    return list(range(h * 512, h * 512 + n))


# ---------------------------------------------------------------------------------- Mooncake


def test_mooncake_expansion_first_and_partial_last_block(tmp_path: Path) -> None:
    path = write_lines(
        tmp_path / "m.jsonl",
        [
            {"timestamp": 1500, "input_length": 1100, "output_length": 3, "hash_ids": [7, 3, 9]},
            {"timestamp": 2000, "input_length": 1024, "output_length": 0, "hash_ids": [7, 4]},
            {"timestamp": 2500, "input_length": 1, "output_length": 2, "hash_ids": [11]},
        ],
    )
    assert detect_format(path) == "mooncake"
    first, second, third = read_trace(path)
    assert first.prompt_len == 1100
    tokens = ids(first.prompt)
    assert tokens[:512] == block(7)  # first block: h*512 .. h*512+511
    assert tokens[512:1024] == block(3)
    assert tokens[1024:] == block(9, 1100 - 1024)  # partial last block: 76 tokens
    assert first.arrival_s == 1.5
    assert first.request_id == "1" and first.session is None and first.namespace is None
    assert first.output_len == 3
    # last block full when input_length is a multiple of 512
    assert ids(second.prompt) == block(7) + block(4)
    assert second.output == b"" and second.request_id == "2"
    assert ids(third.prompt) == [11 * 512]


def test_mooncake_outputs_are_unique_and_never_prompt_ids(tmp_path: Path) -> None:
    path = write_lines(
        tmp_path / "m.jsonl",
        [
            {"timestamp": i, "input_length": 600, "output_length": 700, "hash_ids": [i, i + 1]}
            for i in range(5)
        ],
    )
    requests = list(read_trace(path))
    seen: set[int] = set()
    for request in requests:
        out = ids(request.output)
        assert len(out) == 700 and len(set(out)) == 700
        assert min(out) >= OUTPUT_ID_BASE > max(ids(request.prompt))
        assert not seen & set(out)
        seen |= set(out)
    # deterministic: reading again gives the same ids
    assert [r.output for r in read_trace(path)] == [r.output for r in requests]


def test_mooncake_consecutive_and_repeated_hash_runs(tmp_path: Path) -> None:
    hashes = [5, 6, 7, 3, 3, 4, 200, 201]
    length = 512 * 7 + 10
    path = write_lines(
        tmp_path / "m.jsonl",
        [{"timestamp": 0, "input_length": length, "output_length": 1, "hash_ids": hashes}],
    )
    (request,) = read_trace(path)
    expected = [t for h in hashes[:-1] for t in block(h)] + block(201, 10)
    assert ids(request.prompt) == expected


@given(
    start=st.one_of(st.integers(0, 2**20), st.integers(0, 2**40), st.integers(2**40, 2**41)),
    length=st.integers(0, 140_000),
)
@settings(max_examples=60, deadline=None)
def test_ramp_matches_naive_encoding(start: int, length: int) -> None:
    assert _ramp(start, length) == array("q", range(start, start + length)).tobytes()


# ----------------------------------------------------------------------------------- Marconi


def test_marconi_lines(tmp_path: Path) -> None:
    path = write_lines(
        tmp_path / "marconi.jsonl",
        [
            {
                "session_id": 42,
                "turn_id": 0,
                "ts": 28.5,
                "num_input_tokens": 3,
                "num_output_tokens": 2,
                "input_tokens": [1, 3907, 29871],
                "output_tokens": [450, 9],
            },
            {
                "session_id": 42,
                "turn_id": 1,
                "ts": 30,
                "input_tokens": [1, 3907, 29871, 450, 9, 7],
                "output_tokens": [],
            },
            {"session_id": "abc", "ts": 31.0, "input_tokens": [5], "output_tokens": [6]},
        ],
    )
    assert detect_format(path) == "marconi"
    first, second, third = read_trace(path)
    assert first == Request(
        "42:0", 28.5, encode_tokens([1, 3907, 29871]), encode_tokens([450, 9]), session="42"
    )
    assert ids(second.prompt) == [1, 3907, 29871, 450, 9, 7] and second.output == b""
    assert second.request_id == "42:1" and second.arrival_s == 30.0
    assert third.session == "abc" and third.request_id == "3"  # no turn_id: the line number


# ----------------------------------------------------------------------------------- hycache


def test_hycache_lines_with_header(tmp_path: Path) -> None:
    path = write_lines(
        tmp_path / "h.jsonl",
        [
            {"format": "hycache", "version": 1},
            "",
            {"id": "a", "arrival": 0.25, "tokens": [1, 2, 3], "output_length": 2},
            {
                "id": 7,
                "arrival": 1,
                "session": 3,
                "namespace": "tenant",
                "block_hashes": [2, 9],
                "block_size": 16,
                "input_length": 20,
                "output_tokens": [4, 5],
            },
            {
                "id": "c",
                "arrival": 2.0,
                "session": None,
                "namespace": None,
                "tokens": [9],
                "output_tokens": [],
            },
        ],
    )
    assert detect_format(path) == "hycache"
    assert count_requests(path) == 3
    a, b, c = read_trace(path)
    assert a.request_id == "a" and a.arrival_s == 0.25 and ids(a.prompt) == [1, 2, 3]
    assert a.output_len == 2 and min(ids(a.output)) >= OUTPUT_ID_BASE
    assert a.session is None and a.namespace is None
    assert b.request_id == "7" and b.session == "3" and b.namespace == "tenant"
    assert ids(b.prompt) == list(range(32, 48)) + list(range(144, 148))
    assert ids(b.output) == [4, 5]
    assert c.session is None and c.output == b""


def test_hycache_without_header(tmp_path: Path) -> None:
    path = write_lines(
        tmp_path / "h.jsonl", [{"id": 1, "arrival": 0, "tokens": [5, 6], "output_length": 0}]
    )
    assert detect_format(path) == "hycache"
    assert [r.request_id for r in read_trace(path)] == ["1"]


def test_explicit_format_skips_detection(tmp_path: Path) -> None:
    path = write_lines(
        tmp_path / "h.jsonl", [{"id": 1, "arrival": 0, "tokens": [5, 6], "output_length": 0}]
    )
    with pytest.raises(InputError, match="missing field 'timestamp'"):
        list(read_trace(path, trace_format="mooncake"))
    with pytest.raises(ConfigError, match="unknown trace format"):
        read_trace(path, trace_format="csv")
    assert set(FORMATS) == {"mooncake", "marconi", "hycache"}


def test_unsorted_timestamps_are_kept_in_file_order(tmp_path: Path) -> None:
    path = write_lines(
        tmp_path / "h.jsonl",
        [
            {"id": i, "arrival": t, "tokens": [i], "output_length": 0}
            for i, t in enumerate([3.0, 1.0, 2.0])
        ],
    )
    assert [r.arrival_s for r in read_trace(path)] == [3.0, 1.0, 2.0]


# --------------------------------------------------------------------------------- streaming


def test_read_trace_is_a_lazy_generator(tmp_path: Path) -> None:
    good = {"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [1]}
    path = write_lines(tmp_path / "m.jsonl", [good, good, "{broken"])
    assert inspect.isgenerator(read_trace(path))
    stream = read_trace(path)
    assert next(stream).request_id == "1"
    assert next(stream).request_id == "2"
    with pytest.raises(InputError, match=":3: bad JSON"):
        next(stream)


def test_limit(tmp_path: Path) -> None:
    good = {"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [1]}
    path = write_lines(tmp_path / "m.jsonl", [good, good, good, "{broken"])
    assert len(list(read_trace(path, limit=2))) == 2
    assert list(read_trace(path, limit=0)) == []
    with pytest.raises(ConfigError):
        read_trace(path, limit=-1)


def test_real_conversation_trace_streams_with_limit() -> None:
    assert detect_format(CONVERSATION) == "mooncake"
    assert detect_format(SYNTHETIC) == "mooncake"
    assert count_requests(CONVERSATION) == 12031
    requests = list(read_trace(CONVERSATION, limit=100))
    assert len(requests) == 100
    with gzip.open(CONVERSATION, "rt") as handle:
        raw = [json.loads(next(handle)) for _ in range(100)]
    for request, line in zip(requests, raw, strict=True):
        assert request.prompt_len == line["input_length"]
        assert request.output_len == line["output_length"]
        assert request.arrival_s == line["timestamp"] / 1000
        assert ids(request.prompt[:8])[0] == line["hash_ids"][0] * 512


def _hash_hit_tokens(lines: list[dict[str, Any]]) -> tuple[int, int]:
    """Infinite-cache prompt hits computed from the hash ids alone (no token expansion)."""
    nodes: dict[tuple[int, int], int] = {}  # (parent node, hash id) -> node: the block chains
    longest: list[int] = [0]  # node -> most tokens of its block seen so far
    hit = total = 0
    for line in lines:
        hashes, length = line["hash_ids"], line["input_length"]
        total += length
        node, matching = 0, True
        for index, h in enumerate(hashes):
            size = min(512, length - 512 * index)
            child = nodes.setdefault((node, h), len(longest))
            if child == len(longest):
                longest.append(0)
            if matching:
                got = min(size, longest[child])
                hit += got
                matching = got == size
            longest[child] = max(longest[child], size)
            node = child
    return hit, total


def _lcp_tokens(a: bytes, b: bytes) -> int:
    n = min(len(a), len(b))
    step = 4096
    pos = 0
    while pos < n and a[pos : pos + step] == b[pos : pos + step]:
        pos += step
    if pos >= n:
        return n // 8
    lo, hi = pos, min(pos + step, n)  # a[:lo] == b[:lo], they differ before hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid
    return lo // 8


def _token_hit_tokens(requests: list[Request]) -> tuple[int, int]:
    """Infinite-cache prompt hits: longest common token prefix with any earlier prompt."""
    ordered: list[bytes] = []
    hit = total = 0
    for request in requests:
        prompt = request.prompt
        at = bisect.bisect_left(ordered, prompt)
        neighbours = ordered[max(0, at - 1) : at + 1]
        hit += max((_lcp_tokens(prompt, other) for other in neighbours), default=0)
        total += request.prompt_len
        ordered.insert(at, prompt)
    return hit, total


@pytest.mark.slow
def test_conversation_hit_rate_matches_the_hash_ids() -> None:
    """The expansion keeps exactly the sharing the hash ids describe (partial blocks included).

    On the whole trace the hash ids give the documented infinite-cache KV hit rate 0.374; on
    the first 1,000 requests the expanded tokens give exactly the hits the hash ids give.
    """
    with gzip.open(CONVERSATION, "rt") as handle:
        lines = [json.loads(text) for text in handle if text.strip()]
    hit, total = _hash_hit_tokens(lines)
    assert round(hit / total, 3) == 0.374
    assert total == sum(r.prompt_len for r in read_trace(CONVERSATION))
    first = 1000
    expanded = _token_hit_tokens(list(read_trace(CONVERSATION, limit=first)))
    assert expanded == _hash_hit_tokens(lines[:first])
    assert expanded[0] > 0


# ------------------------------------------------------------------------------- malformed

MOON = {"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}
MARC = {"session_id": 1, "turn_id": 0, "ts": 0.5, "input_tokens": [1, 2], "output_tokens": [3]}
HYC = {"id": "r", "arrival": 0.0, "tokens": [1, 2], "output_length": 1}


def _with(base: dict[str, Any], **changes: Any) -> dict[str, Any]:
    out = {k: v for k, v in base.items() if k not in changes or changes[k] is not _DROP}
    out.update({k: v for k, v in changes.items() if v is not _DROP})
    return out


_DROP = object()

MALFORMED: list[tuple[str, dict[str, Any], str | dict[str, Any], str]] = [
    ("bad json", MOON, '{"timestamp": 0, ', "bad JSON"),
    ("not an object", MOON, "[1, 2]", "expected a JSON object"),
    ("huge integer", MOON, '{"timestamp": ' + "9" * 5000 + "}", "bad JSON"),
    ("missing field", MOON, _with(MOON, output_length=_DROP), "missing field 'output_length'"),
    ("missing hash_ids", MOON, _with(MOON, hash_ids=_DROP), "missing field 'hash_ids'"),
    ("string length", MOON, _with(MOON, input_length="600"), "must be an integer, got a string"),
    ("float length", MOON, _with(MOON, input_length=600.0), "must be an integer"),
    ("bool length", MOON, _with(MOON, output_length=True), "must be an integer, got a boolean"),
    ("string timestamp", MOON, _with(MOON, timestamp="0"), "'timestamp' must be a number"),
    ("negative timestamp", MOON, _with(MOON, timestamp=-1), "'timestamp' is negative"),
    (
        "nan timestamp",
        MOON,
        '{"timestamp": NaN, "input_length": 1, "output_length": 1, "hash_ids": [1]}',
        "must be a finite number",
    ),
    ("negative input", MOON, _with(MOON, input_length=-5), "'input_length' is negative"),
    ("zero input", MOON, _with(MOON, input_length=0), "'input_length' is below 1"),
    ("negative output", MOON, _with(MOON, output_length=-1), "'output_length' is negative"),
    ("hashes too short", MOON, _with(MOON, input_length=1025), "hash_ids too short"),
    ("hashes too long", MOON, _with(MOON, input_length=512), "hash_ids too long"),
    ("hashes not a list", MOON, _with(MOON, hash_ids=5), "must be a list of integers"),
    ("hashes empty", MOON, _with(MOON, hash_ids=[]), "must not be empty"),
    ("hash not int", MOON, _with(MOON, hash_ids=[1, "2"]), "hash_ids[1] must be an integer"),
    ("negative hash", MOON, _with(MOON, hash_ids=[1, -2]), "hash_ids[1] = -2 is outside"),
    ("huge hash", MOON, _with(MOON, hash_ids=[2**31, 1]), "hash_ids[0] = 2147483648 is outside"),
    ("huge output", MOON, _with(MOON, output_length=2**20), "output_length 1048576 is too large"),
    ("huge input", MOON, _with(MOON, input_length=2**25), "input_length 33554432 is too large"),
    ("marconi empty input", MARC, _with(MARC, input_tokens=[]), "must not be empty"),
    ("marconi missing ts", MARC, _with(MARC, ts=_DROP), "missing field 'ts'"),
    ("marconi bad session", MARC, _with(MARC, session_id=[1]), "must be a string or an integer"),
    ("marconi float token", MARC, _with(MARC, output_tokens=[1.5]), "output_tokens[0] must be"),
    ("marconi count", MARC, _with(MARC, num_input_tokens=3), "num_input_tokens is 3 but"),
    ("marconi turn", MARC, _with(MARC, turn_id=-1), "'turn_id' is negative"),
    ("marconi id range", MARC, _with(MARC, input_tokens=[MAX_TOKEN_ID]), "is outside [0, "),
    (
        "hycache both",
        HYC,
        _with(HYC, block_hashes=[1], block_size=4, input_length=4),
        "exactly one of 'tokens' or 'block_hashes', got both",
    ),
    (
        "hycache neither output",
        HYC,
        _with(HYC, output_length=_DROP),
        "exactly one of 'output_length' or 'output_tokens', got neither",
    ),
    ("hycache unknown key", HYC, _with(HYC, colour="red"), "unknown field(s) 'colour'"),
    ("hycache missing id", HYC, _with(HYC, id=_DROP), "missing field 'id'"),
    ("hycache float id", HYC, _with(HYC, id=1.5), "'id' must be a string or an integer"),
    (
        "hycache block size",
        HYC,
        _with(HYC, tokens=_DROP, block_hashes=[1], input_length=3),
        "missing field 'block_size'",
    ),
    (
        "hycache stray size",
        HYC,
        _with(HYC, block_size=4),
        "'block_size': only allowed with 'block_hashes'",
    ),
    ("hycache namespace", HYC, _with(HYC, namespace=3), "'namespace' must be a string or null"),
    (
        "hycache short hashes",
        HYC,
        _with(HYC, tokens=_DROP, block_hashes=[1], block_size=4, input_length=5),
        "block_hashes too short",
    ),
    ("hycache header later", HYC, {"format": "hycache", "version": 1}, "unknown field(s)"),
]


@pytest.mark.parametrize(
    ("first", "bad", "reason"),
    [pytest.param(first, bad, reason, id=name) for name, first, bad, reason in MALFORMED],
)
def test_malformed_line_names_file_line_and_reason(
    tmp_path: Path, first: dict[str, Any], bad: str | dict[str, Any], reason: str
) -> None:
    path = write_lines(tmp_path / "trace.jsonl", [first, "", bad, first])  # bad on line 3
    with pytest.raises(InputError) as info:
        list(read_trace(path))
    message = str(info.value)
    assert str(path) in message
    assert f"{path}:3:" in message
    assert reason in message
    assert info.value.line == 3 and info.value.path == str(path)


@pytest.mark.parametrize(
    ("first", "reason"),
    [
        ({"foo": 1, "bar": 2}, "unknown trace format: keys 'bar', 'foo'"),
        ({"format": "csv"}, "unknown trace format 'csv'"),
        ({"format": "hycache", "version": 2}, "unsupported hycache trace version 2"),
        ({"format": "hycache", "version": 1, "x": 0}, "unknown header field(s) 'x'"),
        ("not json", "bad JSON"),
        ("7", "expected a JSON object"),
    ],
)
def test_bad_first_line(tmp_path: Path, first: str | dict[str, Any], reason: str) -> None:
    path = write_lines(tmp_path / "trace.jsonl", ["", first, HYC])
    for action in (detect_format, lambda p: list(read_trace(p))):
        with pytest.raises(InputError) as info:
            action(path)
        assert f"{path}:2: " in str(info.value) and reason in str(info.value)


def test_empty_missing_and_binary_files(tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n  \n")
    for action in (detect_format, lambda p: list(read_trace(p))):
        with pytest.raises(InputError, match="empty trace"):
            action(empty)
    assert count_requests(empty) == 0
    missing = tmp_path / "missing.jsonl"
    actions: list[Callable[[Path], object]] = [
        detect_format,
        lambda p: list(read_trace(p)),
        count_requests,
    ]
    for read in actions:
        with pytest.raises(InputError, match="cannot open trace") as info:
            read(missing)
        assert str(missing) in str(info.value)
    binary = tmp_path / "binary.jsonl"
    binary.write_bytes(json.dumps(HYC).encode() + b"\n\n\xff\xfe\n")
    with pytest.raises(InputError, match=r"binary\.jsonl:3: not UTF-8"):
        list(read_trace(binary))


def test_count_requests_skips_blank_lines_and_header(tmp_path: Path) -> None:
    path = write_lines(
        tmp_path / "h.jsonl", ["", {"format": "hycache", "version": 1}, HYC, "", HYC, "  "]
    )
    assert count_requests(path) == 2
    path = write_lines(tmp_path / "m.jsonl", [MOON, MOON, "", MOON])
    assert count_requests(path) == 3
