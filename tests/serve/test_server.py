"""A real server, a real client: outputs, cached tokens, streaming, stress, metrics."""

from __future__ import annotations

import json
import random
import re
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from hycache.cache.presets import build_cache
from hycache.engine.engine import Engine, EngineRequest
from hycache.engine.sampling import Sampling
from hycache.serve.runtime import default_capacity

from .conftest import MODEL, Served

TEXT = (
    "You are a careful assistant. The cache keeps pages of attention and states of the "
    "recurrent layers; tell me what the model would reuse for this request. "
)
#: several of the vllm preset's blocks long, so that a state sits below its last token
LONG_TEXT = 4 * TEXT


def _ids(rng: random.Random, n: int) -> list[int]:
    return [rng.randrange(5, 1024) for _ in range(n)]


def _tokens(choice: Any) -> list[int]:
    tokens: list[int] = choice.model_extra["token_ids"]
    return tokens


def test_same_greedy_request_twice_is_identical_and_reuses(served: Served) -> None:
    client = served.client
    first = client.completions.create(model=MODEL, prompt=LONG_TEXT, max_tokens=8, temperature=0)
    second = client.completions.create(model=MODEL, prompt=LONG_TEXT, max_tokens=8, temperature=0)
    assert _tokens(first.choices[0]) == _tokens(second.choices[0])
    assert first.choices[0].text == second.choices[0].text
    assert second.usage is not None and second.usage.prompt_tokens_details is not None
    cached = second.usage.prompt_tokens_details.cached_tokens
    assert cached is not None and 0 < cached < second.usage.prompt_tokens
    assert second.usage.completion_tokens == len(_tokens(second.choices[0]))
    served.settle()


def test_streaming_and_not_agree(served: Served) -> None:
    client = served.client
    whole = client.completions.create(
        model=MODEL, prompt=TEXT + " Stream it.", max_tokens=12, temperature=0
    )
    parts = list(
        client.completions.create(
            model=MODEL,
            prompt=TEXT + " Stream it.",
            max_tokens=12,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    streamed = [t for p in parts if p.choices for t in _tokens(p.choices[0])]
    assert streamed == _tokens(whole.choices[0])
    assert "".join(p.choices[0].text for p in parts if p.choices) == whole.choices[0].text
    assert parts[-1].usage is not None and whole.usage is not None
    assert parts[-1].usage.prompt_tokens == whole.usage.prompt_tokens

    messages: Any = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": TEXT}]
    chat = client.chat.completions.create(
        model=MODEL, messages=messages, max_tokens=10, temperature=0
    )
    chunks = list(
        client.chat.completions.create(
            model=MODEL, messages=messages, max_tokens=10, temperature=0, stream=True
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == chat.choices[0].message.content
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[-1].choices[0].finish_reason == chat.choices[0].finish_reason
    served.settle()


def test_server_outputs_equal_the_offline_engine(served: Served) -> None:
    """Greedy and seeded requests through HTTP give the tokens the offline engine gives."""
    rng = random.Random(3)
    shared = _ids(rng, 40)
    cases = [
        (shared + _ids(rng, 20), 6, None),
        (shared + _ids(rng, 33), 5, None),
        (_ids(rng, 70), 6, Sampling(0.8, 0.9, 11)),
        (shared + _ids(rng, 20), 4, Sampling(1.2, 1.0, 5)),
    ]
    got = []
    for prompt, max_tokens, sampling in cases:
        extra: dict[str, Any] = {"temperature": 0}
        if sampling is not None:
            extra = {"temperature": sampling.temperature, "top_p": sampling.top_p}
            extra["seed"] = sampling.seed
        reply = served.client.completions.create(
            model=MODEL, prompt=prompt, max_tokens=max_tokens, **extra
        )
        got.append(_tokens(reply.choices[0]))
    runtime = served.runtime
    model = runtime.model
    config = runtime.config
    knobs: dict[str, Any] = dict(config.knobs)
    cache = build_cache(model.spec, default_capacity(model.spec), config.policy, **knobs)
    stops = runtime.codec.stop_ids(chat=False)
    requests = [
        EngineRequest(tuple(p), m, rid=str(i), sampling=s, stop_token_ids=stops)
        for i, (p, m, s) in enumerate(cases)
    ]
    offline = sorted(Engine(model, cache).run(requests), key=lambda r: int(r.request.rid))
    assert got == [r.output for r in offline]
    again = served.client.completions.create(
        model=MODEL, prompt=cases[2][0], max_tokens=6, temperature=0.8, top_p=0.9, seed=11
    )
    assert _tokens(again.choices[0]) == got[2]  # seeded: reproducible


def _raw(served: Served, path: str, body: bytes | dict[str, Any]) -> httpx.Response:
    if isinstance(body, bytes):
        headers = {"content-type": "application/json"}
        return httpx.post(f"{served.url}{path}", content=body, headers=headers, timeout=30)
    return httpx.post(f"{served.url}{path}", json=body, timeout=30)


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b'{"model": "tiny", "prompt": ', "not valid JSON"),
        ({"model": "gpt-9", "prompt": "hi"}, "does not exist"),
        ({"model": MODEL, "prompt": [7] * 600}, "maximum context length"),
        ({"model": MODEL, "prompt": "hi", "max_tokens": -3}, "at least 1"),
        ({"model": MODEL, "prompt": "hi", "max_tokens": 10**9}, "maximum context length"),
        ({"model": MODEL, "prompt": "hi", "max_tokens": "many"}, "max_tokens"),
        ({"model": MODEL, "prompt": [5, 99999]}, "outside the vocabulary"),
        ({"model": MODEL, "prompt": "hi", "n": 3}, "n=3"),
        ({"model": MODEL, "prompt": "hi", "temperature": -1}, "temperature"),
    ],
)
def test_bad_requests_answer_400_with_the_reason(
    served: Served, body: bytes | dict[str, Any], reason: str
) -> None:
    response = _raw(served, "/v1/completions", body)
    assert response.status_code == 400, response.text
    assert reason in response.json()["error"]["message"]
    served.settle()


def test_bad_requests_through_the_client(served: Served) -> None:
    client = served.client
    with pytest.raises(openai.BadRequestError, match="does not exist"):
        client.chat.completions.create(model="nope", messages=[{"role": "user", "content": "x"}])
    with pytest.raises(openai.BadRequestError, match="max_completion_tokens"):
        client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "x"}], max_completion_tokens=0
        )
    served.settle()


def test_client_disconnect_mid_stream_aborts_and_frees(served: Served) -> None:
    before = served.metrics().get(("hycache:requests_aborted_total", ()), 0.0)
    body = {"model": MODEL, "prompt": TEXT, "max_tokens": 400, "stream": True, "temperature": 0}
    with httpx.stream("POST", f"{served.url}/v1/completions", json=body, timeout=30) as r:
        assert r.status_code == 200
        lines = r.iter_lines()
        assert next(line for line in lines if line.startswith("data:"))
    deadline = time.monotonic() + 10
    while served.metrics().get(("hycache:requests_aborted_total", ()), 0.0) == before:
        assert time.monotonic() < deadline, "the request was not aborted"
        time.sleep(0.05)
    check = served.settle()
    assert check["requests_in_flight"] == 0
    assert check["live_tensor_bytes"] <= check["used_bytes"] <= check["budget_bytes"]


def test_a_full_queue_answers_429_with_retry_after(sglang_served: Served) -> None:
    served = sglang_served
    online = served.runtime.online
    body = {"model": MODEL, "prompt": TEXT, "max_tokens": 400, "stream": True, "temperature": 0}
    queued: list[httpx.Response] = []
    with httpx.stream("POST", f"{served.url}/v1/completions", json=body, timeout=60) as long:
        assert long.status_code == 200  # streaming: it runs now
        waiter = threading.Thread(
            target=lambda: queued.append(
                _raw(served, "/v1/completions", {"model": MODEL, "prompt": "hi", "max_tokens": 2})
            )
        )
        waiter.start()
        deadline = time.monotonic() + 10
        while online.queued < 1:
            assert time.monotonic() < deadline, "the second request never queued"
            time.sleep(0.01)
        with pytest.raises(openai.RateLimitError) as caught:
            served.client.completions.create(model=MODEL, prompt="hi", max_tokens=2)
        assert int(caught.value.response.headers["retry-after"]) >= 1
    waiter.join(30)  # the long stream was closed: aborted; the queued one runs
    assert queued and queued[0].status_code == 200
    served.settle()
    samples = served.metrics()
    assert samples[("hycache:requests_rejected_total", (("reason", "queue_full"),))] >= 1


def test_sessions_end_after_an_idle_gap(served: Served) -> None:
    client = served.client
    before = served.metrics()[("hycache:sessions_ended_total", ())]
    client.completions.create(model=MODEL, prompt=TEXT, max_tokens=2, user="alice")
    client.with_options(default_headers={"X-Session-Id": "bob"}).completions.create(
        model=MODEL, prompt=TEXT, max_tokens=2
    )
    deadline = time.monotonic() + 10
    while served.metrics()[("hycache:sessions_ended_total", ())] < before + 2:
        assert time.monotonic() < deadline, "idle sessions were not ended"
        time.sleep(0.1)
    assert "alice" not in served.runtime.cache.notes.live_sessions
    served.settle()


def test_metrics_parse_and_show_the_sparse_checkpoint_signature(sglang_served: Served) -> None:
    """Multi-turn chats after a shared system prompt on sglang: states are reused (turn n+1
    resumes from turn n's prompt end) but far less than attention matched (the shared system
    prompt has KV and no state): state hits > 0 and below KV hits."""
    served = sglang_served
    client = served.client
    system = {"role": "system", "content": TEXT}
    chats: list[list[Any]] = [[system] for _ in range(3)]
    for turn in range(3):
        for k, messages in enumerate(chats):
            messages.append({"role": "user", "content": f"Question {turn} of chat {k}: why?"})
            reply = client.chat.completions.create(
                model=MODEL, messages=messages, max_tokens=6, temperature=0, user=f"chat-{k}"
            )
            messages.append({"role": "assistant", "content": reply.choices[0].message.content})
    samples = served.metrics()
    kv = samples[("hycache:prefix_cache_hits_total", (("kind", "kv"),))]
    state = samples[("hycache:prefix_cache_hits_total", (("kind", "state"),))]
    queries = samples[("hycache:prefix_cache_queries_total", ())]
    recomputed = samples[("hycache:recomputed_tokens_total", ())]
    assert 0 < state < kv <= queries
    assert recomputed == kv - state
    assert samples[("hycache:time_to_first_token_seconds_count", ())] >= 9
    assert samples[("hycache:request_prefill_tokens_count", ())] >= 9
    assert ("hycache:cache_usage_bytes", (("kind", "state"), ("tier", "device"))) in samples
    assert any(name == "hycache:checkpoints_total" for name, _ in samples)
    resumed = sum(v for (name, _), v in samples.items() if name == "hycache:state_hits_total")
    assert resumed >= 1  # later turns resumed from the state an earlier turn left
    assert any(name == "hycache:checkpoints_skipped_total" for name, _ in samples)
    served.settle()


def test_models_and_health(served: Served) -> None:
    models = served.client.models.list()
    assert [m.id for m in models.data] == [MODEL]
    assert httpx.get(f"{served.url}/health").json() == {"status": "ok"}
    missing = httpx.get(f"{served.url}/v1/nothing")
    assert missing.status_code == 404 and "error" in missing.json()


def test_the_dashboard_queries_only_metrics_the_server_exports(served: Served) -> None:
    root = Path(__file__).resolve().parents[2] / "deploy"
    dashboard = json.loads((root / "grafana" / "hycache-dashboard.json").read_text())
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    queried = {m for e in exprs for m in re.findall(r"hycache:[a-z_]+", e)}
    exported = {name for name, _ in served.metrics()}
    assert queried and queried <= exported, queried - exported
    assert "metrics_path: /metrics" in (root / "prometheus.yml").read_text()
