"""A real client against ``hycache serve``: multi-turn chats, TTFT, throughput, KV vs state hits.

For each preset (default: all four) the script starts ``hycache serve`` on a free loopback
port with the same tiny checkpoint (written once by ``hycache init-model``), replays a
multi-turn workload with the ``openai`` client, reads the server's own counters back from
``/metrics``, stops the server with SIGTERM (it must exit 0) and prints one row per preset:

* ``ttft p50/p95``: client-side, request sent to first streamed chunk (the server streams
  once the first token exists);
* ``tok/s``, ``req/s``: generated tokens and finished requests over the run's wall time;
* ``kv hit``, ``state hit``: ``hycache:prefix_cache_hits_total{kind}`` over
  ``hycache:prefix_cache_queries_total``: what attention matched vs what was really reused;
* ``recomp``: KV-matched tokens recomputed (``hycache:recomputed_tokens_total``).

Workload: ``--sessions`` chats run concurrently; each picks one of two shared system prompts
and sends ``--turns`` user messages, each after ``--think`` seconds, the history growing with
the assistant's answers; streaming, greedy, ``--max-tokens`` per answer. Bounded: at most
``--requests`` requests and ``--duration`` seconds per preset (no new turn after that).
``--url`` drives one server already running instead (loopback addresses only).

Usage: ``python benchmarks/serve_load.py [--policies vllm,sglang,marconi,hycache]
[--sessions 8] [--turns 6] [--max-tokens 16]``.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

HOST = "127.0.0.1"
POLICIES = ("vllm", "sglang", "marconi", "hycache")
MODEL = "bench"


@dataclass
class Run:
    """What one preset's run measured."""

    policy: str
    ttft: list[float] = field(default_factory=list)
    tokens: int = 0
    requests: int = 0
    errors: int = 0
    wall: float = 0.0
    metrics: dict[str, float] = field(default_factory=dict)


def _loopback(url: str) -> str:
    host = urlparse(url).hostname or ""
    try:
        ok = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        ok = False
    if not ok:
        raise SystemExit(f"serve_load: {url}: only loopback servers may be load-tested")
    return url.rstrip("/")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


def _sentence(rng: random.Random, low: int, high: int) -> str:
    from hycache.engine.tokenizer import WORDS

    return " ".join(rng.choice(WORDS) for _ in range(rng.randrange(low, high))) + "."


def _metrics(url: str) -> dict[str, float]:
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    wanted = {
        ("hycache:prefix_cache_queries_total", ""): "queries",
        ("hycache:prefix_cache_hits_total", "kv"): "kv",
        ("hycache:prefix_cache_hits_total", "state"): "state",
        ("hycache:recomputed_tokens_total", ""): "recomputed",
    }
    out: dict[str, float] = {}
    text = httpx.get(f"{url}/metrics", timeout=30).text
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            key = wanted.get((s.name, s.labels.get("kind", "")))
            if key is not None:
                out[key] = s.value
    return out


def _chat(
    url: str,
    model: str,
    k: int,
    args: argparse.Namespace,
    run: Run,
    stop_at: float,
    budget: threading.Semaphore,
    systems: list[str],
    lock: threading.Lock,
) -> None:
    import openai

    client = openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=3, timeout=120)
    rng = random.Random(f"serve-load/{args.seed}/{k}")
    messages: list[Any] = [{"role": "system", "content": systems[k % len(systems)]}]
    for _ in range(args.turns):
        if time.monotonic() > stop_at or not budget.acquire(blocking=False):
            return
        messages.append({"role": "user", "content": _sentence(rng, 12, 40)})
        sent = time.monotonic()
        first: float | None = None
        parts: list[str] = []
        tokens = 0
        try:
            stream = client.chat.completions.create(
                model=model,
                messages=messages,
                max_tokens=args.max_tokens,
                temperature=0,
                stream=True,
                user=f"session-{k}",
            )
            for chunk in stream:
                if first is None:
                    first = time.monotonic()
                if chunk.choices:
                    parts.append(chunk.choices[0].delta.content or "")
                    tokens += len((chunk.choices[0].model_extra or {}).get("token_ids", []))
        except openai.OpenAIError as exc:
            with lock:
                run.errors += 1
            print(f"  session {k}: {type(exc).__name__}: {exc}", file=sys.stderr)
            return
        with lock:
            run.requests += 1
            run.tokens += tokens
            if first is not None:
                run.ttft.append(first - sent)
        messages.append({"role": "assistant", "content": "".join(parts)})
        time.sleep(args.think)


def drive(url: str, model: str, policy: str, args: argparse.Namespace) -> Run:
    """Replay the workload against ``url``; the server's counters as deltas over the run."""
    run = Run(policy)
    rng = random.Random(f"serve-load/{args.seed}")
    systems = [" ".join(_sentence(rng, 20, 30) for _ in range(8)) for _ in range(2)]
    before = _metrics(url)
    budget = threading.Semaphore(args.requests)
    lock = threading.Lock()
    started = time.monotonic()
    stop_at = started + args.duration
    with ThreadPoolExecutor(max_workers=args.sessions) as pool:
        futures = [
            pool.submit(_chat, url, model, k, args, run, stop_at, budget, systems, lock)
            for k in range(args.sessions)
        ]
        for f in futures:
            f.result()
    run.wall = time.monotonic() - started
    after = _metrics(url)
    run.metrics = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}
    return run


def serve_and_drive(model_dir: Path, policy: str, args: argparse.Namespace) -> Run:
    port = _free_port()
    url = f"http://{HOST}:{port}"
    argv = [sys.executable, "-m", "hycache.cli.main", "serve", "--model", str(model_dir)]
    argv += ["--served-model-name", MODEL, "--policy", policy, "--port", str(port)]
    argv += ["--max-running", str(args.max_running), "--log-level", "warning"]
    argv += ["--threads", str(args.threads)]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        import httpx

        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None:
                raise SystemExit(f"serve_load: the {policy} server died: {proc.stderr}")
            if time.monotonic() > deadline:
                raise SystemExit(f"serve_load: the {policy} server did not come up")
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.2)
        return drive(url, MODEL, policy, args)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                code = proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                code = proc.wait(10)
            if code != 0:
                print(f"serve_load: the {policy} server exited {code}", file=sys.stderr)


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def table(runs: list[Run]) -> str:
    header = (
        "policy",
        "requests",
        "errors",
        "ttft p50 ms",
        "ttft p95 ms",
        "tok/s",
        "req/s",
        "kv hit",
        "state hit",
        "recomp tok",
    )
    rows = []
    for r in runs:
        m = r.metrics
        queries = m.get("queries", 0.0) or 1.0
        rows.append(
            (
                r.policy,
                str(r.requests),
                str(r.errors),
                f"{1000 * statistics.median(r.ttft):.0f}" if r.ttft else "-",
                f"{1000 * _pct(r.ttft, 0.95):.0f}" if r.ttft else "-",
                f"{r.tokens / r.wall:.1f}",
                f"{r.requests / r.wall:.2f}",
                f"{m.get('kv', 0.0) / queries:.3f}",
                f"{m.get('state', 0.0) / queries:.3f}",
                f"{m.get('recomputed', 0.0):.0f}",
            )
        )
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(h.rjust(w) for h, w in zip(header, widths, strict=True))]
    lines += ["  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)) for row in rows]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--policies", default=",".join(POLICIES))
    parser.add_argument("--url", help="drive this running (loopback) server instead")
    parser.add_argument("--model", default=MODEL, help="model name with --url")
    parser.add_argument("--arch", default="qwen3_5")
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--sessions", type=int, default=8, help="concurrent chats")
    parser.add_argument("--turns", type=int, default=6, help="user messages per chat")
    parser.add_argument("--think", type=float, default=0.2, help="seconds between turns")
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--max-running", type=int, default=4)
    parser.add_argument("--requests", type=int, default=200, help="bound per preset")
    parser.add_argument("--duration", type=float, default=120.0, help="bound per preset, s")
    parser.add_argument("--threads", type=int, default=1, help="the server's torch threads")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.url:
        runs = [drive(_loopback(args.url), args.model, "(running)", args)]
    else:
        from hycache.engine.archs import init_model

        policies = [p.strip() for p in args.policies.split(",") if p.strip()]
        runs = []
        with tempfile.TemporaryDirectory(prefix="serve-load-") as tmp:
            model_dir = init_model(
                args.arch, Path(tmp) / args.arch, layers=args.layers, hidden=args.hidden
            )
            for policy in policies:
                print(f"{policy}: serving and driving ...", file=sys.stderr, flush=True)
                runs.append(serve_and_drive(model_dir, policy, args))
    print(
        f"model: tiny {args.arch} ({args.layers} layers, hidden {args.hidden}), "
        f"{args.sessions} sessions x {args.turns} turns, max_tokens {args.max_tokens}, "
        f"max_running {args.max_running}, {os.cpu_count()} CPUs"
    )
    print(table(runs))


if __name__ == "__main__":
    main()
