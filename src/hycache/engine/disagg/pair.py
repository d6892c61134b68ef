"""``DisaggPair``: the prefill instance (this process) and a decode instance (a child process,
``hycache.engine.disagg.worker``) joined by a ``GlooChannel``.

``start`` launches the decode process and connects; ``setup`` gives both instances their
cache (each its own preset, page size and pool layout) and runs the handshake: the decode side
answers with its ``InstanceMeta`` and the prefill side refuses a peer whose protocol, dtype,
model or layout differ (``HandshakeError`` naming the field). ``run`` sends one request to the
decode side, which asks its own cache first and pulls only what it lacks; the prefill side
computes the N-1 prompt tokens on its own cache and sends them. When the decode process dies
or hangs, ``run`` reports the request failed (``TransportError`` after the channel's timeout),
the prefill cache's lease is aborted and its integrity checked; the pair is then ``broken``.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hycache.engine.disagg.channel import GlooChannel, free_port
from hycache.engine.disagg.messages import DecodeConfig, DecodeOutcome
from hycache.engine.disagg.meta import instance_meta
from hycache.engine.disagg.prefill import PrefillSide
from hycache.errors import ConfigError, IntegrityError, TransportError

if TYPE_CHECKING:
    from hycache.engine.disagg.base import InstanceMeta
    from hycache.engine.engine import Engine
    from hycache.engine.request import EngineRequest


@dataclass(frozen=True)
class Handshake:
    prefill: InstanceMeta
    decode: InstanceMeta


class DisaggPair:
    """See the module docstring. Use as a context manager (``close`` stops the child)."""

    def __init__(self, *, timeout_s: float = 60.0, threads: int = 1) -> None:
        self.timeout_s = timeout_s
        self.threads = threads
        self.process: subprocess.Popen[bytes] | None = None
        self.channel: GlooChannel | None = None
        self.prefill: PrefillSide | None = None
        self.broken: str | None = None
        self._log = tempfile.TemporaryFile()  # noqa: SIM115 (closed in close())

    def __enter__(self) -> DisaggPair:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        port = free_port()
        cmd = [sys.executable, "-m", "hycache.engine.disagg.worker", "--port", str(port)]
        cmd += ["--timeout", str(self.timeout_s), "--threads", str(self.threads)]
        self.process = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=self._log,
            env=dict(os.environ),
        )
        try:
            self.channel = GlooChannel(0, port, timeout_s=self.timeout_s)
        except TransportError as exc:
            raise TransportError(f"{exc}; decode process said: {self.log_tail()}") from exc

    def log_tail(self) -> str:
        self._log.seek(0)
        return self._log.read().decode(errors="replace")[-2000:].strip() or "(nothing)"

    def _chan(self) -> GlooChannel:
        if self.channel is None:
            raise ConfigError("the pair is not started")
        if self.broken is not None:
            raise TransportError(f"the decode instance is gone: {self.broken}")
        return self.channel

    def setup(
        self, engine: Engine, preset: str, config: DecodeConfig, *, full_last_token: bool = False
    ) -> Handshake:
        """Pair ``engine`` (the prefill instance) with a decode instance built from ``config``."""
        chan = self._chan()
        mine = instance_meta(engine.model, engine.cache, preset)
        chan.send_obj(("setup", config))
        kind, body = chan.recv_obj()
        if kind != "meta":
            raise ConfigError(f"the decode instance refused the setup: {body}")
        theirs: InstanceMeta = body
        mine.check_peer(theirs)
        self.prefill = PrefillSide(engine, chan, full_last_token=full_last_token)
        return Handshake(mine, theirs)

    def run(self, request: EngineRequest) -> DecodeOutcome:
        """One request through both instances; a failed outcome when the decode side is gone."""
        prefill = self.prefill
        if prefill is None:
            raise ConfigError("setup the pair before running requests")
        try:
            chan = self._chan()
            chan.send_obj(("request", request))
            kind, body = chan.recv_obj()
            if kind == "pull":
                prefill.prefill_for(request, body)
                kind, body = chan.recv_obj()
            if kind != "result":
                raise IntegrityError(f"unexpected message from the decode instance: {kind!r}")
            outcome: DecodeOutcome = body
            return outcome
        except TransportError as exc:
            self.broken = str(exc)
            prefill.engine.cache.check_integrity()  # the aborted lease left the cache whole
            return DecodeOutcome.failed(f"TransportError: {exc}")

    def close(self) -> None:
        if self.channel is not None and self.broken is None and not self.channel.closed:
            with contextlib.suppress(TransportError):
                self.channel.send_obj(("close", None))
        if self.channel is not None:
            self.channel.close()
        if self.process is not None:
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()
