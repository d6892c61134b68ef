"""Replay a Marconi-format trace through the Marconi artifact's own cache code, unmodified.

    ARTIFACT_PYTHON benchmarks/marconi_artifact.py --artifact PATH --trace T.jsonl
        [--capacities 1e9,2e9] [--policies vllm,sglang,marconi,oracle] [--json OUT]

Run it with a Python that has the artifact's imports (``scipy``, ``transformers``, ``numpy``;
see ``benchmarks/marconi_reference.sh``); PATH is a checkout of github.com/ruipeterpan/marconi.
This file holds no code of the artifact: it imports the artifact's ``radix_cache_hybrid`` and
``radix_cache_vllm`` from PATH and drives them request by request the way its
``policy_exploration.py`` does for one configuration (that script runs a fixed sweep over its
own trace files, so it is not called as a whole):

* per request, ``match_prefix(prompt)`` then ``insert(prompt + output)`` with the session id as
  the states, logical timestamps on;
* the artifact's 7B Attention-Mamba2 hybrid (24 SSM, 4 attention and 28 MLP layers,
  d = 4096, n = 128), ``bootstrap_multiplier`` 5 (its ShareGPT setting);
* ``vllm``: vLLM+ (``radix_cache_vllm``, 32-token blocks); ``sglang``: policy V1 (LRU over
  leaves); ``marconi``: V2 (alpha tuned once after the bootstrap window); ``oracle``: V3 at
  every alpha of its grid over the whole trace, the best one in hindsight.

Per run it records the token hit rate, the FLOPs saved, the wall time of the replay, and the
peak of the tree's own byte count (``get_tree_size()`` after each insert, timed apart and not
counted in the wall time) against the capacity.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import json
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

#: Marconi's grid of alphas (its ``eff_weight``): 0, 0.1, ..., 2.0.
ALPHAS = tuple(round(0.1 * i, 1) for i in range(21))
#: Its model: NVIDIA's Attention-Mamba2 hybrid 7B.
MODEL = {"num_ssm_layers": 24, "num_attn_layers": 4, "num_mlp_layers": 28, "d": 4096, "n": 128}
POLICIES = ("vllm", "sglang", "marconi", "oracle")


def load(path: str) -> list[dict[str, Any]]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def replay(
    modules: dict[str, Any],
    requests: Sequence[dict[str, Any]],
    capacity: float,
    policy: str,
    alpha: float = 0.0,
) -> dict[str, float]:
    """One replay; the artifact's prints are swallowed."""
    kwargs: dict[str, Any] = {
        "capacity_bytes": capacity,
        "eff_weight": alpha,
        "use_logical_ts": True,
        "bootstrap_multiplier": 5,
        **MODEL,
    }
    if policy == "vllm":
        tree = modules["vllm"].RadixCache(evict_policy_version=1, block_size=32, **kwargs)
    else:
        version = {"sglang": 1, "marconi": 2, "oracle": 3}[policy]
        tree = modules["hybrid"].RadixCache(evict_policy_version=version, **kwargs)
    peak = 0.0
    measuring = 0.0
    start = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        for request in requests:
            prompt = request["input_tokens"]
            tree.match_prefix(prompt)
            sid = request["session_id"]
            tree.insert(
                token_ids=prompt + request["output_tokens"],
                state_at_leaf=sid,
                state_at_branchoff=sid,
            )
            t0 = time.perf_counter()
            peak = max(peak, float(tree.get_tree_size()))
            measuring += time.perf_counter() - t0
        _, token_hit, mamba, attn, mlp = tree.get_cache_stats(verbose=False)
    wall = time.perf_counter() - start - measuring
    return {
        "token_hit_rate": float(token_hit),
        "flops_saved": float(mamba + attn + mlp),
        "wall_s": wall,
        "peak_bytes": peak,
        "overrun": peak / capacity - 1.0,
        "alpha": float(tree.eff_weight) if policy in ("marconi", "oracle") else 0.0,
    }


def run(
    modules: dict[str, Any],
    requests: Sequence[dict[str, Any]],
    capacity: float,
    policies: Sequence[str],
) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for policy in policies:
        if policy != "oracle":
            out[policy] = replay(modules, requests, capacity, policy)
            continue
        runs = {alpha: replay(modules, requests, capacity, "oracle", alpha) for alpha in ALPHAS}
        best = max(ALPHAS, key=lambda a: (runs[a]["token_hit_rate"], -a))
        out["oracle"] = {
            **runs[best],
            "wall_s": sum(r["wall_s"] for r in runs.values()),
            "peak_bytes": max(r["peak_bytes"] for r in runs.values()),
            "overrun": max(r["overrun"] for r in runs.values()),
            "by_alpha": {str(a): runs[a]["token_hit_rate"] for a in ALPHAS},
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--artifact", required=True, help="checkout of ruipeterpan/marconi")
    parser.add_argument("--trace", required=True, action="append", help="repeatable")
    parser.add_argument("--capacities", default="1e9,2e9,3e9,5e9", help="bytes, comma-separated")
    parser.add_argument("--policies", default=",".join(POLICIES))
    parser.add_argument("--json", help="write {trace: {capacity: {policy: metrics}}} here")
    args = parser.parse_args()
    sys.path.insert(0, os.path.abspath(args.artifact))
    sys.setrecursionlimit(1500)  # as its policy_exploration.py does for vLLM+
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        modules = {
            "hybrid": importlib.import_module("radix_cache_hybrid"),
            "vllm": importlib.import_module("radix_cache_vllm"),
        }
    policies = [p for p in args.policies.split(",") if p]
    unknown = sorted(set(policies) - set(POLICIES))
    if unknown:
        parser.error(f"unknown policies {unknown}; known: {', '.join(POLICIES)}")
    results: dict[str, dict[str, dict[str, dict[str, Any]]]] = {}
    for trace in args.trace:
        requests = load(trace)
        results[trace] = {}
        for text in args.capacities.split(","):
            capacity = float(text)
            cell = run(modules, requests, capacity, policies)
            results[trace][text] = cell
            line = " ".join(
                f"{p} {m['token_hit_rate']:.4f} ({m['wall_s']:.1f}s, +{m['overrun']:.1%})"
                for p, m in cell.items()
            )
            print(f"{os.path.basename(trace)} {capacity / 1e9:g}GB: {line}", flush=True)
            if args.json:
                with open(args.json, "w") as f:
                    json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
