"""``hycache init-model`` and ``hycache verify``: the engine's subcommands.

``register(subparsers)`` adds both to the ``hycache`` parser. Nothing here imports torch until
one of them runs (the commands import the engine modules lazily).

Exit codes: 0 success, 1 verify found a difference, 2 bad input (HycacheError, printed by
``hycache.cli.main.main`` as ``hycache: error: ...``).
"""

from __future__ import annotations

import argparse
from typing import Any

from hycache.cli.units import parse_size
from hycache.errors import ConfigError

INJECT_CHOICES = ("late-snapshot", "off-grid", "stale-tail")


def _parse_knobs(items: list[str]) -> dict[str, dict[str, object]]:
    knobs: dict[str, dict[str, object]] = {}
    for item in items:
        name, sep, value = item.partition("=")
        policy, dot, knob = name.partition(".")
        if not sep or not dot or not policy or not knob:
            raise ConfigError(f"--knob {item!r}: expected POLICY.KNOB=VALUE")
        knobs.setdefault(policy, {})[knob] = value
    return knobs


def cmd_init_model(args: argparse.Namespace) -> int:
    from hycache.engine.archs import init_model, tiny_config_dict

    tiny_config_dict(args.arch, layers=args.layers, hidden=args.hidden)  # typed errors first
    out = init_model(args.arch, args.out, layers=args.layers, hidden=args.hidden, seed=args.seed)
    print(
        f"wrote {out}: tiny random {args.arch} ({args.layers} layers, hidden {args.hidden}, "
        f"seed {args.seed}): config.json + model.safetensors"
    )
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    from hycache.engine.archs import VERIFIED_ARCHS, get_arch
    from hycache.engine.model import require_engine
    from hycache.engine.verify import POLICIES, run_verify, split_list
    from hycache.engine.workloads import WORKLOADS

    require_engine()
    import torch

    if args.threads < 1:
        raise ConfigError(f"--threads must be >= 1, got {args.threads}")
    torch.set_num_threads(args.threads)
    archs = split_list(args.arch, VERIFIED_ARCHS, "arch")
    if args.model is None:
        for arch in archs:
            get_arch(arch)
    elif len(archs) != 1:
        raise ConfigError("--model verifies one checkpoint: give a single --arch label")
    policies = split_list(args.policy, POLICIES, "policy")
    workloads = split_list(args.workload, WORKLOADS, "workload")
    for name, value in (("requests", args.requests), ("chunk", args.chunk)):
        if value < 1:
            raise ConfigError(f"--{name} must be >= 1, got {value}")
    if args.concurrency < 1:
        raise ConfigError(f"--concurrency must be >= 1, got {args.concurrency}")
    capacity = parse_size(args.capacity) if args.capacity is not None else None
    outcome = run_verify(
        archs,
        policies,
        workloads,
        requests=args.requests,
        seed=args.seed,
        dtype=args.dtype,
        inject=args.inject,
        capacity=capacity,
        tolerance=args.tolerance,
        chunk=args.chunk,
        max_running=args.concurrency,
        layers=args.layers,
        hidden=args.hidden,
        model_dir=args.model,
        check_owners=not args.no_owner_check,
        knobs=_parse_knobs(args.knob),
    )
    return outcome.exit_code


def register(subparsers: Any) -> None:
    """Add ``init-model`` and ``verify`` to ``subparsers`` (from ``add_subparsers``)."""
    init = subparsers.add_parser(
        "init-model",
        help="write a tiny random checkpoint of a hybrid architecture (needs [engine])",
        description="Write config.json + model.safetensors of a tiny random model built with "
        "the architecture's transformers configuration class.",
    )
    init.add_argument(
        "--arch",
        required=True,
        help="qwen3_next, qwen3_5, kimi_linear, nemotron_h, bamba, gemma3, jamba, falcon_h1",
    )
    init.add_argument("--out", required=True, help="directory to write")
    init.add_argument("--layers", type=int, default=4)
    init.add_argument("--hidden", type=int, default=64)
    init.add_argument("--seed", type=int, default=0)
    init.set_defaults(func=cmd_init_model)

    verify = subparsers.add_parser(
        "verify",
        help="check that cache hits compute what cold runs compute, on real models",
        description="Run workloads through tiny real models with the cache and again cold; "
        "compare last-prompt-token logits and greedy continuations. Exit 1 on a difference.",
    )
    verify.add_argument("--arch", default="qwen3_next", help="A[,B] or all")
    verify.add_argument(
        "--policy", default="hycache", help="P[,Q] or all (vllm, sglang, marconi, hycache)"
    )
    verify.add_argument(
        "--workload",
        default="chat",
        help="chat, branching, docqa, sim:NAME; comma-separated or all",
    )
    verify.add_argument("--requests", type=int, default=30)
    verify.add_argument("--seed", type=int, default=0)
    verify.add_argument("--dtype", choices=("float32", "float64"), default="float32")
    verify.add_argument("--inject", choices=INJECT_CHOICES, help="break the hit path on purpose")
    verify.add_argument(
        "--capacity", help="cache budget, e.g. 512KiB (default: ~1,600 tokens of KV + 16 states)"
    )
    verify.add_argument(
        "--tolerance", type=float, help="max |delta| (default 1e-4 float32, 1e-5 float64)"
    )
    verify.add_argument("--chunk", type=int, default=64, help="prefill token budget per chunk")
    verify.add_argument("--concurrency", type=int, default=2, help="requests in flight")
    verify.add_argument("--layers", type=int, default=4)
    verify.add_argument("--hidden", type=int, default=64)
    verify.add_argument("--model", help="verify this checkpoint directory instead of a tiny one")
    verify.add_argument(
        "--knob",
        action="append",
        default=[],
        metavar="POLICY.KNOB=VALUE",
        help="preset knob override, e.g. vllm.block_size=32 (repeatable)",
    )
    verify.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    verify.add_argument(
        "--no-owner-check",
        action="store_true",
        help="do not check owner tags on reads (numbers alone must catch bugs)",
    )
    verify.set_defaults(func=cmd_verify)
