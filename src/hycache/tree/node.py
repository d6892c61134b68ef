"""One node of the radix tree.

Interval ownership: a node owns the token positions ``[start, end)`` of its path, i.e. the
edge ``key`` (encoded token ids, see :mod:`hycache.tree.keys`) from its parent. Every
component keeps its data for those positions in ``data[slot]`` (``None`` = absent). A
recurrent state "at a node" is the state after consuming position ``end - 1``, i.e. at prefix
length ``end``::

    root [0,0) ── A [0,8) ── B [8,12)        state of B = state at prefix length 12
                        └─── C [8,16)        KV pages of C hold positions 8..15

``lock_ref`` counts the locks whose path passes through or ends at the node; a locked node is
never removed and its attention KV is never dropped. ``end_ref`` counts the locks ending at the
node, ``state_ref`` those of them that also hold its recurrent state (a request will copy it):
only they pin the state. ``hits`` counts the requests that resumed from a state at the node
(a split leaves it with the lower part, which keeps the node's end).
"""

from __future__ import annotations

from typing import Any

from hycache.tree.keys import TOKEN_BYTES, TokenKey, decode_tokens


class Node:
    """A radix-tree node. Mutated only by :class:`hycache.tree.radix.RadixTree` and components."""

    __slots__ = (
        "children",
        "data",
        "end",
        "end_ref",
        "hits",
        "key",
        "last_access",
        "lock_ref",
        "namespace",
        "parent",
        "start",
        "state_ref",
    )

    def __init__(
        self,
        parent: Node | None,
        key: TokenKey,
        start: int,
        n_components: int,
        namespace: str | None,
    ) -> None:
        self.parent = parent
        self.key = key
        self.start = start
        self.end = start + len(key) // TOKEN_BYTES
        self.children: dict[TokenKey, Node] = {}
        self.data: list[Any] = [None] * n_components
        self.lock_ref = 0
        self.end_ref = 0
        self.state_ref = 0
        self.namespace = namespace
        self.last_access = 0.0
        self.hits = 0

    @property
    def length(self) -> int:
        """Number of tokens on the node's edge."""
        return self.end - self.start

    @property
    def tokens(self) -> tuple[int, ...]:
        """The edge's token ids (decoded: for inspection, not for hot paths)."""
        return decode_tokens(self.key)

    @property
    def is_root(self) -> bool:
        return self.parent is None

    @property
    def is_leaf(self) -> bool:
        return not self.children

    def path_from_root(self) -> list[Node]:
        """Nodes from the first below the root down to this one (empty for a root)."""
        path: list[Node] = []
        node: Node | None = self
        while node is not None and node.parent is not None:
            path.append(node)
            node = node.parent
        path.reverse()
        return path

    def __repr__(self) -> str:
        present = ["-" if d is None else "+" for d in self.data]
        return f"Node([{self.start},{self.end}) lock={self.lock_ref} data={''.join(present)})"
