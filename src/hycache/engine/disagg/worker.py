"""The decode instance's process: ``python -m hycache.engine.disagg.worker --port P``.

It joins the prefill process's gloo group on loopback (rank 1) and serves its messages
(``hycache.engine.disagg.messages``): a setup loads the checkpoint (once per directory and
dtype), builds the decode cache with its own preset and page size and answers with its
``InstanceMeta``; each request runs through an ``Engine`` whose ``DecodeSide`` pulls what the
cache lacks. After every request the cache's integrity is checked. The process exits on
``close``, or when the prefill process is gone.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any, cast

from hycache.engine.disagg.channel import GlooChannel
from hycache.engine.disagg.decode import DecodeSide
from hycache.engine.disagg.messages import DecodeConfig, DecodeOutcome
from hycache.engine.disagg.meta import instance_meta
from hycache.errors import HycacheError, TransportError

if TYPE_CHECKING:
    from hycache.engine.engine import Engine
    from hycache.engine.model import LoadedModel


def _donor(model: LoadedModel, page: int) -> tuple[list[Any], list[Any]]:
    """KV of a request nobody asks for: what ``no-tail-zero`` pre-fills the landing pages with."""
    dc = model.new_cache()
    tokens = [3 + i % max(1, model.vocab_size - 3) for i in range(2 * page)]
    model.forward(dc, tokens, 0)
    full = model.layout.attention_of("full")
    keys = [dc.layers[a.index].keys[0].transpose(0, 1).clone() for a in full]
    values = [dc.layers[a.index].values[0].transpose(0, 1).clone() for a in full]
    return keys, values


class DecodeWorker:
    def __init__(self, channel: GlooChannel) -> None:
        self.channel = channel
        self.models: dict[tuple[str, str], LoadedModel] = {}
        self.engine: Engine | None = None
        self.side: DecodeSide | None = None

    def setup(self, config: DecodeConfig) -> None:
        from hycache.cache.presets import build_cache
        from hycache.engine.engine import Engine
        from hycache.engine.model import load_model

        key = (config.model_dir, config.dtype)
        if key not in self.models:
            self.models[key] = load_model(config.model_dir, dtype=config.dtype)
        model = self.models[key]
        cache = build_cache(
            model.spec, config.capacity, config.preset, track_ids=True, **dict(config.knobs)
        )
        engine = Engine(model, cache, max_running=1, check_owners=config.check_owners)
        side = DecodeSide(engine, self.channel, zero_tail=config.inject != "no-tail-zero")
        if config.inject == "no-tail-zero":
            side.landing.donor = _donor(model, engine.page_size)
        engine.prefill_source = side
        self.engine, self.side = engine, side
        self.channel.send_obj(("meta", instance_meta(model, cache, config.preset)))

    def request(self, request: Any) -> None:
        engine, side = self.engine, self.side
        if engine is None or side is None:
            self.channel.send_obj(("result", DecodeOutcome.failed("no setup before a request")))
            return
        try:
            (result,) = engine.run([request])
            engine.cache.check_integrity()
            outcome = DecodeOutcome.of(
                result, side.report, engine.faults.stored, engine.faults.fired
            )
        except TransportError:
            raise
        except HycacheError as exc:
            engine.cache.check_integrity()
            outcome = DecodeOutcome.failed(f"{type(exc).__name__}: {exc}")
        self.channel.send_obj(("result", outcome))

    def serve(self) -> None:
        while True:
            kind, *body = cast(tuple[Any, ...], self.channel.recv_obj())
            if kind == "close":
                return
            if kind == "setup":
                try:
                    self.setup(body[0])
                except HycacheError as exc:
                    self.channel.send_obj(("error", f"{type(exc).__name__}: {exc}"))
            elif kind == "request":
                self.request(body[0])
            else:
                self.channel.send_obj(("error", f"unknown message {kind!r}"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="hycache-decode-worker")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--timeout", type=float, default=60.0)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    import torch

    from hycache.engine.model import require_engine

    require_engine()
    torch.set_num_threads(args.threads)
    channel = GlooChannel(1, args.port, timeout_s=args.timeout)
    try:
        DecodeWorker(channel).serve()
    except TransportError:
        return 1  # the prefill process is gone: nothing left to serve
    finally:
        channel.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
