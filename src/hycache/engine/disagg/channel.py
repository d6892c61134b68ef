"""``GlooChannel``: the transport between a prefill and a decode process, over
``torch.distributed`` with the gloo backend on the loopback interface.

The prefill process is rank 0 and hosts the rendezvous store on ``127.0.0.1:port``; the decode
process is rank 1. Objects (headers, requests, results) go as pickled byte tensors, KV and
states as tensors of their own shape and dtype (``payload_bytes`` counts only those). Every
call is bounded by the group's timeout, and a peer that died shows up as a closed connection:
both raise ``TransportError``, so a request fails instead of hanging.
"""

from __future__ import annotations

import contextlib
import datetime
import socket
from typing import Any

from hycache.errors import ConfigError, TransportError

LOOPBACK = "127.0.0.1"


def free_port() -> int:
    """A TCP port on the loopback interface that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOOPBACK, 0))
        port: int = s.getsockname()[1]
        return port


class GlooChannel:
    """One side of a two-process gloo group (see the module docstring)."""

    def __init__(self, rank: int, port: int, *, timeout_s: float, host: str = LOOPBACK) -> None:
        import torch.distributed

        dist: Any = torch.distributed

        if host != LOOPBACK:
            raise ConfigError(f"disaggregated instances talk over loopback only, not {host!r}")
        if rank not in (0, 1):
            raise ConfigError(f"rank must be 0 (prefill) or 1 (decode), got {rank}")
        self.rank = rank
        self.peer = 1 - rank
        self.payload_bytes = 0
        timeout = datetime.timedelta(seconds=timeout_s)
        try:
            store = dist.TCPStore(host, port, 2, rank == 0, timeout=timeout)
            dist.init_process_group("gloo", store=store, rank=rank, world_size=2, timeout=timeout)
        except (RuntimeError, ValueError, OSError) as exc:
            raise TransportError(f"cannot connect the peer instance on port {port}: {exc}") from exc
        self._dist = dist
        self.closed = False

    def _call(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        if self.closed:
            raise TransportError(f"{what}: the channel to the peer instance is closed")
        try:
            return fn(*args, **kwargs)
        except (RuntimeError, ValueError, OSError) as exc:
            self.closed = True  # a broken gloo pair stays broken
            raise TransportError(f"{what}: peer instance gone or silent: {exc}") from exc

    def send_obj(self, obj: Any) -> None:
        self._call("send", self._dist.send_object_list, [obj], dst=self.peer)

    def recv_obj(self) -> Any:
        box: list[Any] = [None]
        self._call("receive", self._dist.recv_object_list, box, src=self.peer)
        return box[0]

    def send_tensor(self, tensor: Any) -> None:
        data = tensor.contiguous()
        self._call("send", self._dist.send, data, dst=self.peer)
        self.payload_bytes += data.numel() * data.element_size()

    def recv_tensor(self, shape: tuple[int, ...], dtype: str) -> Any:
        import torch

        out = torch.empty(shape, dtype=getattr(torch, dtype))
        self._call("receive", self._dist.recv, out, src=self.peer)
        self.payload_bytes += out.numel() * out.element_size()
        return out

    def close(self) -> None:
        """Leave the group (the other side may be gone already)."""
        if self._dist.is_initialized():
            with contextlib.suppress(RuntimeError, ValueError):
                self._dist.destroy_process_group()
        self.closed = True
