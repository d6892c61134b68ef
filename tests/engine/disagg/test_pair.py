"""Two real processes: the handshake, requests through prefill and decode, a decode process
killed mid-transfer."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from hycache.cache.presets import build_cache
from hycache.engine.disagg.messages import DecodeConfig
from hycache.engine.disagg.pair import DisaggPair
from hycache.engine.engine import Engine
from hycache.engine.model import LoadedModel
from hycache.engine.request import EngineRequest
from hycache.engine.verify import compare, default_capacity
from hycache.errors import HandshakeError

ARCH = "qwen3_next"


def _prefill(model: LoadedModel) -> Engine:
    cache = build_cache(model.spec, default_capacity(model.spec), "vllm", block_size=16)
    return Engine(model, cache, max_running=1)


def _decode(directory: Path, model: LoadedModel, **over: Any) -> DecodeConfig:
    fields: dict[str, Any] = {
        "model_dir": str(directory),
        "dtype": "float32",
        "preset": "sglang",
        "capacity": default_capacity(model.spec),
        "knobs": {"page_size": 64},
    }
    return DecodeConfig(**(fields | over))


def _prompt(n: int, salt: int = 0) -> tuple[int, ...]:
    return tuple(3 + (i * 7 + salt) % 200 for i in range(n))


def test_pair_handshake_and_requests(
    models: Callable[[str], LoadedModel], model_dirs: Callable[[str], Path]
) -> None:
    model = models(ARCH)
    engine = _prefill(model)
    with DisaggPair(timeout_s=60) as pair:
        with pytest.raises(HandshakeError) as info:
            pair.setup(engine, "vllm", _decode(model_dirs(ARCH), model, dtype="float64"))
        assert info.value.field == "dtype"
        with pytest.raises(HandshakeError) as info:
            pair.setup(engine, "vllm", _decode(model_dirs("nemotron_h"), model))
        assert info.value.field == "model_type"
        shake = pair.setup(engine, "vllm", _decode(model_dirs(ARCH), model))
        assert (shake.prefill.pool, shake.decode.pool) != ("", "")
        assert shake.decode.page_size == 64
        first = EngineRequest(_prompt(150), 3, rid="a")
        again = EngineRequest(_prompt(150) + _prompt(30, 1), 3, rid="b")
        for request in (first, again, EngineRequest((5,), 2, rid="one-token")):
            outcome = pair.run(request)
            assert outcome.status == "done", outcome.error
            cold = engine.run_cold(request.prompt, request.max_new_tokens)
            delta, mismatch, _, _ = compare(outcome.as_result(request), cold, 1e-4)
            assert delta < 1e-4 and not mismatch
            assert outcome.report is not None and outcome.report.minimal
            assert not outcome.violations
        engine.cache.check_integrity()


def test_decode_killed_mid_transfer(
    models: Callable[[str], LoadedModel], model_dirs: Callable[[str], Path]
) -> None:
    model = models(ARCH)
    engine = _prefill(model)
    with DisaggPair(timeout_s=20) as pair:
        pair.setup(engine, "vllm", _decode(model_dirs(ARCH), model))
        channel = pair.channel
        process = pair.process
        assert channel is not None and process is not None
        send = channel.send_tensor

        def send_then_kill(tensor: Any) -> None:
            send(tensor)
            os.kill(process.pid, signal.SIGKILL)  # after the first tensor of the payload
            process.wait()

        channel.send_tensor = send_then_kill  # type: ignore[method-assign]
        started = time.monotonic()
        outcome = pair.run(EngineRequest(_prompt(120), 2, rid="doomed"))
        assert outcome.status == "failed"
        assert "TransportError" in (outcome.error or "")
        assert time.monotonic() - started < 20
        engine.cache.check_integrity()
        assert engine.cache.requests_in_flight() == 0
        assert pair.run(EngineRequest(_prompt(40), 2, rid="next")).status == "failed"


def test_silent_decode_times_out(
    models: Callable[[str], LoadedModel], model_dirs: Callable[[str], Path]
) -> None:
    model = models(ARCH)
    engine = _prefill(model)
    with DisaggPair(timeout_s=15) as pair:
        pair.setup(engine, "vllm", _decode(model_dirs(ARCH), model))
        process = pair.process
        assert process is not None
        os.kill(process.pid, signal.SIGSTOP)  # alive but silent
        try:
            started = time.monotonic()
            outcome = pair.run(EngineRequest(_prompt(100), 2, rid="stalled"))
            assert outcome.status == "failed"
            assert time.monotonic() - started < 60
            engine.cache.check_integrity()
            assert engine.cache.requests_in_flight() == 0
        finally:
            os.kill(process.pid, signal.SIGKILL)
