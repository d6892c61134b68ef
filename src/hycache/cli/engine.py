"""``hycache init-model`` and ``hycache verify``: the engine's subcommands.

``register(subparsers)`` adds both to the ``hycache`` parser. Nothing here imports torch until
one of them runs (the commands import the engine modules lazily).

Exit codes: 0 success, 1 verify found a difference, 2 bad input (argparse errors, and
HycacheError printed by ``hycache.cli.main.main`` as ``hycache: error: ...``), 3 the fault
``verify --inject`` asked for never fired (the run proves nothing about it).
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from typing import Any

from hycache.cache.presets import KNOBS
from hycache.cli.knobs import add_knob_option, check_knobs_apply, knob_overrides, policies_arg
from hycache.cli.numbers import non_negative_float, positive_float, positive_int
from hycache.cli.sizes import bytes_arg
from hycache.engine.disagg.base import DISAGG_INJECTS, DisaggSpec
from hycache.engine.faults import INJECTS
from hycache.engine.tiers.config import TIER_INJECTS
from hycache.errors import ConfigError

TINY_LAYERS, TINY_HIDDEN = 4, 64


def cmd_init_model(args: argparse.Namespace) -> int:
    from hycache.engine.archs import init_model, tiny_config_dict

    tiny_config_dict(args.arch, layers=args.layers, hidden=args.hidden)  # typed errors first
    out = init_model(args.arch, args.out, layers=args.layers, hidden=args.hidden, seed=args.seed)
    print(
        f"wrote {out}: tiny random {args.arch} ({args.layers} layers, hidden {args.hidden}, "
        f"seed {args.seed}): config.json + model.safetensors + tokenizer.json"
    )
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    from hycache.engine.archs import VERIFIED_ARCHS, get_arch
    from hycache.engine.drafter import parse_spec_decode
    from hycache.engine.model import require_engine
    from hycache.engine.spec_decode import check_spec_inject
    from hycache.engine.tiers.config import parse_tiers
    from hycache.engine.verify_run import run_verify, split_list
    from hycache.engine.workloads import WORKLOADS, generate_turns

    tiers = None if args.tiers is None else parse_tiers(args.tiers)
    if tiers is not None and args.prefetch_timeout is not None:
        tiers = replace(tiers, timeout_s=args.prefetch_timeout)
    if tiers is None and (args.instances > 1 or args.prefetch_timeout is not None):
        raise ConfigError("--instances and --prefetch-timeout need --tiers")
    knobs = knob_overrides(args.knobs)
    check_knobs_apply(knobs, args.policy)
    spec = None if args.spec_decode is None else parse_spec_decode(args.spec_decode)
    check_spec_inject(args.inject, spec)
    archs = split_list(args.arch, VERIFIED_ARCHS, "arch")
    if args.model is None:
        for arch in archs:
            get_arch(arch)
    else:
        if len(archs) != 1:
            raise ConfigError("--model verifies one checkpoint: give a single --arch label")
        for option, value in (("--layers", args.layers), ("--hidden", args.hidden)):
            if value is not None:
                raise ConfigError(f"{option} shapes the tiny model; --model brings its own")
    disagg = None if args.disagg is None else DisaggSpec.parse(args.disagg, tuple(KNOBS))
    if disagg is not None and (spec is not None or tiers is not None):
        raise ConfigError("--disagg runs without --spec-decode and --tiers (not combined yet)")
    if spec is not None and tiers is not None:
        raise ConfigError("--spec-decode runs without --tiers (not combined yet)")
    if (args.inject in DISAGG_INJECTS) != (disagg is not None) and args.inject is not None:
        need = "needs --disagg" if disagg is None else "cannot run with --disagg"
        raise ConfigError(f"--inject {args.inject} {need}")
    workloads = split_list(args.workload, WORKLOADS, "workload")
    for workload in workloads:  # unknown names fail here, before any model is built
        generate_turns(workload, requests=1, seed=args.seed, vocab=1024)
    require_engine()
    import torch

    torch.set_num_threads(args.threads)
    outcome = run_verify(
        archs,
        args.policy,
        workloads,
        requests=args.requests,
        seed=args.seed,
        dtype=args.dtype,
        inject=args.inject,
        capacity=args.capacity,
        tolerance=args.tolerance,
        chunk=args.chunk,
        max_running=args.concurrency,
        layers=TINY_LAYERS if args.layers is None else args.layers,
        hidden=TINY_HIDDEN if args.hidden is None else args.hidden,
        model_dir=args.model,
        check_owners=not args.no_owner_check,
        knobs=dict(knobs),
        spec_decode=spec,
        disagg=disagg,
        tiers=tiers,
        instances=args.instances,
    )
    return outcome.exit_code


def register(subparsers: Any) -> None:
    """Add ``init-model`` and ``verify`` to ``subparsers`` (from ``add_subparsers``)."""
    init = subparsers.add_parser(
        "init-model",
        help="write a tiny random checkpoint of a hybrid architecture (needs [engine])",
        description="Write config.json + model.safetensors of a tiny random model built with "
        "the architecture's transformers configuration class, and a byte-level BPE tokenizer "
        "trained locally (tokenizer.json + tokenizer_config.json).",
    )
    init.add_argument(
        "--arch",
        required=True,
        help="qwen3_next, qwen3_5, kimi_linear, nemotron_h, bamba, gemma3, jamba, falcon_h1",
    )
    init.add_argument("--out", required=True, help="directory to write")
    init.add_argument("--layers", type=positive_int, default=TINY_LAYERS)
    init.add_argument("--hidden", type=positive_int, default=TINY_HIDDEN)
    init.add_argument("--seed", type=int, default=0)
    init.set_defaults(func=cmd_init_model)

    verify = subparsers.add_parser(
        "verify",
        help="check that cache hits compute what cold runs compute, on real models",
        description="Run workloads through tiny real models with the cache and again cold; "
        "compare last-prompt-token logits and greedy continuations. Exit 1 on a difference, "
        "3 when an --inject fault never fired.",
    )
    verify.add_argument("--arch", default="qwen3_next", help="A[,B] or all")
    verify.add_argument(
        "--policy",
        type=policies_arg,
        default="hycache",
        help="P[,Q] or all (vllm, sglang, marconi, hycache)",
    )
    verify.add_argument(
        "--workload",
        default="chat",
        help="chat, branching, docqa, sim:NAME; comma-separated or all",
    )
    verify.add_argument("--requests", type=positive_int, default=30)
    verify.add_argument("--seed", type=int, default=0, help="model weights and workload seed")
    verify.add_argument("--dtype", choices=("float32", "float64"), default="float32")
    verify.add_argument(
        "--inject",
        choices=(*INJECTS, *DISAGG_INJECTS, *TIER_INJECTS),
        help="break the hit path (or, with --tiers, the stored objects) on purpose; exit 3 if "
        "the fault never fired",
    )
    verify.add_argument(
        "--capacity",
        "--device-capacity",
        dest="capacity",
        type=bytes_arg,
        help="device cache budget in bytes, e.g. 512KiB (default: ~1,600 tokens of KV + 16 states)",
    )
    verify.add_argument(
        "--tiers",
        help="tiers under the device: host=SIZE,disk=SIZE,redis=URL (any of them); prints "
        "the prompt tokens reused per tier",
    )
    verify.add_argument(
        "--instances",
        type=positive_int,
        default=1,
        help="engine processes per cell sharing the Redis tier, one after the other",
    )
    verify.add_argument(
        "--prefetch-timeout",
        type=positive_float,
        help="seconds a Redis read may take before its tokens are recomputed (default 1)",
    )
    verify.add_argument(
        "--tolerance",
        type=non_negative_float,
        help="max |delta| (default 1e-4 float32, 1e-5 float64)",
    )
    verify.add_argument(
        "--chunk", type=positive_int, default=64, help="prefill token budget per chunk"
    )
    verify.add_argument("--concurrency", type=positive_int, default=2, help="requests in flight")
    verify.add_argument(
        "--layers", type=positive_int, help=f"tiny model layers (default {TINY_LAYERS})"
    )
    verify.add_argument(
        "--hidden", type=positive_int, help=f"tiny model hidden size (default {TINY_HIDDEN})"
    )
    verify.add_argument("--model", help="verify this checkpoint directory instead of a tiny one")
    verify.add_argument(
        "--spec-decode",
        metavar="ngram:K|oracle:K",
        help="decode speculatively (prompt-lookup drafts of K tokens, verified in one "
        "forward; oracle: drafts from the cold run, partly wrong, a verification device) "
        "and compare with plain greedy decoding",
    )
    verify.add_argument(
        "--disagg",
        metavar="P:D",
        help="disaggregated prefill/decode: page sizes of the prefill and the decode instance "
        "(each PAGE or PRESET@PAGE, e.g. 16:64 or vllm@16:sglang@64); the decode instance runs "
        "in a child process",
    )
    add_knob_option(verify)
    verify.add_argument("--threads", type=positive_int, default=1, help="torch CPU threads")
    verify.add_argument(
        "--no-owner-check",
        action="store_true",
        help="do not check owner tags on reads (numbers alone must catch bugs)",
    )
    verify.set_defaults(func=cmd_verify)
