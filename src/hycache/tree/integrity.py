"""``check_tree``: every structural invariant of a radix tree and of its components' data.

Checked per namespace, from the root down: parent links, namespaces, page-granular edges
filed under their first page, contiguous intervals, no empty unlocked leaf, each component's
own invariants on each node (``Component.check_node``), and the lock counts: a node's
``lock_ref`` is its children's plus the locks ending there, ``state_ref`` at most those.
A broken invariant raises IntegrityError; nothing is changed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from hycache.components.base import Component
from hycache.errors import IntegrityError
from hycache.tree.keys import TOKEN_BYTES
from hycache.tree.node import Node


def _require(condition: object, message: str) -> None:
    if not condition:
        raise IntegrityError(message)


def check_tree(
    page: int, components: Sequence[Component], roots: Mapping[str | None, Node]
) -> None:
    """IntegrityError on the first broken invariant of the tree of ``page``-token pages,
    ``components`` and ``roots`` (one per namespace) (module docstring)."""
    page_bytes = page * TOKEN_BYTES
    for namespace, root in roots.items():
        _require(
            root.parent is None and root.start == root.end == 0 and not root.key,
            f"root of {namespace!r} is not an empty node at 0",
        )
        _require(
            root.namespace == namespace and all(d is None for d in root.data),
            f"root of {namespace!r} holds data or another namespace",
        )
        stack = [root]
        while stack:
            node = stack.pop()
            child_locks = 0
            for key, child in node.children.items():
                _require(child.parent is node, f"{child} has a wrong parent")
                _require(child.namespace == namespace, f"{child} is in another namespace")
                _require(
                    child.length > 0 and child.length % page == 0,
                    f"{child}: edge of {child.length} tokens, page_size {page}",
                )
                _require(
                    len(child.key) == child.length * TOKEN_BYTES,
                    f"{child}: key of {len(child.key)} bytes",
                )
                _require(key == child.key[:page_bytes], f"{child} filed under a wrong key")
                _require(child.start == node.end, f"{child} does not start where {node} ends")
                _require(
                    child.children or child.lock_ref or any(d is not None for d in child.data),
                    f"empty leaf {child} was not pruned",
                )
                for component in components:
                    component.check_node(child)
                child_locks += child.lock_ref
                stack.append(child)
            if node.parent is not None:
                _require(node.lock_ref >= child_locks, f"{node} lock_ref below its children's")
                _require(
                    node.lock_ref == child_locks + node.end_ref,
                    f"{node}: lock_ref is not its children's plus the locks ending there",
                )
                _require(
                    0 <= node.state_ref <= node.end_ref,
                    f"{node}: state locks beyond the locks ending there",
                )
