"""benchmarks/tree_ops.py reads a gzip trace (its default is the bundled one) and a plain one
alike."""

from __future__ import annotations

import gzip
import subprocess
import sys
from pathlib import Path

import pytest

from tests.benchmarks.scripts import BENCHMARKS

TRACE = BENCHMARKS.parent / "data" / "traces" / "mooncake_conversation.jsonl.gz"


def run_tree_ops(trace: Path, *args: str) -> dict[str, str]:
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / "tree_ops.py"), str(trace), *args],
        capture_output=True,
        text=True,
        check=True,
    )
    last = done.stdout.strip().splitlines()[-1]
    name, _, fields = last.partition(": ")
    assert name == "tree_ops"
    return dict(field.split("=") for field in fields.split())


@pytest.fixture(scope="module")
def head() -> list[bytes]:
    with gzip.open(TRACE, "rb") as source:
        return [source.readline() for _ in range(300)]


def test_gzip_and_plain_copies_of_a_trace_give_the_same_counts(
    head: list[bytes], tmp_path: Path
) -> None:
    plain = tmp_path / "head.jsonl"
    plain.write_bytes(b"".join(head))
    packed = tmp_path / "head.jsonl.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    from_plain = run_tree_ops(plain)
    from_gzip = run_tree_ops(packed, "--input", "list")
    assert from_plain["requests"] == from_gzip["requests"] == "300"
    for field in ("tokens", "reused", "kv_hit"):
        assert from_plain[field] == from_gzip[field], field
    assert 0 < float(from_plain["reused"]) < 1
