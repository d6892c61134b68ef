"""``write_back``: the host receives what the device evicts (SGLang HiCache's write_back).

``demote_interior_states=False`` reproduces SGLang #40680: a state evicted alone from an
interior node is dropped with no host copy, so a later hit there cannot resume from it.
"""

from __future__ import annotations

from hycache.policy.movement.base import MovementPolicy


class WriteBack(MovementPolicy):
    """Demote every evicted KV page and state (interior states too unless switched off)."""

    name = "write_back"

    def __init__(self, *, demote_interior_states: bool = True) -> None:
        self.demote_interior_states = demote_interior_states

    def demotes(self, kind: str, *, interior: bool) -> bool:
        if kind == "recurrent" and interior:
            return self.demote_interior_states
        return True
