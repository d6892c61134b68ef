"""``write_through_selective``: a path is copied to the host at insert time only up to its
deepest node that has been hit often enough (SGLang HiCache's write_through_selective, whose
threshold is 2: the insert counts as the first access, one earlier hit makes the second); a
device eviction demotes the rest, as ``write_back`` would."""

from __future__ import annotations

from hycache.errors import ConfigError
from hycache.policy.movement.write_back import WriteBack
from hycache.tree.node import Node

#: SGLang's threshold for write_through_selective (1 would be plain write_through)
DEFAULT_THRESHOLD = 2


class WriteThroughSelective(WriteBack):
    """Copy at insert the prefix up to the deepest node with ``threshold - 1`` earlier hits."""

    name = "write_through_selective"

    def __init__(
        self,
        *,
        threshold: int = DEFAULT_THRESHOLD,
        demote_interior_states: bool = True,
        demote_states: bool = True,
    ) -> None:
        super().__init__(demote_interior_states=demote_interior_states, demote_states=demote_states)
        if threshold < 1:
            raise ConfigError(f"write_through_selective threshold must be >= 1, got {threshold}")
        self.threshold = threshold

    def writes_through(self) -> bool:
        return True

    def through(self, path: list[Node]) -> list[Node]:
        deepest = max(
            (i for i, node in enumerate(path) if node.hits + 1 >= self.threshold), default=-1
        )
        return path[: deepest + 1]
