"""``PrefillSide``: the prefill instance's ``PrefillSink``, and ``prefill_for``, which runs the
prefill part of one request on the prefill instance's own engine and cache.

N-1 prefill: the prefill instance runs ``prompt[:N-1]`` as a request of its own (its cache
reuses and publishes prefixes as usual), and when the prefill is done (lease still held) sends
the pulled KV and the state after those N-1 tokens. ``--inject full-last-token`` runs all N
tokens instead and sends the state after N: the decode side then feeds the last token a
second time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hycache.engine.disagg.payload import send_failure, send_prefilled
from hycache.engine.request import EngineRequest
from hycache.errors import IntegrityError

if TYPE_CHECKING:
    from hycache.cache.lease import Lease
    from hycache.engine.disagg.base import Channel, Pull
    from hycache.engine.engine import Engine


class PrefillSide:
    """Sends, for the request in progress, what the decode side pulled."""

    def __init__(self, engine: Engine, channel: Channel, *, full_last_token: bool = False) -> None:
        self.engine = engine
        self.channel = channel
        self.full_last_token = full_last_token
        self.pull: Pull | None = None
        self.sent = False
        #: requests whose sent state had already consumed the last prompt token
        self.fired = 0
        engine.prefill_sink = self

    def send(self, lease: Lease, dc: Any) -> None:
        pull = self.pull
        if pull is None:
            raise IntegrityError("the prefill instance prefilled a request nobody pulled")
        send_prefilled(
            self.channel, self.engine.model, self.engine.transfer, dc, pull, state=pull.needs_state
        )
        self.sent = True
        if self.full_last_token and pull.needs_state:
            self.fired += 1

    def empty(self, pull: Pull) -> None:
        """The decode side lacks nothing (or the prompt is one token): nothing to compute."""
        self.channel.send_obj(
            {
                "ok": True,
                "kv_from": pull.kv_from,
                "kv_to": pull.kv_to,
                "kv": [],
                "conv": None,
                "rec": None,
            }
        )

    def prefill_for(self, request: EngineRequest, pull: Pull) -> None:
        """Run the prefill part of ``request`` and send the pulled data (or a failure)."""
        if pull.empty:
            self.empty(pull)
            return
        prompt = request.prompt if self.full_last_token else request.prompt[: pull.kv_to]
        mine = EngineRequest(prompt, 1, request.namespace, request.session, request.rid)
        self.pull, self.sent = pull, False
        try:
            (result,) = self.engine.run([mine])
        finally:
            self.pull = None
        if not self.sent:
            send_failure(self.channel, result.error or f"prefill ended {result.status}")
        self.engine.cache.check_integrity()
