"""The contract of disaggregated prefill/decode: what two instances agree on, what the decode
side pulls, what a transfer reports, and the hooks ``Engine`` calls.

* ``InstanceMeta``: what an instance tells its peer in the handshake (model, layout, dtype,
  page size, pool layout); ``check_peer`` refuses a pair that cannot share data, naming the
  first field that differs (``HandshakeError``). Page sizes and pool layouts may differ: the
  transfer is in token positions, each side maps them onto its own pages.
* ``Pull``: what the decode side lacks after asking its own cache: the prompt's KV for
  ``[kv_from, kv_to)`` and, unless its own hit already ends at ``kv_to``, the one state
  (recurrent + conv) at ``kv_to = N - 1`` (N-1 prefill: the decode side computes the last
  prompt token itself).
* ``TransferReport``: the bytes that moved and the analytic minimum (one state + the KV of the
  positions the decode side lacked; no padding).
* ``Channel``: a message + tensor transport between the two processes.
* ``PrefillSink`` / ``PrefillSource``: the hooks ``Engine`` calls on the prefill side (after
  the prompt is prefilled and published) and on the decode side (after its own hit is
  restored: load what the prefill side sent; returns where the prefill continues).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, Protocol

from hycache.errors import ConfigError, HandshakeError

if TYPE_CHECKING:
    import torch

    from hycache.cache.lease import Lease
    from hycache.engine.request import RequestResult

#: bumped whenever the messages change
PROTOCOL = 1
#: the preset knob that sets each preset's page size
PAGE_KNOB = {"vllm": "block_size", "sglang": "page_size", "marconi": "page_size"}
#: the faults only a disaggregated run can inject
DISAGG_INJECTS = ("no-tail-zero", "full-last-token")


@dataclass(frozen=True)
class InstanceMeta:
    """What an instance announces in the handshake. The first five fields must match."""

    protocol: int
    dtype: str
    model_type: str
    model: str  # digest of config.json and the weight files
    layout: str  # digest of the measured per-layer cache shapes and dtypes
    preset: str
    page_size: int
    pool: str

    def check_peer(self, peer: InstanceMeta) -> None:
        """HandshakeError naming the first field that differs and must not."""
        for f in fields(self)[:5]:
            mine, theirs = getattr(self, f.name), getattr(peer, f.name)
            if mine != theirs:
                raise HandshakeError(f.name, mine, theirs)


@dataclass(frozen=True)
class Pull:
    """What the decode side asks the prefill side for (see the module docstring)."""

    kv_from: int
    kv_to: int
    needs_state: bool

    @property
    def empty(self) -> bool:
        return self.kv_from >= self.kv_to and not self.needs_state


@dataclass(frozen=True)
class TransferReport:
    """One request's transfer: bytes moved vs the analytic minimum, and what the decode side
    had: its own hit, the KV positions it pulled, the pages of its page size they fill."""

    moved_bytes: int
    minimum_bytes: int
    kv_tokens: int
    state_bytes: int
    decode_hit: int
    pages_lacked: int

    @property
    def minimal(self) -> bool:
        return self.moved_bytes == self.minimum_bytes


@dataclass(frozen=True)
class Side:
    """One instance of ``--disagg P:D``: a page size, and a preset (None: the cell's)."""

    page: int
    preset: str | None = None

    def resolve(self, policy: str) -> tuple[str, dict[str, object]]:
        """(preset, the knob that sets its page size)."""
        preset = self.preset or policy
        return preset, {PAGE_KNOB.get(preset, "page_size"): self.page}


@dataclass(frozen=True)
class DisaggSpec:
    """``--disagg P:D``: each side ``PAGE`` or ``PRESET@PAGE``."""

    prefill: Side
    decode: Side

    @staticmethod
    def parse(text: str, presets: tuple[str, ...]) -> DisaggSpec:
        parts = text.split(":")
        if len(parts) != 2:
            raise ConfigError(f"--disagg {text!r}: expected P:D page sizes, e.g. 16:64")
        return DisaggSpec(_side(parts[0], presets, text), _side(parts[1], presets, text))


def _side(text: str, presets: tuple[str, ...], whole: str) -> Side:
    preset, _, page = text.rpartition("@")
    if preset and preset not in presets:
        raise ConfigError(f"--disagg {whole!r}: unknown preset {preset!r}")
    if not page.isdigit() or int(page) < 1:
        raise ConfigError(f"--disagg {whole!r}: page size {page!r} is not a positive integer")
    return Side(int(page), preset or None)


class Channel(Protocol):
    """Objects and tensors between the two instances; ``payload_bytes`` counts tensor bytes.
    Every call raises ``TransportError`` when the peer is gone or silent past the timeout."""

    payload_bytes: int

    def send_obj(self, obj: Any) -> None: ...

    def recv_obj(self) -> Any: ...

    def send_tensor(self, tensor: torch.Tensor) -> None: ...

    def recv_tensor(self, shape: tuple[int, ...], dtype: str) -> torch.Tensor: ...

    def close(self) -> None: ...


class PrefillSink(Protocol):
    """Prefill side: called with the prompt prefilled (and published), the lease still held."""

    def send(self, lease: Lease, dc: Any) -> None: ...


class PrefillSource(Protocol):
    """Decode side: called after the own hit is restored into ``dc``; loads what the prefill
    side sent and returns the position the prefill continues from (the last prompt token)."""

    def receive(self, lease: Lease, dc: Any, result: RequestResult) -> int: ...
