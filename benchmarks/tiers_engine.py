"""Warm prefill served from the tiers vs cold, on the engine_prefill model.

The model and prompt of ``benchmarks/engine_prefill.py`` (qwen3_next-shaped, 8 layers, hidden
256; a 4,096-token prompt whose first 3,584 tokens were computed by an earlier request). The
earlier request runs on one engine whose tiers take everything it computes (write-through);
the measured request runs on a fresh engine with an empty device cache over:

* ``host``: the same host tier (CPU tensors);
* ``redis``: a Redis tier only (a ``redis-server`` this script starts on a free loopback
  port, or ``--redis URL``), as a second instance would see it;

and, for reference, ``device`` (the earlier request on the same device cache) and ``cold``.
Per row: prefill seconds (loading included; median of ``--repeat``), the bytes read from the
tier, and the speedup over cold. Usage: ``python benchmarks/tiers_engine.py [--repeat 3]``.
"""

from __future__ import annotations

import argparse
import random
import shutil
import socket
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

PROMPT = 4096
CACHED = 3584


def start_redis(directory: Path) -> tuple[subprocess.Popen[bytes], str]:
    if shutil.which("redis-server") is None:
        raise SystemExit("redis-server is missing: apt-get install -y redis-server")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    args = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", ""]
    args += ["--appendonly", "no", "--dir", str(directory)]
    server = subprocess.Popen(args, stdout=subprocess.DEVNULL)
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
            break
        except OSError:
            time.sleep(0.05)
    return server, f"redis://127.0.0.1:{port}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--redis", help="an existing Redis URL (default: start one)")
    args = parser.parse_args()

    import torch

    from hycache.cache.presets import build_cache
    from hycache.engine.archs import init_model
    from hycache.engine.engine import Engine, EngineRequest
    from hycache.engine.model import load_model
    from hycache.engine.tiers.chain import TierChain
    from hycache.engine.tiers.config import TierSettings, build_chain
    from hycache.engine.tiers.fingerprint import model_identity

    torch.set_num_threads(args.threads)
    rng = random.Random(0)
    tmp = Path(tempfile.mkdtemp(prefix="hycache-tiers-bench-"))
    server = None
    url = args.redis
    if url is None:
        server, url = start_redis(tmp)
    try:
        model = load_model(init_model("qwen3_next", tmp / "m", layers=8, hidden=256, seed=0))
        spec = model.spec
        prompt = tuple(rng.randrange(3, model.vocab_size) for _ in range(PROMPT))
        earlier = EngineRequest((*prompt[:CACHED], prompt[CACHED]), 1)
        capacity = spec.kv_bytes_per_token * 3 * PROMPT + spec.state_bytes * 16
        page = build_cache(spec, capacity, "hycache").page_size
        identity = model_identity(model, page)
        rows: dict[str, list[float]] = {"cold": [], "device": [], "host": [], "redis": []}
        moved: dict[str, int] = dict.fromkeys(rows, 0)
        reused: dict[str, int] = {}
        delta = 0.0

        def fresh(tiers: Any = None) -> Engine:
            return Engine(model, build_cache(spec, capacity, "hycache"), tiers=tiers)

        def timed(name: str, engine: Engine) -> None:
            nonlocal delta
            tiers = engine.tiers
            before = {} if tiers is None else {n: c.bytes_read for n, c in tiers.counters().items()}
            (result,) = engine.run([EngineRequest(prompt, 1)])
            if tiers is not None:
                after = tiers.counters()
                moved[name] = sum(c.bytes_read - before[n] for n, c in after.items())
            reused[name] = result.hit + result.tier_tokens
            cold = engine.run_cold(prompt, 1)
            delta = max(delta, float((cold.logits[0] - result.logits[0]).abs().max()))
            rows[name].append(result.prefill_s)

        fresh().run_cold(prompt, 1)  # warm up allocator and kernels
        for i in range(args.repeat):
            rows["cold"].append(fresh().run_cold(prompt, 1).prefill_s)
            device = fresh()
            device.run([earlier])
            timed("device", device)
            settings = TierSettings(1 << 30, 0, url)
            prefix = f"bench-{time.time_ns()}-{i}"
            writer = build_chain(settings, identity, prefix=prefix, writer="earlier")
            fresh(writer).run([earlier])  # host and Redis take what it computed
            host_only = TierChain([writer.backends[0]], identity)
            timed("host", fresh(host_only))
            redis_only = build_chain(TierSettings(0, 0, url), identity, prefix=prefix)
            timed("redis", fresh(redis_only))
            redis_only.clear()
            redis_only.close()
            writer.close()
        cold = statistics.median(rows["cold"])
        print(f"model: qwen3_next-shaped, 8 layers, hidden 256, {args.threads} CPU thread(s)")
        print(f"prompt {PROMPT} tokens, {CACHED} computed earlier; device page {page} token(s)")
        header = f"{'served from':12}{'prefill s':>10}{'reused tok':>12}{'bytes moved':>13}"
        print(header + f"{'speedup':>9}  runs")
        for name, runs in rows.items():
            median = statistics.median(runs)
            print(
                f"{name:12}{median:10.3f}{reused.get(name, 0):12d}{moved[name]:13d}"
                f"{cold / median:8.2f}x  " + " ".join(f"{x:.3f}" for x in runs)
            )
        print(f"last-token logits max |delta| vs cold {delta:.1e}")
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=10)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
