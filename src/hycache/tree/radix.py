"""The radix tree: one token-keyed tree per namespace, components attached to nodes.

Keys are page-granular: a child is found by the first page (``page_size`` tokens) of its edge
and every edge length is a multiple of ``page_size``. The tree never shares across namespaces.

The match walk follows the token path, then each component votes: starting from the
attention-only length, every component lowers the candidate to the deepest prefix it accepts,
until nothing changes (the candidate only shrinks, so this terminates at the deepest prefix
all accept).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

from hycache.components.base import Component
from hycache.errors import CacheUsageError, IntegrityError
from hycache.tree.base import MatchResult, SlidePlan
from hycache.tree.drops import release_range, release_state_at
from hycache.tree.integrity import check_tree
from hycache.tree.keys import TOKEN_BYTES, TokenInput, TokenKey, encode_tokens
from hycache.tree.node import Node
from hycache.tree.runkey import RunKey
from hycache.tree.tiers import union_match


class RadixTree:
    """A page-granular radix tree carrying one component per layer group.

    Mutating methods (insert, split_at, lock, unlock, release, remove_leaf) keep
    ``check_integrity()`` true. Pure queries (match) never change the tree.
    """

    def __init__(
        self,
        page_size: int,
        components: Sequence[Component],
        *,
        lower_tiers: Sequence[Sequence[Component]] = (),
    ) -> None:
        """``components``: one per layer group, on the first (fastest) tier. ``lower_tiers``:
        for each slower tier, one component per group, in the same order and of the same
        kinds (see :mod:`hycache.tree.tiers`); matches then run over the union of tiers."""
        if page_size < 1:
            raise CacheUsageError(f"page_size must be >= 1, got {page_size}")
        self.page_size = page_size
        first = tuple(components)
        self.tiers: tuple[tuple[Component, ...], ...] = (
            first,
            *(tuple(t) for t in lower_tiers),
        )
        for tier in self.tiers[1:]:
            if tuple(c.kind for c in tier) != tuple(c.kind for c in first):
                raise CacheUsageError("every tier needs one component per group, same kinds")
        self.components: tuple[Component, ...] = tuple(c for t in self.tiers for c in t)
        for slot, component in enumerate(self.components):
            component.bind(slot, page_size)
        #: per group (index into the first tier), the slots of that group on every tier
        self.group_slots: tuple[tuple[int, ...], ...] = tuple(
            tuple(t[g].slot for t in self.tiers) for g in range(len(first))
        )
        self._tiered = len(self.tiers) > 1
        self._kv_components = tuple(c for c in first if c.bounds_kv)
        self._roots: dict[str | None, Node] = {}
        self._page_bytes = page_size * TOKEN_BYTES
        self.version = 0  # bumped by every structural change (node added, split or removed)
        self._leaf_watchers: list[Callable[[Node], None]] = []

    def watch_leaves(self, callback: Callable[[Node], None]) -> None:
        """Call ``callback(node)`` whenever ``node`` loses its last child (it may be removed
        itself right after, if it is left empty)."""
        self._leaf_watchers.append(callback)

    # ------------------------------------------------------------------ navigation
    def root(self, namespace: str | None) -> Node:
        """The root of ``namespace`` (created on first use)."""
        root = self._roots.get(namespace)
        if root is None:
            root = Node(None, b"", 0, len(self.components), namespace)
            self._roots[namespace] = root
        return root

    def _common_pages(self, edge: TokenKey, key: TokenKey, offset: int) -> int:
        """Whole pages (in bytes) that ``edge`` and ``key[offset:]`` share at their start."""
        page = self._page_bytes
        if isinstance(edge, RunKey) and isinstance(key, RunKey):
            shared = edge.common_tokens(key, offset // TOKEN_BYTES) * TOKEN_BYTES
            return shared - shared % page
        n = min(len(edge), len(key) - offset)
        n -= n % page
        if n == len(edge):
            if key[offset : offset + n] == edge:
                return n
        elif key[offset : offset + n] == edge[:n]:
            return n
        lo, hi = 0, n // page  # the first lo pages are equal; the first hi are not
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if key[offset : offset + mid * page] == edge[: mid * page]:
                lo = mid
            else:
                hi = mid
        return lo * page

    def _walk(self, key: TokenKey, namespace: str | None) -> tuple[list[Node], int]:
        """Follow ``key`` from the root: (nodes touched, page-aligned matched length in tokens).
        The last node may be matched only in part."""
        page = self._page_bytes
        node = self._roots.get(namespace)
        path: list[Node] = []
        if node is None:
            return path, 0
        offset = 0
        limit = len(key) - len(key) % page
        while offset < limit:
            child = node.children.get(key[offset : offset + page])
            if child is None:
                break
            path.append(child)
            offset += self._common_pages(child.key, key, offset)
            if offset < child.end * TOKEN_BYTES:
                break
            node = child
        return path, offset // TOKEN_BYTES

    def match(self, tokens: TokenInput, namespace: str | None = None) -> MatchResult:
        """Pure lookup: how much of ``tokens`` is reusable. Does not mutate anything."""
        key = encode_tokens(tokens)
        path, matched = self._walk(key, namespace)
        if self._tiered:
            hit, kv_hit = union_match(self.tiers[0], self.group_slots, path, matched)
            return MatchResult(
                hit=hit,
                kv_hit=kv_hit,
                matched=matched,
                path=tuple(path),
                key=key,
                namespace=namespace,
                tree_version=self.version,
            )
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
        return MatchResult(
            hit=hit,
            kv_hit=kv_hit,
            matched=matched,
            path=tuple(path),
            key=key,
            namespace=namespace,
            tree_version=self.version,
        )

    # ------------------------------------------------------------------ structure
    def _split(self, node: Node, at: int) -> Node:
        """Split ``node`` at absolute position ``at`` (start < at < end); return the new upper
        node ``[start, at)``. ``node`` keeps its identity as the lower part ``[at, end)``."""
        parent = node.parent
        if parent is None or not node.start < at < node.end or (at - node.start) % self.page_size:
            raise IntegrityError(f"split of {node} at {at}: not a page boundary inside it")
        self.version += 1
        page = self._page_bytes
        cut = (at - node.start) * TOKEN_BYTES
        upper = Node(parent, node.key[:cut], node.start, len(self.components), node.namespace)
        upper.lock_ref = node.lock_ref  # every lock on the node passes the upper part
        upper.last_access = node.last_access
        parent.children[node.key[:page]] = upper
        node.key = node.key[cut:]
        node.start = at
        node.parent = upper
        upper.children[node.key[:page]] = node
        for component in self.components:
            component.split(upper, node)
        return upper

    def insert(
        self,
        tokens: TokenInput,
        namespace: str | None = None,
        *,
        length: int | None = None,
        after: MatchResult | None = None,
        slide: SlidePlan | None = None,
        tier: int = 0,
    ) -> list[Node]:
        """Cache ``tokens[:length]`` (whole pages only): create or revive the path and ``fill``
        every component of tier ``tier`` (default the first) on it. Returns the path nodes,
        covering exactly ``[0, L)`` with ``L`` the length rounded down to pages. Mutates the
        tree.

        ``after``: a ``match`` result of the same tokens; when the tree's structure has not
        changed since, its fully matched nodes are reused without comparing tokens again.

        ``slide``: a :func:`hycache.tree.window.plan_slide` plan of this insert (its match
        taken as ``after``; its length replaces ``length``): each component fills only the
        ranges the plan gives it, splitting nodes at their bounds, so that exactly
        ``slide.units`` are taken. CacheUsageError (nothing changed) if the tree's structure
        changed since the plan's match."""
        key = encode_tokens(tokens)
        if not 0 <= tier < len(self.tiers) or (slide is not None and self._tiered):
            raise CacheUsageError(f"insert into tier {tier} (slides need a single-tier tree)")
        if slide is not None:
            found = slide.found
            if (
                found.tree_version != self.version
                or found.namespace != namespace
                or not (found.key is key or found.key == key)
            ):
                raise CacheUsageError("slide plan of other tokens, or the tree changed since")
            after, length = found, slide.length
        path = self._insert_structure(key, namespace, length, after)
        if slide is None:
            filled = self.tiers[tier]
            for node in path:
                for component in filled:
                    component.fill(node)
        else:
            self._fill_slid(path, slide)
        return path

    def _insert_structure(
        self, key: TokenKey, namespace: str | None, length: int | None, after: MatchResult | None
    ) -> list[Node]:
        """The structural part of ``insert``: the path nodes covering ``[0, L)``, created or
        split as needed; no component is filled."""
        page = self._page_bytes
        limit = len(key) if length is None else min(length * TOKEN_BYTES, len(key))
        limit -= limit % page
        node = self.root(namespace)
        path: list[Node] = []
        offset = 0
        if (
            after is not None
            and after.tree_version == self.version
            and after.namespace == namespace
            and (after.key is key or after.key == key)
        ):
            trusted_end = min(after.matched * TOKEN_BYTES, limit)
            for trusted in after.path:
                if trusted.end * TOKEN_BYTES > trusted_end:
                    break
                path.append(trusted)
                node = trusted
                offset = trusted.end * TOKEN_BYTES
        while offset < limit:
            first_page = key[offset : offset + page]
            child = node.children.get(first_page)
            if child is None:
                position = offset // TOKEN_BYTES
                child = Node(node, key[offset:limit], position, len(self.components), namespace)
                node.children[first_page] = child
                self.version += 1
            else:
                offset_in = offset + self._common_pages(child.key, key, offset)
                if offset_in < child.end * TOKEN_BYTES:
                    child = self._split(child, offset_in // TOKEN_BYTES)
            path.append(child)
            node = child
            offset = child.end * TOKEN_BYTES
        return path

    def _fill_slid(self, path: list[Node], slide: SlidePlan) -> None:
        """Fill ``path`` as ``slide`` says: split nodes lacking a component's data at the
        bounds of its ranges, then fill that component on the nodes inside them."""
        for component, spans in zip(self.components, slide.ranges, strict=True):
            if spans is None:
                continue
            for lo, hi in spans:
                for bound in (lo, hi):
                    if 0 < bound < slide.length:
                        self._cut_if_absent(path, bound, component)
        for node in path:
            for component, spans in zip(self.components, slide.ranges, strict=True):
                if spans is None or any(lo <= node.start and node.end <= hi for lo, hi in spans):
                    component.fill(node)

    def _cut_if_absent(self, path: list[Node], bound: int, component: Component) -> None:
        """Make ``bound`` a node boundary of ``path`` if the node containing it lacks
        ``component``'s data (a node with the data is kept whole: fill leaves it alone)."""
        for node in path:
            if node.start < bound < node.end:
                if not component.has(node):
                    self.boundary_on_path(path, bound)
                return

    def split_at(self, tokens: TokenInput, length: int, namespace: str | None = None) -> Node:
        """Make a node boundary at prefix ``length`` of ``tokens`` (which must be cached that
        deep) and return the node ending there. Mutates the tree (a split) when needed."""
        if length <= 0 or length % self.page_size:
            raise CacheUsageError(
                f"position {length} must be a positive multiple of page_size {self.page_size}"
            )
        key = encode_tokens(tokens)
        path, matched = self._walk(key[: length * TOKEN_BYTES], namespace)
        if matched < length:
            raise CacheUsageError(f"prefix length {length} is not cached (only {matched})")
        node = path[-1]
        if node.end > length:
            node = self._split(node, length)
        return node

    def boundary_on_path(self, path: list[Node], length: int) -> Node:
        """The node of ``path`` (contiguous nodes from the root, as ``insert`` or ``match``
        return them) that ends exactly at ``length``, splitting the node that contains it when
        needed; ``path`` is updated in place. No token comparison: the caller vouches that the
        path is current (no structural change since it was obtained, except through this
        method)."""
        if length <= 0 or length % self.page_size:
            raise CacheUsageError(
                f"position {length} must be a positive multiple of page_size {self.page_size}"
            )
        lo, hi = 0, len(path)
        while lo < hi:  # first node whose end >= length
            mid = (lo + hi) // 2
            if path[mid].end < length:
                lo = mid + 1
            else:
                hi = mid
        if lo == len(path) or path[lo].start >= length:
            raise CacheUsageError(f"prefix length {length} is not on the path")
        node = path[lo]
        if node.end > length:
            upper = self._split(node, length)
            path.insert(lo, upper)
            return upper
        return node

    def nodes_on(
        self, tokens: TokenInput, namespace: str | None = None, *, length: int | None = None
    ) -> list[Node]:
        """Nodes fully covered by the cached part of ``tokens[:length]`` (no mutation)."""
        key = encode_tokens(tokens)
        if length is not None:
            key = key[: length * TOKEN_BYTES]
        path, matched = self._walk(key, namespace)
        return [node for node in path if node.end <= matched]

    # ------------------------------------------------------------------ locks
    def lock(self, node: Node, *, hold_state: bool = True) -> None:
        """Pin ``node`` and its ancestors: none of them is removed and no attention KV on them
        is dropped until unlock. ``hold_state``: the lock also pins the state at ``node`` (a
        request will resume from it); a lock without it pins KV only (a request attends to
        that KV but never reads the state there)."""
        current: Node | None = node
        while current is not None and current.parent is not None:
            current.lock_ref += 1
            current = current.parent
        if node.parent is not None:
            node.end_ref += 1
            node.state_ref += hold_state

    def unlock(self, node: Node, *, hold_state: bool = True) -> None:
        """Undo one ``lock(node, hold_state=hold_state)``."""
        if node.parent is not None:
            if node.end_ref <= 0:
                raise CacheUsageError(f"unlock of {node}, where no lock ends")
            if node.state_ref < hold_state:
                raise CacheUsageError(f"state unlock of {node} without one")
            node.end_ref -= 1
            node.state_ref -= hold_state
        current: Node | None = node
        while current is not None and current.parent is not None:
            if current.lock_ref <= 0:
                raise IntegrityError(f"unlock of an unlocked {current}")
            current.lock_ref -= 1
            current = current.parent
        self.prune(node)

    # ------------------------------------------------------------------ removal
    @staticmethod
    def state_lock_ends_at(node: Node) -> bool:
        """Whether a state-holding lock ends at ``node`` (a request will resume from its
        state), rather than only passing through it."""
        return node.state_ref > 0

    @staticmethod
    def locks_passing(node: Node) -> int:
        """How many locks go on below ``node`` (pass through it rather than end there)."""
        return node.lock_ref - node.end_ref

    def pinned(self, node: Node, component: Component) -> bool:
        """Whether ``component``'s data on ``node`` must stay: attention KV on any locked node;
        a state only where a lock that holds it ends (the state a request resumes from)."""
        if not node.lock_ref:
            return False
        return component.pinned_on_path or self.state_lock_ends_at(node)

    def release(self, node: Node, component: Component) -> None:
        """Drop ``component``'s data on ``node``; a leaf left with no data at all is removed
        (and so on upwards). The data must not be pinned (see ``pinned``)."""
        if self.pinned(node, component):
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
            del parent.children[current.key[: self._page_bytes]]
            self.version += 1
            current.parent = None
            if not parent.children:
                for callback in self._leaf_watchers:
                    callback(parent)
            current = parent

    def remove_leaf(self, node: Node) -> None:
        """Remove an unlocked leaf with all its data. Mutates the tree."""
        if node.parent is None or node.children or node.lock_ref:
            raise CacheUsageError(f"remove_leaf of {node}: not an unlocked leaf")
        for component in self.components:
            component.release(node)
        self.prune(node)

    def clear(self) -> None:
        """Release every component's data and drop all nodes. No node may be locked."""
        for node in list(self.iter_nodes()):
            if node.lock_ref:
                raise CacheUsageError(f"clear() with locked {node}")
            for component in self.components:
                component.release(node)
        self._roots.clear()
        self.version += 1

    # ------------------------------------------------------------------ inspection
    def roots(self) -> list[Node]:
        """The root of every namespace in use."""
        return list(self._roots.values())

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
        """Check every structural invariant of the tree and of every component's data
        (:func:`hycache.tree.integrity.check_tree`)."""
        check_tree(self.page_size, self.components, self._roots)

    # ------------------------------------------------------------------ path-level drops
    def release_range(
        self,
        component: Component,
        tokens: TokenInput,
        start: int,
        end: int | None = None,
        namespace: str | None = None,
    ) -> int:
        """:func:`hycache.tree.drops.release_range` on this tree."""
        return release_range(self, component, tokens, start, end, namespace)

    def release_state_at(
        self,
        component: Component,
        tokens: TokenInput,
        length: int,
        namespace: str | None = None,
    ) -> bool:
        """:func:`hycache.tree.drops.release_state_at` on this tree."""
        return release_state_at(self, component, tokens, length, namespace)
