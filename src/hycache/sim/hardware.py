"""Accelerator profiles for the cost model: datasheet FLOP rate, HBM bandwidth and size, host
link, plus the utilisation real kernels reach and a per-step overhead (``Hardware``); the
built-in ``h100``, ``h200`` and ``b200`` with their sources (``HARDWARE``, ``hardware``)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from hycache.errors import ConfigError

GB = 10**9
TB = 10**12
#: vLLM's GDN prefill kernels (qwen_gdn_linear_attn.py, _resolve_gdn_prefill_backend)
GDN_PREFILL_BACKENDS = ("flashinfer", "triton")


@dataclass(frozen=True, kw_only=True)
class Hardware:
    """One accelerator as the cost model sees it.

    ``peak_flops``: dense (no 2:4 sparsity) BF16 tensor-core FLOP/s. ``hbm_bandwidth``: device
    memory bandwidth in B/s; ``hbm_bytes``: device memory capacity in bytes.
    ``host_to_device_bandwidth``: host link in B/s, one direction (for host/disk tiers).
    ``disk_bandwidth`` / ``remote_bandwidth``: reads from a local NVMe drive / a remote store
    over the node's network, B/s (a storage load also crosses the host link: the slower wins).
    ``mfu``: model FLOPs utilisation prefill reaches, ``mbu``: memory bandwidth utilisation
    decode reaches (both in (0, 1]). ``step_overhead_s``: per engine step time that overlaps
    neither (scheduler, kernel launches, sampling; 2-5 ms in vLLM/SGLang with CUDA graphs).
    ``gdn_prefill_backend``: the GDN prefill kernel vLLM picks here (``flashinfer`` on Hopper
    and Blackwell, ``triton`` elsewhere); it sets the ``vllm`` preset's ``gdn_backend``.
    """

    name: str
    peak_flops: float
    hbm_bandwidth: float
    hbm_bytes: int
    host_to_device_bandwidth: float
    disk_bandwidth: float = 13 * GB
    remote_bandwidth: float = 50 * GB
    mfu: float = 0.5
    mbu: float = 0.7
    step_overhead_s: float = 0.003
    gdn_prefill_backend: str = "triton"

    def __post_init__(self) -> None:
        for field in (
            "peak_flops",
            "hbm_bandwidth",
            "hbm_bytes",
            "host_to_device_bandwidth",
            "disk_bandwidth",
            "remote_bandwidth",
        ):
            value = getattr(self, field)
            if isinstance(value, bool) or not value > 0 or not math.isfinite(value):
                raise ConfigError(f"hardware {self.name!r}: '{field}' must be > 0, got {value!r}")
        for field in ("mfu", "mbu"):
            value = getattr(self, field)
            if not 0.0 < value <= 1.0:
                raise ConfigError(
                    f"hardware {self.name!r}: '{field}' must be in (0, 1], got {value!r}"
                )
        if self.gdn_prefill_backend not in GDN_PREFILL_BACKENDS:
            raise ConfigError(
                f"hardware {self.name!r}: 'gdn_prefill_backend' must be one of "
                f"{GDN_PREFILL_BACKENDS}, got {self.gdn_prefill_backend!r}"
            )
        if not 0.0 <= self.step_overhead_s < math.inf:
            raise ConfigError(
                f"hardware {self.name!r}: 'step_overhead_s' must be >= 0, "
                f"got {self.step_overhead_s!r}"
            )

    @property
    def effective_flops(self) -> float:
        """FLOP/s prefill sustains: ``peak_flops * mfu``."""
        return self.peak_flops * self.mfu

    @property
    def effective_bandwidth(self) -> float:
        """B/s decode sustains: ``hbm_bandwidth * mbu``."""
        return self.hbm_bandwidth * self.mbu


_PCIE5_X16 = 64 * GB
"""PCIe Gen5 x16, one direction (32 GT/s x 16 lanes, 128b/130b): ~63 GB/s, 50-55 achieved.
Sources: PCI-SIG, PCI Express Base Specification 5.0 (32 GT/s per lane); NVIDIA H100 and H200
datasheets ("PCIe Gen5: 128 GB/s", both directions together). The host tier's load-back
(host -> device) runs at this rate in the simulator.

Storage defaults: ``disk_bandwidth`` 13 GB/s, one PCIe Gen5 x4 NVMe drive's sequential read
(Samsung PM1743 datasheet: 13,000 MB/s); ``remote_bandwidth`` 50 GB/s, one 400 Gb/s NIC
(NVIDIA ConnectX-7 datasheet: 400 Gb/s per port), the per-GPU network of H100/H200 HGX nodes."""

HARDWARE: Mapping[str, Hardware] = MappingProxyType(
    {
        # NVIDIA H100 Tensor Core GPU datasheet, SXM5: BF16 tensor core 1,979 TFLOPS "with
        # sparsity" -> 989 TFLOPS dense; 80 GB HBM3 at 3.35 TB/s; PCIe Gen5 x16 host link.
        "h100": Hardware(
            name="h100",
            peak_flops=989 * TB,
            hbm_bandwidth=3.35 * TB,
            hbm_bytes=80 * GB,
            host_to_device_bandwidth=_PCIE5_X16,
            gdn_prefill_backend="flashinfer",  # SM90 / SM100: FlashInfer's GDN prefill
        ),
        # NVIDIA H200 Tensor Core GPU datasheet, SXM: same GH100 compute as H100 (1,979 TFLOPS
        # BF16 with sparsity -> 989 dense); 141 GB HBM3e at 4.8 TB/s; PCIe Gen5 x16.
        "h200": Hardware(
            name="h200",
            peak_flops=989 * TB,
            hbm_bandwidth=4.8 * TB,
            hbm_bytes=141 * GB,
            host_to_device_bandwidth=_PCIE5_X16,
            gdn_prefill_backend="flashinfer",  # SM90 / SM100: FlashInfer's GDN prefill
        ),
        # NVIDIA HGX B200 datasheet, per GPU: FP16/BF16 tensor core 4.5 PFLOPS "with sparsity"
        # -> 2.25 PFLOPS dense; HBM3e at 8 TB/s; 1,440 GB per 8-GPU board = 180 GB per GPU
        # (192 GB of raw HBM is also quoted); PCIe Gen5 x16 host link.
        "b200": Hardware(
            name="b200",
            peak_flops=2250 * TB,
            hbm_bandwidth=8.0 * TB,
            hbm_bytes=180 * GB,
            host_to_device_bandwidth=_PCIE5_X16,
            gdn_prefill_backend="flashinfer",  # SM90 / SM100: FlashInfer's GDN prefill
        ),
    }
)
"""Built-in accelerator profiles (datasheet values, default utilisation and overhead)."""


def hardware_knobs(preset: str, hw: Hardware) -> dict[str, str]:
    """Preset knob defaults a profile implies: ``gdn_backend`` of ``vllm`` (and ``lmcache``,
    vLLM's device cache)."""
    return {"gdn_backend": hw.gdn_prefill_backend} if preset in ("vllm", "lmcache") else {}


def hardware(name: str) -> Hardware:
    """A built-in profile by (case-insensitive) name; ConfigError listing the known ones."""
    try:
        return HARDWARE[name.strip().lower()]
    except KeyError:
        known = ", ".join(sorted(HARDWARE))
        raise ConfigError(f"unknown hardware {name!r} (known: {known})") from None
