"""The disaggregation contract without processes: --disagg parsing, the handshake check."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from hycache.engine.disagg.base import DisaggSpec, InstanceMeta, Pull, Side
from hycache.errors import ConfigError, HandshakeError

PRESETS = ("vllm", "sglang", "marconi", "hycache")


def test_parse_page_sizes_and_presets() -> None:
    assert DisaggSpec.parse("16:64", PRESETS) == DisaggSpec(Side(16), Side(64))
    spec = DisaggSpec.parse("vllm@16:sglang@64", PRESETS)
    assert spec.prefill.resolve("hycache") == ("vllm", {"block_size": 16})
    assert spec.decode.resolve("hycache") == ("sglang", {"page_size": 64})
    assert Side(64).resolve("hycache") == ("hycache", {"page_size": 64})


@pytest.mark.parametrize("text", ["16", "16:64:1", "a:64", "0:64", "foo@16:64"])
def test_parse_refuses(text: str) -> None:
    with pytest.raises(ConfigError, match="--disagg"):
        DisaggSpec.parse(text, PRESETS)


def test_handshake_names_the_field() -> None:
    meta = InstanceMeta(1, "float32", "qwen3_next", "m1", "l1", "vllm", 64, "unified")
    meta.check_peer(replace(meta, preset="sglang", page_size=16, pool="split"))  # allowed
    for name, value in (("dtype", "float64"), ("model", "m2"), ("layout", "l2")):
        with pytest.raises(HandshakeError) as info:
            over: dict[str, Any] = {name: value}
            meta.check_peer(replace(meta, **over))
        assert info.value.field == name
        assert name in str(info.value)


def test_pull_empty() -> None:
    assert Pull(5, 5, False).empty
    assert not Pull(5, 5, True).empty
    assert not Pull(0, 5, False).empty
