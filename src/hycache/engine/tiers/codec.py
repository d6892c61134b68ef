"""The blob format of the disk and Redis tiers: one blob per object, header and payload
together (a store never holds a payload without its metadata, nor the reverse).

    b"HYCT" | u32 header length | header (JSON) | payload

The header: format version, the model/layout fingerprint, component, key digest, page size,
token count, per tensor its dtype and shape, the writer, the payload length and its checksum
(BLAKE2b-128). ``Codec.decode`` refuses (``IntegrityError``, the reason named) a blob whose
magic, version, fingerprint, key, page size, tensor list, length or checksum is not what this
engine expects; the tier turns that into a miss. ``verify=False`` skips the checksum (the
``--inject no-checksum`` run shows what is then let through); ``corrupt=True`` damages every
payload after its checksum is taken (``--inject corrupt-store``).
"""

from __future__ import annotations

import hashlib
import json
import struct
from typing import TYPE_CHECKING, Any

from hycache.engine.tiers.base import ObjectKey, TierObject
from hycache.engine.tiers.fingerprint import TierIdentity
from hycache.errors import IntegrityError

if TYPE_CHECKING:
    import torch

MAGIC = b"HYCT"
VERSION = 1
_LEN = struct.Struct("<I")
_MAX_HEADER = 1 << 20


def checksum(payload: bytes | memoryview) -> str:
    return hashlib.blake2b(payload, digest_size=16).hexdigest()


def damage(payload: bytes) -> bytes:
    """Flip one exponent bit in every fourth byte (a float32 scaled by 4 or 1/4): finite
    values, all of them wrong."""
    out = bytearray(payload)
    for i in range(3, len(out), 4):
        out[i] ^= 0x01
    return bytes(out)


class Codec:
    """Encodes this engine's objects and decodes (and checks) what a store returns."""

    def __init__(
        self,
        identity: TierIdentity,
        *,
        writer: str = "",
        verify: bool = True,
        corrupt: bool = False,
    ) -> None:
        self.identity = identity
        self.writer = writer
        self.verify = verify
        self.corrupt = corrupt

    def encode(self, obj: TierObject) -> bytes:
        payload = b"".join(_tensor_bytes(t) for t in obj.tensors)
        header = {
            "version": VERSION,
            "fingerprint": self.identity.fingerprint,
            "component": obj.key.component,
            "key": obj.key.digest.hex(),
            "page": obj.key.page,
            "tokens": obj.tokens,
            "tensors": [[_dtype(t), list(t.shape)] for t in obj.tensors],
            "writer": obj.writer or self.writer,
            "payload": len(payload),
            "checksum": checksum(payload),
        }
        if self.corrupt:
            payload = damage(payload)
        raw = json.dumps(header, separators=(",", ":")).encode()
        return MAGIC + _LEN.pack(len(raw)) + raw + payload

    def decode(self, key: ObjectKey, blob: bytes) -> TierObject:
        """The object in ``blob``, stored under ``key``; IntegrityError naming what is wrong."""
        import torch

        if len(blob) < len(MAGIC) + _LEN.size or not blob.startswith(MAGIC):
            raise IntegrityError(f"{key.name}: not a hycache tier object")
        (length,) = _LEN.unpack_from(blob, len(MAGIC))
        start = len(MAGIC) + _LEN.size
        if length > _MAX_HEADER or start + length > len(blob):
            raise IntegrityError(f"{key.name}: truncated header")
        try:
            header: Any = json.loads(blob[start : start + length])
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise IntegrityError(f"{key.name}: unreadable header ({exc})") from None
        if not isinstance(header, dict):
            raise IntegrityError(f"{key.name}: unreadable header")
        self._check_header(key, header)
        payload = memoryview(blob)[start + length :]
        if len(payload) != header["payload"]:
            raise IntegrityError(
                f"{key.name}: payload of {len(payload)} bytes, header says {header['payload']}"
            )
        if self.verify and checksum(payload) != header["checksum"]:
            raise IntegrityError(f"{key.name}: checksum mismatch")
        tensors: list[torch.Tensor] = []
        offset = 0
        for dtype, shape in self.identity.specs[key.component]:
            t_dtype = getattr(torch, dtype)
            n = 1
            for d in shape:
                n *= d
            size = n * torch.finfo(t_dtype).bits // 8
            chunk = bytearray(payload[offset : offset + size])
            tensors.append(torch.frombuffer(chunk, dtype=t_dtype).reshape(shape))
            offset += size
        tokens = header["tokens"]
        return TierObject(key, int(tokens), tuple(tensors), str(header.get("writer", "")))

    def _check_header(self, key: ObjectKey, header: dict[str, Any]) -> None:
        expected_tensors = [[d, list(s)] for d, s in self.identity.specs.get(key.component, ())]
        checks = (
            ("version", VERSION),
            ("fingerprint", self.identity.fingerprint),
            ("component", key.component),
            ("key", key.digest.hex()),
            ("page", key.page),
            ("tensors", expected_tensors),
        )
        for field, want in checks:
            if header.get(field) != want:
                raise IntegrityError(
                    f"{key.name}: header {field} {header.get(field)!r}, expected {want!r}"
                )
        payload = header.get("payload")
        if payload != self.identity.nbytes(key.component):
            raise IntegrityError(f"{key.name}: header payload {payload!r} bytes is the wrong size")
        tokens = header.get("tokens")
        if not isinstance(tokens, int) or tokens <= 0 or tokens % key.page:
            raise IntegrityError(f"{key.name}: header tokens {tokens!r}")
        if not isinstance(header.get("checksum"), str):
            raise IntegrityError(f"{key.name}: header without a checksum")


def _dtype(t: torch.Tensor) -> str:
    return str(t.dtype).removeprefix("torch.")


def _tensor_bytes(t: torch.Tensor) -> bytes:
    data: bytes = t.detach().contiguous().cpu().numpy().tobytes()
    return data
