"""``hycache serve``: an OpenAI-compatible server on the reference engine.

``register(subparsers)`` adds the subcommand. Nothing here imports torch or the web stack until
the command runs, so ``hycache serve --help`` works without them. Exit codes: 0 after a
graceful stop (SIGTERM/SIGINT drained), 1 when the drain timed out, 2 bad input (including a
missing ``[serve]`` extra and a port already in use).
"""

from __future__ import annotations

import argparse
import contextlib
import socket
import tempfile
from pathlib import Path
from typing import Any

from hycache.cli.knobs import add_knob_option, check_knobs_apply, knob_overrides
from hycache.cli.numbers import positive_int
from hycache.cli.sizes import bytes_arg
from hycache.errors import ConfigError

TINY_LAYERS, TINY_HIDDEN = 4, 64
_SERVE_MODULES = ("fastapi", "uvicorn", "prometheus_client", "tokenizers")


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return value


def require_serve() -> None:
    """ConfigError unless the ``[serve]`` extra's modules can be imported."""
    missing = []
    for module in _SERVE_MODULES:
        try:
            __import__(module)
        except ImportError:
            missing.append(module)
    if missing:
        raise ConfigError(
            f"hycache serve needs {', '.join(missing)}: pip install 'hycache[engine,serve]'"
        )


def check_port(host: str, port: int) -> None:
    """ConfigError when ``host:port`` cannot be bound (in use, or not an address here)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror}") from None


def cmd_serve(args: argparse.Namespace) -> int:
    from hycache.serve.config import ServeConfig

    knobs = knob_overrides(args.knobs)
    check_knobs_apply(knobs, [args.policy])
    if (args.arch is None) == (args.model is None):
        raise ConfigError("give exactly one of --arch (a tiny random model) or --model DIR")
    require_serve()
    from hycache.engine.model import require_engine

    require_engine()
    check_port(args.host, args.port)
    import torch

    torch.set_num_threads(args.threads)
    with contextlib.ExitStack() as stack:
        if args.model is not None:
            directory = Path(args.model)
            name = args.served_model_name or directory.name
        else:
            from hycache.engine.archs import get_arch, init_model

            get_arch(args.arch)
            tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="hycache-serve-"))
            directory = init_model(
                args.arch,
                Path(tmp) / args.arch,
                layers=args.layers,
                hidden=args.hidden,
                seed=args.seed,
            )
            name = args.served_model_name or f"hycache-tiny-{args.arch}"
        config = ServeConfig(
            model_dir=directory,
            model_name=name,
            policy=args.policy,
            knobs=knobs.get(args.policy, {}),
            capacity=args.device_capacity,
            dtype=args.dtype,
            max_running=args.max_running,
            max_queue=args.max_queue,
            max_model_len=args.max_model_len,
            default_max_tokens=args.default_max_tokens,
            session_idle_s=args.session_idle,
            drain_timeout_s=args.drain_timeout,
        )
        from hycache.serve.runtime import Runtime
        from hycache.serve.server import serve

        runtime = Runtime(config)
        print(
            f"hycache serve: {name} ({runtime.model.model_type}) on "
            f"http://{args.host}:{args.port}/v1, policy {args.policy}, cache "
            f"{runtime.cache.pool.budget_bytes} B, max context {runtime.max_model_len}",
            flush=True,
        )
        return serve(runtime, host=args.host, port=args.port, log_level=args.log_level)


def register(subparsers: Any) -> None:
    """Add ``serve`` to ``subparsers`` (from ``add_subparsers``)."""
    p = subparsers.add_parser(
        "serve",
        help="an OpenAI-compatible server on the reference engine (needs [engine,serve])",
        description="Serve /v1/completions, /v1/chat/completions, /v1/models, /health and "
        "/metrics with a model behind a hybrid prefix cache. SIGTERM drains in-flight "
        "requests and exits 0.",
    )
    model = p.add_argument_group("model")
    model.add_argument("--arch", help="serve a tiny random model of this architecture")
    model.add_argument("--model", help="a checkpoint directory (hycache init-model writes one)")
    model.add_argument("--layers", type=positive_int, default=TINY_LAYERS)
    model.add_argument("--hidden", type=positive_int, default=TINY_HIDDEN)
    model.add_argument("--seed", type=int, default=0, help="tiny model weights")
    model.add_argument("--dtype", choices=("float32", "float64"), default="float32")
    model.add_argument("--served-model-name", help="the model name clients send")
    cache = p.add_argument_group("cache")
    cache.add_argument(
        "--policy", default="hycache", help="cache preset: vllm, sglang, marconi, hycache"
    )
    add_knob_option(p)
    cache.add_argument(
        "--device-capacity",
        type=bytes_arg,
        help="cache budget, e.g. 64MiB (default: ~8,192 tokens of KV + 64 states)",
    )
    sched = p.add_argument_group("scheduling")
    sched.add_argument("--max-running", type=positive_int, default=4, help="requests in flight")
    sched.add_argument(
        "--max-queue", type=positive_int, default=32, help="waiting requests before 429"
    )
    sched.add_argument("--max-model-len", type=positive_int, help="prompt + max_tokens bound")
    sched.add_argument("--default-max-tokens", type=positive_int, default=16)
    sched.add_argument(
        "--session-idle",
        type=positive_float,
        default=60.0,
        help="seconds after which an idle session is ended",
    )
    sched.add_argument(
        "--drain-timeout", type=positive_float, default=60.0, help="SIGTERM drain limit, s"
    )
    sched.add_argument("--threads", type=positive_int, default=1, help="torch CPU threads")
    net = p.add_argument_group("network")
    net.add_argument("--host", default="127.0.0.1", help="address to listen on (loopback)")
    net.add_argument("--port", type=int, default=8000)
    net.add_argument(
        "--log-level", choices=("critical", "error", "warning", "info", "debug"), default="info"
    )
    p.set_defaults(func=cmd_serve)
