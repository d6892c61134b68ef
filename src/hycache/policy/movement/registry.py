"""The movement policies by name."""

from __future__ import annotations

from hycache.errors import ConfigError
from hycache.policy.movement.base import MovementPolicy
from hycache.policy.movement.selective import WriteThroughSelective
from hycache.policy.movement.write_back import WriteBack
from hycache.policy.movement.write_through import WriteThrough

MOVEMENT_POLICIES = ("write_back", "write_through", "write_through_selective")


def movement_policy(
    name: str, *, demote_interior_states: bool = True, demote_states: bool = True
) -> MovementPolicy:
    """The policy called ``name`` (one of ``MOVEMENT_POLICIES``)."""
    if name == "write_back":
        return WriteBack(demote_interior_states=demote_interior_states, demote_states=demote_states)
    if name == "write_through":
        return WriteThrough(
            demote_interior_states=demote_interior_states, demote_states=demote_states
        )
    if name == "write_through_selective":
        return WriteThroughSelective(
            demote_interior_states=demote_interior_states, demote_states=demote_states
        )
    raise ConfigError(f"unknown movement policy {name!r}; known: {', '.join(MOVEMENT_POLICIES)}")
