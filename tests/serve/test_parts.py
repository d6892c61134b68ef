"""The server's parts without HTTP: tokenizer files, detokenizing, sampling, the online loop,
the scheduler's abort, sessions."""

from __future__ import annotations

import json
import random
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from hycache.cache.presets import build_cache
from hycache.engine.engine import Engine, EngineRequest, RequestResult
from hycache.engine.model import LoadedModel
from hycache.engine.online import Draining, OnlineEngine, Overloaded
from hycache.engine.sampling import Sampling, greedy_pick, make_picker
from hycache.engine.tokenizer import CHAT_TEMPLATE, SPECIAL_TOKENS, train_tokenizer
from hycache.errors import ConfigError
from hycache.serve.sessions import SessionTracker
from hycache.serve.tokenizer import ChatMessage, Detokenizer, TextCodec

from .conftest import ARCH

SRC = Path(__file__).resolve().parents[2] / "src" / "hycache"
WEB = ("fastapi", "uvicorn", "starlette", "prometheus_client", "openai", "httpx", "pydantic")


def test_only_the_serve_package_imports_the_web_stack() -> None:
    """The core stays dependency-free and the engine never reaches up into the server."""
    import ast

    bad = []
    for path in SRC.rglob("*.py"):
        part = path.relative_to(SRC).parts[0]
        if part == "serve":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for name in names:
                top = name.split(".")[0]
                if top in WEB or (name.startswith("hycache.serve") and part != "cli"):
                    bad.append(f"{path.relative_to(SRC)} imports {name}")
    assert bad == []


def test_init_model_writes_a_real_tokenizer(model_dir: Path) -> None:
    codec = TextCodec.load(model_dir, 1024)
    text = "Hello world: the cache keeps 42 pages. Ünïcödé ✓"
    ids = codec.encode(text)
    assert ids and all(0 <= t < 1024 for t in ids)
    assert codec.decode(ids) == text
    assert codec.stop_ids(chat=True) == (2, 4) and codec.stop_ids(chat=False) == (2,)
    config = json.loads((model_dir / "tokenizer_config.json").read_text())
    assert config["chat_template"] == CHAT_TEMPLATE and config["eos_token"] == SPECIAL_TOKENS[2]


def test_tokenizer_training_is_deterministic() -> None:
    a, b = train_tokenizer(1024), train_tokenizer(1024)
    assert a.to_str() == b.to_str()  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match="at least"):
        train_tokenizer(100)


def test_transformers_reads_the_tokenizer_and_its_chat_template(model_dir: Path) -> None:
    pytest.importorskip("jinja2")
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    codec = TextCodec.load(model_dir, 1024)
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi!"}]
    rendered = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    ours = codec.chat_prompt([ChatMessage(m["role"], m["content"]) for m in messages])
    assert rendered == ours
    assert tok.encode(ours, add_special_tokens=False) == codec.encode(ours)


def test_detokenizer_holds_back_stop_strings_and_split_characters(model_dir: Path) -> None:
    codec = TextCodec.load(model_dir, 1024)
    ids = codec.encode("one two three four")
    d = Detokenizer(codec, stops=("three",))
    out = ""
    stopped = False
    for t in ids:
        stopped = d.feed(t)
        out += d.delta()
        if stopped:
            break
    out += d.delta(final=True)
    assert stopped and out == "one two " and d.text == "one two "
    emoji = codec.encode("😀")
    assert len(emoji) > 1  # byte-level: several ids for one character
    d = Detokenizer(codec)
    assert not d.feed(emoji[0]) and d.delta() == ""
    for t in emoji[1:]:
        d.feed(t)
    assert d.delta(final=True) == "😀"


def test_sampling() -> None:
    logits = torch.tensor([0.1, 3.0, 2.9, -1.0], dtype=torch.float64)
    assert make_picker(None)(logits) == greedy_pick(logits) == 1
    assert make_picker(Sampling(temperature=0))(logits) == 1
    draws = [make_picker(Sampling(1.0, 1.0, 7)) for _ in range(2)]
    assert [draws[0](logits) for _ in range(20)] == [draws[1](logits) for _ in range(20)]
    nucleus = make_picker(Sampling(5.0, 0.01, 1))
    assert {nucleus(logits) for _ in range(20)} == {1}
    for bad in ({"temperature": -1}, {"top_p": 0}, {"top_p": 1.5}, {"seed": -1}):
        with pytest.raises(ConfigError):
            Sampling(**bad)  # type: ignore[arg-type]


def _engine(models: Callable[[str], LoadedModel], max_running: int = 2) -> Engine:
    model = models(ARCH)
    cache = build_cache(
        model.spec, model.spec.kv_bytes_per_token * 2048 + model.spec.state_bytes * 16
    )
    return Engine(model, cache, max_running=max_running)


def _prompt(seed: int, n: int = 60) -> tuple[int, ...]:
    rng = random.Random(seed)
    return tuple(rng.randrange(5, 1024) for _ in range(n))


def test_engine_stops_on_a_stop_token_and_on_request(models: Callable[[str], LoadedModel]) -> None:
    engine = _engine(models)
    [free] = engine.run([EngineRequest(_prompt(1), 6)])
    assert free.finish_reason == "length" and len(free.output) == 6
    [stopped] = engine.run([EngineRequest(_prompt(1), 6, stop_token_ids=(free.output[2],))])
    assert stopped.output == free.output[:3] and stopped.finish_reason == "stop"
    seen: list[int] = []

    def on_token(result: RequestResult, token: int) -> bool:
        seen.append(token)
        return len(result.output) == 2

    engine.on_token = on_token
    [early] = engine.run([EngineRequest(_prompt(1), 6)])
    assert early.output == free.output[:2] == seen and early.finish_reason == "stop"
    engine.cache.check_integrity()


class _Collect:
    def __init__(self) -> None:
        self.tokens: list[int] = []
        self.result: RequestResult | None = None
        self.first = threading.Event()
        self.done = threading.Event()

    def on_token(self, result: RequestResult, token: int) -> bool:
        self.tokens.append(token)
        self.first.set()
        return False

    def on_end(self, result: RequestResult) -> None:
        self.result = result
        self.done.set()


def test_online_engine_queue_bound_abort_and_drain(models: Callable[[str], LoadedModel]) -> None:
    engine = _engine(models, max_running=1)
    online = OnlineEngine(engine, max_queue=1)
    long, queued, extra = _Collect(), _Collect(), _Collect()
    online.start()
    online.submit(EngineRequest(_prompt(2), 500, rid="long"), long)
    assert long.first.wait(30)
    online.submit(EngineRequest(_prompt(3), 3, rid="queued"), queued)
    with pytest.raises(Overloaded):
        online.submit(EngineRequest(_prompt(4), 3, rid="extra"), extra)
    online.abort("long")
    assert long.done.wait(30) and long.result is not None
    assert long.result.status == "aborted" and len(long.tokens) < 500
    assert queued.done.wait(30) and queued.result is not None
    assert queued.result.status == "done" and queued.result.output == queued.tokens
    stats = online.call(lambda e: e.cache.stats())
    assert stats.aborts == 1
    online.call(lambda e: e.cache.check_integrity())
    assert online.call(lambda e: e.cache.requests_in_flight()) == 0
    online.submit(EngineRequest(_prompt(5), 3, rid="last"), extra)
    assert online.shutdown(drain=True, timeout=30)
    assert extra.result is not None and extra.result.status == "done"  # drained, not dropped
    with pytest.raises(Draining):
        online.submit(EngineRequest(_prompt(6), 3, rid="late"), _Collect())


def test_sessions_end_after_the_gap_only_when_idle() -> None:
    now = [0.0]
    tracker = SessionTracker(10.0, clock=lambda: now[0])
    ended: list[str] = []
    tracker.begin("a")
    tracker.begin("b")
    tracker.end("b")
    now[0] = 11.0
    assert tracker.expire(ended.append) == 1 and ended == ["b"]
    tracker.end("a")
    now[0] = 15.0
    assert tracker.expire(ended.append) == 0  # a ended 4 s ago
    now[0] = 30.0
    assert tracker.expire(ended.append) == 1 and ended == ["b", "a"] and tracker.active() == 0
    assert SessionTracker.pick("hdr", "user") == "hdr" and SessionTracker.pick(None, "u") == "u"
    with pytest.raises(ConfigError):
        SessionTracker.pick(" ", None)
