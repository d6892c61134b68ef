"""How each preset uses the tiers below the device, as the system it mirrors does today.

``preset_tiers(tiers, preset, knobs)`` turns the user's tier sizes (``TierConfig``) into the
tiers a preset runs with:

* ``vllm``: the offloading connector persists attention KV only; for a hybrid model its
  external hits are skipped, since no recurrent state comes back (vLLM #41712, #38230).
  ``vllm.offload_states=true`` stores states too (what the HMA offloading work aims at).
* ``lmcache``: vLLM's device cache with LMCache below it: KV only (LMCache #2845, #2863), so a
  hybrid hit below the device needs the state on the device. ``lmcache.store_states=true``
  stores states too. LMCache's garbled outputs (KV restored without its state) cannot happen
  here: a hit ends where a state is.
* ``sglang``: HiCache with its default ``write_through`` and the open failures reproduced:
  Mamba nodes pruned instead of demoted (#33713: no state ever comes back from the host),
  interior states dropped under write_back (#40680), the host state pool sized like the KV
  pool (#39851 / #24561: up to twice the host bytes promised). Each has a ``hicache_fix_*``
  knob.
* ``marconi``: single tier (the paper has no offloading): no tiers are attached.
* ``hycache``: every tier, states included, interior states demoted, within the promise.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from hycache.cache.presets import KnobValue
from hycache.cache.tierconfig import TierConfig

#: presets that run without tiers whatever the user sizes
SINGLE_TIER = ("marconi",)


def preset_tiers(
    tiers: TierConfig, preset: str, knobs: Mapping[str, KnobValue]
) -> TierConfig | None:
    """The tiers ``preset`` (with resolved ``knobs``) runs with; None: it runs without."""
    if preset in SINGLE_TIER:
        return None
    if preset == "vllm":
        return dataclasses.replace(tiers, demote_states=bool(knobs["offload_states"]))
    if preset == "lmcache":
        return dataclasses.replace(tiers, demote_states=bool(knobs["store_states"]))
    if preset == "sglang":
        return dataclasses.replace(
            tiers,
            movement=str(knobs["hicache_write_policy"]),
            demote_states=bool(knobs["hicache_fix_33713"]),
            demote_interior_states=bool(knobs["hicache_fix_40680"]),
            state_pool_like_kv=not knobs["hicache_fix_39851"],
        )
    return tiers
