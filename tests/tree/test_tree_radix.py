"""Focused unit tests of the radix tree: splits, locks, pruning, namespaces, pages, purity,
and that ``check_integrity`` really fails on a corrupted tree."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from hycache.components.base import Component
from hycache.components.full import FullComponent
from hycache.components.recurrent import RecurrentComponent
from hycache.components.swa import SlidingWindowComponent
from hycache.errors import CacheUsageError, IntegrityError
from hycache.memory.unbounded import UnboundedStore
from hycache.tree.keys import encode_tokens
from hycache.tree.node import Node
from hycache.tree.radix import RadixTree


class Fixture:
    """A tree with FULL, SWA (window 3) and RECURRENT components on one store."""

    def __init__(self, page_size: int = 1, kinds: tuple[str, ...] = ("full", "swa", "recurrent")):
        self.store = UnboundedStore()
        components: list[Component] = []
        for kind in kinds:
            if kind == "full":
                components.append(FullComponent(self.store))
            elif kind == "swa":
                components.append(SlidingWindowComponent(self.store, 3))
            else:
                components.append(RecurrentComponent(self.store))
        self.tree = RadixTree(page_size, components)

    def component(self, kind: str) -> Component:
        (found,) = [c for c in self.tree.components if c.kind == kind]
        return found

    @property
    def recurrent(self) -> RecurrentComponent:
        found = self.component("recurrent")
        assert isinstance(found, RecurrentComponent)
        return found

    def put_state(self, tokens: list[int], at: int, namespace: str | None = None) -> Node:
        node = self.tree.split_at(tokens, at, namespace)
        self.recurrent.put(node)
        return node

    def check(self) -> None:
        self.tree.check_integrity()
        self.store.check_integrity()


def snapshot(tree: RadixTree) -> object:
    """Everything observable about the tree's structure and data, as plain values."""

    def of(node: Node) -> object:
        children = sorted((k, of(c)) for k, c in node.children.items())
        data = tuple(list(d) if isinstance(d, list) else d for d in node.data)
        return (
            node.start,
            node.end,
            node.key,
            repr(data),
            node.lock_ref,
            node.namespace,
            node.last_access,
            node.hits,
            id(node),
            tuple(children),
        )

    return (
        tree.version,
        sorted(((repr(ns), of(root)) for ns, root in tree._roots.items()), key=str),
    )


# ---------------------------------------------------------------------- splits
def test_split_keeps_pages_and_leaves_state_at_lower_node() -> None:
    f = Fixture(page_size=2)
    tokens = [1, 2, 3, 4, 5, 6, 7, 8]
    (node,) = f.tree.insert(tokens)
    f.recurrent.put(node)
    full, swa = f.component("full"), f.component("swa")
    full_pages = list(node.data[full.slot])
    swa_pages = list(node.data[swa.slot])
    state = node.data[f.recurrent.slot]
    assert len(full_pages) == len(swa_pages) == 4
    in_use = (f.store.pages_in_use, f.store.slots_in_use)

    upper = f.tree.split_at(tokens, 4)

    assert upper is not node and node.parent is upper
    assert (upper.start, upper.end, node.start, node.end) == (0, 4, 4, 8)
    assert upper.tokens == (1, 2, 3, 4) and node.tokens == (5, 6, 7, 8)
    assert list(upper.data[full.slot]) == full_pages[:2]
    assert list(node.data[full.slot]) == full_pages[2:]
    assert list(upper.data[swa.slot]) == swa_pages[:2]
    assert list(node.data[swa.slot]) == swa_pages[2:]
    assert upper.data[f.recurrent.slot] is None  # the state is at prefix 8: the lower node
    assert node.data[f.recurrent.slot] == state
    assert (f.store.pages_in_use, f.store.slots_in_use) == in_use  # nothing allocated or freed
    f.check()
    assert f.tree.match(tokens).hit == 8
    assert f.tree.match(tokens[:6]).hit == 0  # no state at 4 or 6


def test_insert_diverging_mid_edge_splits_and_keeps_data() -> None:
    f = Fixture(page_size=2)
    a = [1, 2, 3, 4, 5, 6]
    b = [1, 2, 3, 4, 9, 9, 9, 9]
    (node,) = f.tree.insert(a)
    f.recurrent.put(node)
    full = f.component("full")
    pages = list(node.data[full.slot])

    path = f.tree.insert(b)

    assert [(n.start, n.end) for n in path] == [(0, 4), (4, 8)]
    upper = path[0]
    assert node.parent is upper and list(upper.data[full.slot]) == pages[:2]
    assert list(node.data[full.slot]) == pages[2:] and node.data[f.recurrent.slot] is not None
    assert sorted(c.end for c in upper.children.values()) == [6, 8]
    f.check()
    assert f.tree.match(a).hit == 6 and f.tree.match(b).kv_hit == 8


# ---------------------------------------------------------------------- locks
def test_lock_prevents_release() -> None:
    f = Fixture()
    tokens = [1, 2, 3, 4, 5, 6]
    f.tree.insert(tokens)
    node = f.put_state(tokens, 6)
    f.tree.lock(node)
    full = f.component("full")

    with pytest.raises(CacheUsageError):
        f.tree.release(node, full)
    with pytest.raises(CacheUsageError):
        f.tree.release_state_at(f.recurrent, tokens, 6)
    with pytest.raises(CacheUsageError):
        f.tree.release_range(f.component("swa"), tokens, 0, 6)
    assert node.data[full.slot] is not None and node.data[f.recurrent.slot] is not None
    f.check()

    # an ancestor is pinned too
    upper = f.tree.split_at(tokens, 2)
    assert upper.lock_ref == 1
    with pytest.raises(CacheUsageError):
        f.tree.release(upper, full)

    f.tree.unlock(node)
    assert f.tree.release_state_at(f.recurrent, tokens, 6)
    f.tree.release_range(full, tokens, 0)
    f.check()
    assert f.tree.match(tokens).kv_hit == 0


def test_a_passing_lock_pins_kv_but_not_the_states_it_passes() -> None:
    """A request locks its path to the state it resumes from: the KV on the path and that
    state stay; a state higher up that the request does not use may go (SGLang's MAMBA
    locks one node)."""
    f = Fixture()
    tokens = [1, 2, 3, 4, 5, 6, 7, 8]
    f.tree.insert(tokens)
    upper = f.put_state(tokens, 4)
    lower = f.put_state(tokens, 8)
    f.tree.lock(lower)
    full = f.component("full")
    assert f.tree.state_lock_ends_at(lower) and not f.tree.state_lock_ends_at(upper)
    assert f.tree.pinned(upper, full) and not f.tree.pinned(upper, f.recurrent)
    assert f.tree.pinned(lower, f.recurrent)
    with pytest.raises(CacheUsageError):
        f.tree.release(upper, full)
    with pytest.raises(CacheUsageError):
        f.tree.release(lower, f.recurrent)
    f.tree.release(upper, f.recurrent)
    assert not f.recurrent.has(upper) and f.recurrent.has(lower)
    f.check()
    # a second request resuming at 4 pins that state again
    again = f.put_state(tokens, 4)
    f.tree.lock(again)
    assert f.tree.pinned(again, f.recurrent)
    with pytest.raises(CacheUsageError):
        f.tree.release(again, f.recurrent)
    f.tree.unlock(again)
    f.tree.unlock(lower)
    f.check()


def test_a_kv_only_lock_pins_kv_but_not_the_state_where_it_ends() -> None:
    """``lock(hold_state=False)``: a request attends to the KV up to the node but will never
    read the state there (it resumed higher up, or its prefill is done): the KV stays, the
    state may go; a state-holding lock on the same node pins it again."""
    f = Fixture()
    tokens = [1, 2, 3, 4, 5, 6, 7, 8]
    f.tree.insert(tokens)
    node = f.put_state(tokens, 8)
    full = f.component("full")
    f.tree.lock(node, hold_state=False)
    assert node.lock_ref == 1 and not f.tree.state_lock_ends_at(node)
    assert f.tree.pinned(node, full) and not f.tree.pinned(node, f.recurrent)
    f.check()
    f.tree.lock(node)
    assert f.tree.pinned(node, f.recurrent)
    with pytest.raises(CacheUsageError):
        f.tree.release(node, f.recurrent)
    f.tree.unlock(node)
    f.tree.release(node, f.recurrent)
    assert not f.recurrent.has(node)
    with pytest.raises(CacheUsageError):
        f.tree.release(node, full)
    f.check()
    f.tree.unlock(node, hold_state=False)
    f.check()


def test_integrity_catches_a_state_lock_without_a_lock() -> None:
    f = Fixture()
    tokens = [1, 2, 3, 4]
    f.tree.insert(tokens)
    node = f.put_state(tokens, 4)
    node.state_ref = 1  # corrupt: a state lock that no lock ending here carries
    with pytest.raises(IntegrityError, match="state locks beyond"):
        f.tree.check_integrity()


def test_unlock_prunes_empty_leaves() -> None:
    # Recurrent only: an inserted path holds no data until a state is put on it, so a locked
    # path without states is made of empty nodes that only the lock keeps alive.
    f = Fixture(kinds=("recurrent",))
    tokens = [1, 2, 3, 4]
    path = f.tree.insert(tokens)
    f.tree.split_at(tokens, 2)
    path = f.tree.nodes_on(tokens)
    assert [(n.start, n.end) for n in path] == [(0, 2), (2, 4)]
    f.tree.lock(path[-1])
    f.check()
    assert f.tree.match(tokens).matched == 4

    f.tree.unlock(path[-1])

    assert list(f.tree.iter_nodes()) == []  # the leaf and its empty parent are gone
    f.check()
    assert f.tree.match(tokens).matched == 0
    assert f.store.slots_in_use == 0


def test_unlock_keeps_leaves_with_data_and_nodes_with_children() -> None:
    f = Fixture(kinds=("recurrent",))
    a, b = [1, 2, 3, 4], [1, 2, 7, 7]
    f.tree.insert(a)
    f.put_state(a, 4)
    path_b = f.tree.insert(b)
    f.tree.lock(path_b[-1])
    f.tree.unlock(path_b[-1])  # [2,4) of b is empty: pruned; [0,2) still has a child
    nodes = sorted((n.start, n.end, n.tokens) for n in f.tree.iter_nodes())
    assert nodes == [(0, 2, (1, 2)), (2, 4, (3, 4))]
    f.check()


def test_unlock_of_unlocked_node_is_refused() -> None:
    f = Fixture()
    (node,) = f.tree.insert([1, 2])
    with pytest.raises(CacheUsageError):
        f.tree.unlock(node)


# ---------------------------------------------------------------------- namespaces
def test_namespaces_are_isolated() -> None:
    f = Fixture()
    tokens = [1, 2, 3, 4]
    f.tree.insert(tokens, "a")
    f.put_state(tokens, 4, "a")
    assert f.tree.match(tokens, "a").hit == 4
    assert f.tree.match(tokens).kv_hit == 0 and f.tree.match(tokens, "b").kv_hit == 0

    f.tree.insert(tokens)  # same tokens, default namespace: separate nodes and pages
    assert f.tree.match(tokens).kv_hit == 4 and f.tree.match(tokens).hit == 0
    a_nodes = [n for n in f.tree.iter_nodes() if n.namespace == "a"]
    none_nodes = [n for n in f.tree.iter_nodes() if n.namespace is None]
    assert len(a_nodes) == len(none_nodes) == 1
    full = f.component("full")
    assert set(a_nodes[0].data[full.slot]).isdisjoint(none_nodes[0].data[full.slot])

    f.tree.release_range(full, tokens, 0)  # default namespace only
    assert f.tree.match(tokens).kv_hit == 0
    assert f.tree.match(tokens, "a").hit == 4
    assert not f.tree.release_state_at(f.recurrent, tokens, 4)  # no state in the default ns
    assert f.tree.match(tokens, "a").hit == 4
    f.check()


# ---------------------------------------------------------------------- pages
def test_partial_last_page_is_not_cached() -> None:
    f = Fixture(page_size=4)
    tokens = list(range(10))  # two full pages + 2 tokens
    path = f.tree.insert(tokens)
    assert path[-1].end == 8
    assert f.store.pages_in_use == 2 * 2  # FULL + SWA, two pages each
    assert f.tree.match(tokens).kv_hit == 8
    assert f.tree.match([*tokens, 10, 11]).kv_hit == 8  # positions 8, 9 were never cached
    assert f.tree.insert([0, 1, 2]) == []  # less than a page: nothing at all
    assert f.tree.match([0, 1, 2]).kv_hit == 0
    with pytest.raises(CacheUsageError):
        f.put_state(tokens, 10)  # unaligned
    with pytest.raises(CacheUsageError):
        f.put_state(tokens, 12)  # beyond the cached pages
    # diverging inside the second page: only the first page is shared
    other = [0, 1, 2, 3, 4, 5, 9, 9]
    assert f.tree.match(other).kv_hit == 4
    f.tree.insert(other)
    assert f.tree.match(other).kv_hit == 8 and f.tree.match(tokens).kv_hit == 8
    f.check()


# ---------------------------------------------------------------------- purity
def test_match_is_pure() -> None:
    f = Fixture(page_size=2)
    a = [1, 2, 3, 4, 5, 6, 7, 8]
    b = [1, 2, 3, 4, 9, 9]
    f.tree.insert(a)
    f.put_state(a, 8)
    f.tree.insert(b)
    f.put_state(b, 6)
    f.tree.insert(a, "ns")
    f.tree.release_range(f.component("swa"), a, 2, 4)  # a tombstone
    f.tree.lock(f.tree.nodes_on(b)[-1])
    before = snapshot(f.tree)
    pages, slots = f.store.pages_in_use, f.store.slots_in_use
    nodes = len(list(f.tree.iter_nodes()))

    queries: list[tuple[list[int], str | None]] = [
        (a, None),
        (b, None),
        (a[:5], None),  # partial page
        (a[:6], None),  # ends mid-edge
        ([1, 2, 3, 4, 5, 7], None),  # diverges inside a page
        ([1, 2, 9, 9], None),
        ([], None),
        (a, "ns"),
        (b, "ns"),
        (a, "never-seen"),  # must not create a root
    ]
    for tokens, ns in queries:
        f.tree.match(tokens, ns)

    assert snapshot(f.tree) == before
    assert len(list(f.tree.iter_nodes())) == nodes
    assert (f.store.pages_in_use, f.store.slots_in_use) == (pages, slots)
    assert "never-seen" not in f.tree.namespaces()
    f.check()


# ---------------------------------------------------------------------- the checker can fail
def _built() -> Fixture:
    f = Fixture(page_size=2)
    a = [1, 2, 3, 4, 5, 6]
    f.tree.insert(a)
    f.put_state(a, 6)
    f.tree.insert([1, 2, 3, 4, 7, 7])  # node [0,4) with children [4,6) x2
    f.check()
    return f


def _a_child(f: Fixture) -> tuple[Node, Node]:
    """(parent, child) for the deepest node of the path [1,2,3,4,5,6]."""
    node = f.tree.nodes_on([1, 2, 3, 4, 5, 6])[-1]
    assert node.parent is not None
    return node.parent, node


def _wrong_key(f: Fixture) -> None:
    parent, child = _a_child(f)
    del parent.children[child.key[: 2 * 8]]
    parent.children[encode_tokens([9, 9])] = child


def _wrong_start(f: Fixture) -> None:
    _, child = _a_child(f)
    child.start += 2
    child.end += 2


def _wrong_parent(f: Fixture) -> None:
    parent, child = _a_child(f)
    assert parent.parent is not None
    child.parent = parent.parent


def _wrong_page_count(f: Fixture) -> None:
    _, child = _a_child(f)
    slot = f.component("full").slot
    child.data[slot] = [*child.data[slot], 12345]


def _lock_below_children(f: Fixture) -> None:
    _, child = _a_child(f)
    child.lock_ref = 1  # as if lock() had not walked up to the parent


def _empty_leaf(f: Fixture) -> None:
    _, child = _a_child(f)
    for component in f.tree.components:
        component.release(child)  # bypassing tree.release: no prune


def _state_on_root(f: Fixture) -> None:
    f.tree.root(None).data[f.recurrent.slot] = 0


def _unaligned_edge(f: Fixture) -> None:
    _, child = _a_child(f)
    child.key = child.key[:8]  # one token on a page-2 tree
    child.end = child.start + 1


@pytest.mark.parametrize(
    ("corrupt", "message"),
    [
        (_wrong_key, "filed under a wrong key"),
        (_wrong_start, None),
        (_wrong_parent, "wrong parent"),
        (_wrong_page_count, "pages for"),
        (_lock_below_children, "lock_ref below"),
        (_empty_leaf, "was not pruned"),
        (_state_on_root, None),
        (_unaligned_edge, None),
    ],
)
def test_check_integrity_catches_corruption(
    corrupt: Callable[[Fixture], None], message: str | None
) -> None:
    f = _built()
    f.tree.check_integrity()
    corrupt(f)
    with pytest.raises(IntegrityError, match=message):
        f.tree.check_integrity()
