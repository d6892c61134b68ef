"""``write_back``: the host receives what the device evicts (SGLang HiCache's write_back).

``demote_interior_states=False`` reproduces SGLang #40680: a state evicted alone from an
interior node is dropped with no host copy, so a later hit there cannot resume from it.
``demote_states=False`` reproduces SGLang #33713: states are pruned, never demoted, so a
recurrent model never hits below the device.
"""

from __future__ import annotations

from hycache.policy.movement.base import MovementPolicy


class WriteBack(MovementPolicy):
    """Demote every evicted KV page and state (interior states too unless switched off)."""

    name = "write_back"

    def __init__(self, *, demote_interior_states: bool = True, demote_states: bool = True) -> None:
        self.demote_interior_states = demote_interior_states
        self.demote_states = demote_states

    def demotes(self, kind: str, *, interior: bool) -> bool:
        if kind == "recurrent":
            return self.demote_states and (self.demote_interior_states or not interior)
        return True
