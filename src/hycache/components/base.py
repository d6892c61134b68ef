"""The component contract: one component per layer group, attached to the radix tree.

The tree only knows token paths. Everything a layer group keeps (KV pages, states) lives in a
component, in ``node.data[component.slot]``. A new kind of layer is a new component; the tree
does not change. The tree calls:

* ``fill(node)``         on every node an insert covers: make this component's data for the
                         node's positions present (allocating), if the component keeps data for
                         every inserted position (attention KV). Recurrent states are not filled
                         here; they are put explicitly at node ends.
* ``split(upper, lower)`` after a node ``[s, e)`` became ``upper [s, m)`` + ``lower [m, e)``;
                         ``lower`` is the original node object and still holds the data.
* ``release(node)``      drop this component's data on the node (freeing it); no-op if absent.
* ``deepest_accepted(path, bound)``  the validator: the deepest page-aligned prefix length
                         ``p <= bound`` this component can restore along ``path`` (nodes from the
                         root down, the last possibly only partly matched). 0 always qualifies.
* ``deepest_accepted_in(path, bound, slots)``  the same validator over the union of the
                         data in ``slots`` (the group's slots on every tier, see
                         :mod:`hycache.tree.tiers`).
* ``check_node(node)``   check the component's invariants on one node (IntegrityError).

An insert that slides windows (``RadixTree.insert(..., slide=plan)``, see
:mod:`hycache.tree.window`) asks two more things: ``fill_ranges(anchors, start, end, prefix)``, the
positions whose data the insert makes present (None: every position, the default), and
``units_for(tokens)``, the store units that data takes for ``tokens`` positions (to size the
insert before it runs). ``marks_resume_point`` says that the component's data at a node is a
point a later request can resume from (a recurrent state): an anchor of the window rule.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import ClassVar

from hycache.compiled import mypyc_attr, own_abc_caches
from hycache.errors import CacheUsageError
from hycache.tree.node import Node


@mypyc_attr(allow_interpreted_subclasses=True)
class Component(ABC):
    """Base class of the per-layer-group components. Subclasses set ``kind``."""

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        own_abc_caches(cls)

    kind: ClassVar[str]
    #: True when the component's data covers every inserted position (attention KV) and so
    #: bounds the attention-only match length; False for checkpoint-style data (states).
    bounds_kv: ClassVar[bool] = False
    #: True when a lock passing through a node pins this component's data there (attention
    #: KV: the request reads it); False when only a lock ending at the node does (a state:
    #: a request only copies the state it resumes from, as SGLang's MAMBA locks one node).
    pinned_on_path: ClassVar[bool] = True
    #: True when data at a node is a point a request can resume from (a recurrent state at
    #: ``node.end``): inserts that slide windows keep attention windows before such points.
    marks_resume_point: ClassVar[bool] = False

    #: where this component's data lives in ``node.data``: a plain attribute (read on every
    #: hot path), set by ``bind`` (AttributeError before)
    slot: int

    def __init__(self, name: str | None = None) -> None:
        self.name = name or self.kind
        self.page_size = 1
        self.bound = False

    def bind(self, slot: int, page_size: int) -> None:
        """Called once by the tree: where this component's data lives in ``node.data``."""
        if self.bound:
            raise CacheUsageError(f"component {self.name} is already bound to a tree")
        self.bound = True
        self.slot = slot
        self.page_size = page_size

    def has(self, node: Node) -> bool:
        """Whether this component holds data on ``node``."""
        return node.data[self.slot] is not None

    def fill(self, node: Node) -> bool:
        """Make data present for the node's positions; return True if it was newly made."""
        return False

    def copy_onto(self, node: Node) -> bool:
        """Make this component's data present on ``node`` as a copy of another tier's (the
        tree checked that tier holds it); True if newly made. Default: ``fill``."""
        return self.fill(node)

    def units_for(self, tokens: int) -> int:
        """Store units ``fill`` takes for ``tokens`` (page-aligned) positions; 0 if it fills
        nothing."""
        return 0

    def fill_ranges(
        self, anchors: Sequence[int], start: int, end: int, prefix: int = 0
    ) -> Sequence[tuple[int, int]] | None:
        """For an insert of ``[0, end)`` that slides windows: the page-aligned, sorted,
        disjoint position ranges whose data it makes present, given the points a later request
        could resume at (``anchors``, each in ``(0, end]``; besides, every page boundary below
        ``prefix``) and the first position the inserting request computed (``start``). None
        (the default): every position of the path, as a plain insert."""
        return None

    @abstractmethod
    def split(self, upper: Node, lower: Node) -> None: ...

    @abstractmethod
    def release(self, node: Node) -> None: ...

    @abstractmethod
    def deepest_accepted(self, path: Sequence[Node], bound: int) -> int: ...

    @abstractmethod
    def deepest_accepted_in(self, path: Sequence[Node], bound: int, slots: Sequence[int]) -> int:
        """``deepest_accepted`` over the union of ``slots`` (the same group on several tiers):
        data counts as present on a node when any of those slots holds it."""

    def bytes_on(self, node: Node) -> int:
        """Bytes this component holds on ``node`` (0 when the component is not sized)."""
        return 0

    @abstractmethod
    def check_node(self, node: Node) -> None:
        """Check the component's invariants on ``node``; IntegrityError if one is broken."""


own_abc_caches(Component)
