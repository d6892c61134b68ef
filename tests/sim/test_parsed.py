"""A trace parsed once (``ParsedTrace``, ``load_trace``): the same requests as the streaming
reader, the same replay results, and an on-disk cache keyed by the file's content."""

from __future__ import annotations

import dataclasses
import gzip
import io
import json
from pathlib import Path

import pytest

from hycache.errors import InputError, IntegrityError
from hycache.sim.cost import CostModel
from hycache.sim.hardware import hardware
from hycache.sim.parsed import ParsedTrace
from hycache.sim.simulate import SimulationConfig, simulate
from hycache.sim.trace import read_trace
from hycache.sim.trace_cache import load_trace
from hycache.spec.model import load_spec

TRACES = Path(__file__).resolve().parents[2] / "data" / "traces"
CONVERSATION = TRACES / "mooncake_conversation.jsonl.gz"


def _write(path: Path, rows: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _marconi(tmp_path: Path) -> Path:
    rows: list[dict[str, object]] = []
    history: list[int] = []
    for turn in range(4):
        history = [*history, *range(100 * turn, 100 * turn + 37), 7, 7, 3]
        rows.append(
            {
                "session_id": "s1",
                "turn_id": turn,
                "ts": 0.5 * turn,
                "input_tokens": history,
                "output_tokens": [5, 6, 7 + turn],
            }
        )
        history = [*history, 5, 6, 7 + turn]
    rows.append({"session_id": 9, "ts": 3.0, "input_tokens": [1], "output_tokens": []})
    return _write(tmp_path / "marconi.jsonl", rows)


def _hycache(tmp_path: Path) -> Path:
    rows: list[dict[str, object]] = [
        {"format": "hycache", "version": 1},
        {"id": "a", "arrival": 0, "tokens": [1, 2, 3, 9], "output_length": 3, "session": "x"},
        {
            "id": "b",
            "arrival": 1,
            "block_hashes": [4, 5, 9],
            "block_size": 16,
            "input_length": 40,
            "output_tokens": [1, 2],
            "namespace": "n",
        },
        {
            "id": 3,
            "arrival": 2.5,
            "block_hashes": [4],
            "block_size": 16,
            "input_length": 7,
            "output_length": 0,
        },
    ]
    return _write(tmp_path / "hycache.jsonl", rows)


@pytest.mark.parametrize("make", [_marconi, _hycache])
def test_small_traces_yield_what_the_reader_yields(tmp_path: Path, make: object) -> None:
    path = make(tmp_path)  # type: ignore[operator]
    parsed = load_trace(path)
    assert list(parsed()) == list(read_trace(path))
    assert list(parsed.head(2)) == list(read_trace(path, limit=2))


def test_mooncake_yields_what_the_reader_yields() -> None:
    parsed = load_trace(CONVERSATION, limit=800)
    assert len(parsed) == 800
    assert list(parsed()) == list(read_trace(CONVERSATION, limit=800))
    assert parsed.nbytes < 200_000  # block runs, not 512 ids per block


def test_disk_cache_is_keyed_by_content(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    path = _marconi(tmp_path)
    first = load_trace(path, cache_dir=cache)
    [stored] = cache.iterdir()
    again = load_trace(path, cache_dir=cache)
    assert list(again()) == list(first())
    # a damaged cache file is a miss, parsed again and replaced
    stored.write_bytes(b"not a parsed trace")
    assert list(load_trace(path, cache_dir=cache)()) == list(first())
    # an edited trace gets its own entry
    path.write_text(path.read_text().replace('"ts": 3.0', '"ts": 4.0'))
    edited = load_trace(path, cache_dir=cache)
    assert [r.arrival_s for r in edited()][-1] == 4.0
    assert len(list(cache.glob("*.trace"))) == 2


def test_malformed_trace_raises_and_caches_nothing(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    path = tmp_path / "bad.jsonl.gz"
    with gzip.open(path, "wt") as handle:
        handle.write('{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [1]}\n')
        handle.write('{"timestamp": 0, "input_length": 10, "output_length": 1}\n')
    with pytest.raises(InputError, match=r"bad.jsonl.gz:2: missing field 'hash_ids'"):
        load_trace(path, cache_dir=cache)
    assert not list(cache.glob("*.trace"))
    assert len(load_trace(path, limit=1, cache_dir=cache)) == 1


def _stored(parsed: ParsedTrace) -> bytes:
    handle = io.BytesIO()
    parsed.write(handle)
    return handle.getvalue()


@pytest.mark.parametrize("make", [_marconi, _hycache])
def test_parsed_round_trips_through_its_stored_form(tmp_path: Path, make: object) -> None:
    parsed = load_trace(make(tmp_path))  # type: ignore[operator]
    back = ParsedTrace.read(io.BytesIO(_stored(parsed)))
    assert list(back()) == list(parsed())
    assert back.nbytes == parsed.nbytes > 0


def test_a_damaged_stored_form_is_refused(tmp_path: Path) -> None:
    """Cut short, too long, another schema or byte order, a broken header, lengths that do
    not fit (a huge one included, refused before anything is allocated for it):
    IntegrityError (the cache reads any of them as a miss)."""
    stored = _stored(load_trace(_marconi(tmp_path)))
    header, body = stored.split(b"\n", 1)
    fields = json.loads(header)

    def with_header(**changes: object) -> bytes:
        return json.dumps({**fields, **changes}).encode() + b"\n" + body

    lengths = fields["lengths"]
    damaged = {
        "cut short": stored[:-3],
        "cut inside an item": stored[:-8],
        "too long": stored + b"\0",
        "other schema": with_header(schema=fields["schema"] + 1),
        "other byte order": with_header(
            byteorder="big" if fields["byteorder"] == "little" else "little"
        ),
        "lengths that do not fit": with_header(
            lengths=[lengths[0] + 1, lengths[1] - 1, *lengths[2:]]
        ),
        "a huge length": with_header(lengths=[*lengths[:2], 10**15, *lengths[3:]]),
        "a negative length": with_header(lengths=[lengths[0] + 1, -1, *lengths[2:]]),
        "broken header": b"{" + body,
        "empty": b"",
    }
    for what, data in damaged.items():
        with pytest.raises(IntegrityError):
            ParsedTrace.read(io.BytesIO(data))
            pytest.fail(what)


@pytest.mark.parametrize("mode", ["serial", "engine"])
def test_replays_match_the_streaming_reader(mode: str) -> None:
    """Every preset, bootstrap replays included: the parsed source gives the results the
    streamed trace gave (the wall time aside)."""
    spec = load_spec("qwen3-next-80b-a3b")
    config = SimulationConfig(
        spec, CostModel(spec, hardware("h200")), mode=mode, reject_oversized=True
    )
    policies = ["vllm", "sglang", "marconi", "hycache"]
    capacity = 12 * 10**9
    old = simulate(config, lambda: read_trace(CONVERSATION, limit=150), capacity, policies)
    new = simulate(config, load_trace(CONVERSATION, limit=150), capacity, policies)
    assert all(r.evictions for r in new.values())  # a capacity that makes them choose
    for policy in policies:
        assert dataclasses.replace(new[policy], wall_s=0.0) == dataclasses.replace(
            old[policy], wall_s=0.0
        )
