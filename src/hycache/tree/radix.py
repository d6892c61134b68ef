"""The radix tree: one token-keyed tree per namespace, components attached to nodes.

Keys are page-granular: a child is found by the first page (``page_size`` tokens) of its edge
and every edge length is a multiple of ``page_size``. The tree never shares across namespaces.

The match walk follows the token path, then each component votes: starting from the
attention-only length, every component lowers the candidate to the deepest prefix it accepts,
until nothing changes (the candidate only shrinks, so this terminates at the deepest prefix
all accept).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from hycache.components.base import Component
from hycache.errors import CacheUsageError
from hycache.tree.base import MatchResult
from hycache.tree.node import Node


class RadixTree:
    """A page-granular radix tree carrying one component per layer group.

    Mutating methods (insert, split_at, lock, unlock, release, remove_leaf) keep
    ``check_integrity()`` true. Pure queries (match) never change the tree.
    """

    def __init__(self, page_size: int, components: Sequence[Component]) -> None:
        if page_size < 1:
            raise CacheUsageError(f"page_size must be >= 1, got {page_size}")
        self.page_size = page_size
        self.components: tuple[Component, ...] = tuple(components)
        for slot, component in enumerate(self.components):
            component.bind(slot, page_size)
        self._kv_components = tuple(c for c in self.components if c.bounds_kv)
        self._roots: dict[str | None, Node] = {}

    # ------------------------------------------------------------------ navigation
    def root(self, namespace: str | None) -> Node:
        """The root of ``namespace`` (created on first use)."""
        root = self._roots.get(namespace)
        if root is None:
            root = Node(None, [], 0, len(self.components), namespace)
            self._roots[namespace] = root
        return root

    def _common_length(self, edge: list[int], tokens: list[int], pos: int) -> int:
        """Page-aligned length of the common prefix of ``edge`` and ``tokens[pos:]``."""
        page = self.page_size
        n = min(len(edge), len(tokens) - pos)
        n -= n % page
        if n == len(edge):
            if tokens[pos : pos + n] == edge:
                return n
        elif tokens[pos : pos + n] == edge[:n]:
            return n
        lo, hi = 0, n // page  # pages [0, lo) equal; [0, hi) not equal
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if tokens[pos : pos + mid * page] == edge[: mid * page]:
                lo = mid
            else:
                hi = mid
        return lo * page

    def walk(self, tokens: list[int], namespace: str | None = None) -> tuple[list[Node], int]:
        """Follow ``tokens`` from the root: (nodes touched, page-aligned matched length)."""
        page = self.page_size
        node = self._roots.get(namespace)
        path: list[Node] = []
        if node is None:
            return path, 0
        pos = 0
        limit = len(tokens) - len(tokens) % page
        while pos < limit:
            child = node.children.get(tuple(tokens[pos : pos + page]))
            if child is None:
                break
            path.append(child)
            n = self._common_length(child.tokens, tokens, pos)
            pos += n
            if pos < child.end:
                break
            node = child
        return path, pos

    def match(self, tokens: Sequence[int], namespace: str | None = None) -> MatchResult:
        """Pure lookup: how much of ``tokens`` is reusable. Does not mutate anything."""
        token_list = tokens if isinstance(tokens, list) else list(tokens)
        path, matched = self.walk(token_list, namespace)
        kv_hit = matched
        for component in self._kv_components:
            kv_hit = component.deepest_accepted(path, kv_hit)
        hit = kv_hit
        while True:
            candidate = hit
            for component in self.components:
                candidate = component.deepest_accepted(path, candidate)
            if candidate == hit:
                break
            hit = candidate
        return MatchResult(hit=hit, kv_hit=kv_hit, matched=matched, path=tuple(path))

    # ------------------------------------------------------------------ structure
    def _split(self, node: Node, at: int) -> Node:
        """Split ``node`` at absolute position ``at`` (start < at < end); return the new upper
        node ``[start, at)``. ``node`` keeps its identity as the lower part ``[at, end)``."""
        assert node.start < at < node.end and (at - node.start) % self.page_size == 0
        parent = node.parent
        assert parent is not None
        cut = at - node.start
        upper = Node(parent, node.tokens[:cut], node.start, len(self.components), node.namespace)
        upper.lock_ref = node.lock_ref
        upper.last_access = node.last_access
        upper.hits = node.hits
        parent.children[tuple(node.tokens[: self.page_size])] = upper
        node.tokens = node.tokens[cut:]
        node.start = at
        node.parent = upper
        upper.children[tuple(node.tokens[: self.page_size])] = node
        for component in self.components:
            component.split(upper, node)
        return upper

    def insert(self, tokens: Sequence[int], namespace: str | None = None) -> list[Node]:
        """Cache ``tokens`` (whole pages only): create or revive the path and ``fill`` every
        component on it. Returns the path nodes, covering exactly ``[0, L)`` with
        ``L = len(tokens)`` rounded down to pages. Mutates the tree."""
        token_list = tokens if isinstance(tokens, list) else list(tokens)
        page = self.page_size
        limit = len(token_list) - len(token_list) % page
        node = self.root(namespace)
        path: list[Node] = []
        pos = 0
        while pos < limit:
            key = tuple(token_list[pos : pos + page])
            child = node.children.get(key)
            if child is None:
                child = Node(node, token_list[pos:limit], pos, len(self.components), namespace)
                node.children[key] = child
            else:
                n = self._common_length(child.tokens, token_list, pos)
                if pos + n < child.end:
                    child = self._split(child, pos + n)
            for component in self.components:
                component.fill(child)
            path.append(child)
            node = child
            pos = child.end
        return path

    def split_at(self, tokens: Sequence[int], length: int, namespace: str | None = None) -> Node:
        """Make a node boundary at prefix ``length`` of ``tokens`` (which must be cached that
        deep) and return the node ending there. Mutates the tree (a split) when needed."""
        if length <= 0 or length % self.page_size:
            raise CacheUsageError(
                f"position {length} must be a positive multiple of page_size {self.page_size}"
            )
        token_list = tokens if isinstance(tokens, list) else list(tokens)
        path, matched = self.walk(token_list[:length], namespace)
        if matched < length:
            raise CacheUsageError(f"prefix length {length} is not cached (only {matched})")
        node = path[-1]
        if node.end > length:
            node = self._split(node, length)
        return node

    def nodes_on(self, tokens: Sequence[int], namespace: str | None = None) -> list[Node]:
        """Nodes fully covered by the cached part of ``tokens`` (no split, no mutation)."""
        token_list = tokens if isinstance(tokens, list) else list(tokens)
        path, matched = self.walk(token_list, namespace)
        return [node for node in path if node.end <= matched]

    # ------------------------------------------------------------------ locks
    def lock(self, node: Node) -> None:
        """Pin ``node`` and its ancestors: none of them is removed or dropped until unlock."""
        current: Node | None = node
        while current is not None and current.parent is not None:
            current.lock_ref += 1
            current = current.parent

    def unlock(self, node: Node) -> None:
        """Undo one ``lock(node)``."""
        current: Node | None = node
        while current is not None and current.parent is not None:
            assert current.lock_ref > 0, f"unlock of an unlocked {current}"
            current.lock_ref -= 1
            current = current.parent
        self.prune(node)

    # ------------------------------------------------------------------ removal
    def release(self, node: Node, component: Component) -> None:
        """Drop ``component``'s data on ``node``; a leaf left with no data at all is removed
        (and so on upwards). The node must not be locked."""
        if node.lock_ref:
            raise CacheUsageError(f"cannot drop {component.name} data of locked {node}")
        component.release(node)
        self.prune(node)

    def prune(self, node: Node) -> None:
        """Remove ``node`` and then its ancestors while they are empty unlocked leaves."""
        current = node
        while (
            current.parent is not None
            and not current.children
            and current.lock_ref == 0
            and all(d is None for d in current.data)
        ):
            parent = current.parent
            del parent.children[tuple(current.tokens[: self.page_size])]
            current.parent = None
            current = parent

    def remove_leaf(self, node: Node) -> None:
        """Remove an unlocked leaf with all its data. Mutates the tree."""
        assert node.parent is not None and not node.children and node.lock_ref == 0
        for component in self.components:
            component.release(node)
        self.prune(node)

    def clear(self) -> None:
        """Release every component's data and drop all nodes. No node may be locked."""
        for node in list(self.iter_nodes()):
            assert node.lock_ref == 0, f"clear() with locked {node}"
            for component in self.components:
                component.release(node)
        self._roots.clear()

    # ------------------------------------------------------------------ inspection
    def namespaces(self) -> list[str | None]:
        return list(self._roots)

    def iter_nodes(self) -> Iterator[Node]:
        """Every non-root node, parents before children."""
        stack = [child for root in self._roots.values() for child in root.children.values()]
        while stack:
            node = stack.pop()
            yield node
            stack.extend(node.children.values())

    def bytes_held(self) -> dict[str, int]:
        """Bytes held per component name."""
        held = {c.name: 0 for c in self.components}
        for node in self.iter_nodes():
            for c in self.components:
                held[c.name] += c.bytes_on(node)
        return held

    def check_integrity(self) -> None:
        """Assert every structural invariant of the tree and of every component's data."""
        page = self.page_size
        for namespace, root in self._roots.items():
            assert root.parent is None and root.start == root.end == 0 and not root.tokens
            assert root.namespace == namespace and all(d is None for d in root.data)
            stack = [root]
            while stack:
                node = stack.pop()
                child_locks = 0
                for key, child in node.children.items():
                    assert child.parent is node, f"{child} has a wrong parent"
                    assert child.namespace == namespace
                    assert len(child.tokens) > 0 and len(child.tokens) % page == 0
                    assert key == tuple(child.tokens[:page]), f"{child} filed under a wrong key"
                    assert child.start == node.end and child.end == child.start + len(child.tokens)
                    assert child.children or child.lock_ref or any(
                        d is not None for d in child.data
                    ), f"empty leaf {child} was not pruned"
                    for component in self.components:
                        component.check_node(child)
                    child_locks += child.lock_ref
                    stack.append(child)
                if node.parent is not None:
                    assert node.lock_ref >= child_locks, f"{node} lock_ref below its children's"

    # ------------------------------------------------------------------ path-level drops
    def release_range(
        self,
        component: Component,
        tokens: Sequence[int],
        start: int,
        end: int | None = None,
        namespace: str | None = None,
    ) -> int:
        """Drop ``component``'s data for positions ``[start, end)`` (``end`` None = to the end
        of the cached path) on the path of ``tokens``; positions not cached are ignored.
        Splits nodes at the bounds so data outside the range is kept. Raises CacheUsageError
        (before dropping anything) if a node in the range is locked. Returns nodes touched."""
        page = self.page_size
        if start < 0 or start % page or (end is not None and (end < start or end % page)):
            raise CacheUsageError(
                f"range [{start}, {end}) must be page-aligned (page_size {page}) and ordered"
            )
        token_list = tokens if isinstance(tokens, list) else list(tokens)
        _, matched = self.walk(token_list, namespace)
        stop = matched if end is None else min(end, matched)
        if start >= stop:
            return 0
        if start > 0:
            self.split_at(token_list, start, namespace)
        self.split_at(token_list, stop, namespace)
        targets = [n for n in self.nodes_on(token_list[:stop], namespace) if n.start >= start]
        for node in targets:
            if node.lock_ref and component.has(node):
                raise CacheUsageError(f"cannot drop {component.name} data of locked {node}")
        touched = 0
        for node in reversed(targets):
            if component.has(node):
                touched += 1
                self.release(node, component)
        return touched

    def release_state_at(
        self,
        component: Component,
        tokens: Sequence[int],
        length: int,
        namespace: str | None = None,
    ) -> bool:
        """Drop ``component``'s data on the node ending exactly at prefix ``length`` of
        ``tokens``. Returns False when there is none. Raises CacheUsageError if it is locked."""
        if length <= 0 or length % self.page_size:
            raise CacheUsageError(
                f"position {length} must be a positive multiple of page_size {self.page_size}"
            )
        token_list = tokens if isinstance(tokens, list) else list(tokens)
        for node in self.nodes_on(token_list[:length], namespace):
            if node.end == length and component.has(node):
                self.release(node, component)
                return True
        return False
