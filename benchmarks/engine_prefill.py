"""Cold vs warm prefill on a real hybrid model: the compute a prefix-cache hit saves.

A Qwen3-Next-shaped model (8 layers: 6 Gated DeltaNet + 2 gated full attention, MoE MLPs,
hidden size 256; random weights written by ``hycache init-model`` and loaded through
transformers) on CPU. The prompt has 4,096 tokens; its first 3,584 are cached (KV pages plus
the recurrent state at 3,584, put there by an earlier request through the hycache preset).

* cold: one prefill of all 4,096 tokens from an empty cache;
* warm: ``Engine`` admits the prompt, restores the KV of 3,584 tokens and the state at 3,584
  (copy-on-write), and prefills the remaining 512 tokens.

The ideal ratio is 4096 / 512 = 8 (attention over the cached keys and the restore make it
lower). Usage: ``python benchmarks/engine_prefill.py [--repeat 3] [--threads N]``.

Measured (2-core CPU, 1 thread, median of 3): cold 1.0-1.5 s, warm 0.16-0.26 s: 5.9-6.4x.
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
from pathlib import Path

PROMPT = 4096
CACHED = 3584


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=3, help="timed runs (median reported)")
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads (0: torch's default; one is the steadiest on a small shared CPU)",
    )
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--hidden", type=int, default=256)
    args = parser.parse_args()

    import torch

    from hycache.cache.presets import build_cache
    from hycache.engine.archs import init_model
    from hycache.engine.engine import Engine, EngineRequest
    from hycache.engine.model import load_model

    if args.threads:
        torch.set_num_threads(args.threads)
    rng = random.Random(0)
    with tempfile.TemporaryDirectory() as tmp:
        directory = init_model(
            "qwen3_next", Path(tmp) / "m", layers=args.layers, hidden=args.hidden, seed=0
        )
        model = load_model(directory)
    spec = model.spec
    prompt = tuple(rng.randrange(3, model.vocab_size) for _ in range(PROMPT))
    capacity = spec.kv_bytes_per_token * 3 * PROMPT + spec.state_bytes * 16

    def warm_once() -> tuple[float, int, torch.Tensor]:
        cache = build_cache(spec, capacity, "hycache")
        engine = Engine(model, cache)
        # an earlier request leaves the prefix and the state at 3,584 (its prompt end)
        engine.run([EngineRequest((*prompt[:CACHED], prompt[CACHED]), 1)])
        (result,) = engine.run([EngineRequest(prompt, 1)])
        return result.prefill_s, result.hit, result.logits[0]

    def cold_once() -> tuple[float, torch.Tensor]:
        engine = Engine(model, build_cache(spec, capacity, "hycache"))
        result = engine.run_cold(prompt, 1)
        return result.prefill_s, result.logits[0]

    cold_once()  # warm up allocator and kernels
    colds, warms = [], []
    hit = 0
    delta = 0.0
    for _ in range(args.repeat):
        cold_s, cold_logits = cold_once()
        warm_s, hit, warm_logits = warm_once()
        colds.append(cold_s)
        warms.append(warm_s)
        delta = max(delta, float((cold_logits - warm_logits).abs().max()))
    cold, warm = statistics.median(colds), statistics.median(warms)
    print(
        f"model: qwen3_next-shaped, {args.layers} layers, hidden {args.hidden}, "
        f"{torch.get_num_threads()} CPU thread(s), float32"
    )
    print(f"prompt {PROMPT} tokens, cached prefix {CACHED} (reused by the engine: {hit})")
    print(f"{'':8}{'prefill s':>10}  runs")
    print(f"{'cold':8}{cold:10.3f}  " + " ".join(f"{x:.3f}" for x in colds))
    print(f"{'warm':8}{warm:10.3f}  " + " ".join(f"{x:.3f}" for x in warms))
    print(
        f"speedup {cold / warm:.2f}x (ideal {PROMPT}/{PROMPT - CACHED} = "
        f"{PROMPT / (PROMPT - CACHED):.1f}x); last-token logits max |delta| {delta:.1e}"
    )


if __name__ == "__main__":
    main()
