"""Differential fuzzing: the radix tree (TreeTarget) against the brute-force ReferenceCache.

Random sequences of insert / match / drop_recurrent / drop_swa / drop_full / lock / unlock run
on both models with the same arguments. After every step:

* both raised CacheUsageError or neither did;
* the cached content is identical (every (namespace, prefix) entry of every group), which also
  proves that a refused operation changed nothing on either side;
* ``match`` agrees on (hit, kv_hit) for the step's tokens (and for probes after a refusal);
* ``TreeTarget.check()`` passes (tree + store integrity, id conservation).

At the end of an example every lock is released, the models are compared once more on every
stem prefix, and ``tree.clear()`` must leave the store with no page and no slot in use.

Tokens come from a small alphabet and are cut from a few per-example "stems" plus a short
random tail, so shared prefixes, branches, mid-edge splits and re-inserts are frequent.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, event, given, note, settings
from hypothesis import strategies as st

from hycache.errors import CacheUsageError
from hycache.testing.reference import GroupConfig, Key, ReferenceCache
from hycache.testing.tree_target import TreeTarget

ALPHABET = st.integers(0, 3)
NAMESPACES = (None, "a")

# Component combinations (kinds; windows are drawn per example). All 7 non-empty subsets of
# {full, swa, recurrent} plus two SWA groups of different windows, with and without FULL.
COMBOS: dict[str, tuple[str, ...]] = {
    "F": ("full",),
    "S": ("swa",),
    "R": ("recurrent",),
    "FS": ("full", "swa"),
    "FR": ("full", "recurrent"),
    "SR": ("swa", "recurrent"),
    "FSR": ("full", "swa", "recurrent"),
    "FSSR": ("full", "swa", "swa", "recurrent"),
    "SS": ("swa", "swa"),
}

# page size -> (max token length, examples per combo)
PAGES: dict[int, tuple[int, int]] = {1: (24, 110), 2: (24, 110), 16: (70, 50)}
HEAVY = {"FSR", "FSSR"}  # the slowest combos at page sizes 1 and 2 are marked slow


@dataclass(frozen=True)
class Op:
    """One step. ``kind`` is insert | match | drop_recurrent | drop_swa | drop_full | lock |
    unlock; the integer fields are interpreted per kind (see ``_run_op``)."""

    kind: str
    tokens: tuple[int, ...]
    namespace: str | None
    a: int = 0
    b: int = 0
    states: tuple[int, ...] = ()
    raw: bool = False  # use a/b as given (may be invalid) instead of deriving valid positions

    def __repr__(self) -> str:
        extra = f" a={self.a} b={self.b}" if self.kind != "insert" else f" states={self.states}"
        raw = " raw" if self.raw else ""
        return f"{self.kind}({list(self.tokens)}, ns={self.namespace!r}{extra}{raw})"


class Example:
    """One generated run (a plain class so that hypothesis prints it with ``__repr__``)."""

    def __init__(
        self,
        groups: tuple[GroupConfig, ...],
        stems: tuple[tuple[int, ...], ...],
        ops: tuple[Op, ...],
    ) -> None:
        self.groups = groups
        self.stems = stems
        self.ops = ops

    def __repr__(self) -> str:
        stems = [list(s) for s in self.stems]
        ops = "".join(f"\n  {op!r}," for op in self.ops)
        return f"Example(groups={list(self.groups)}, stems={stems}, ops=[{ops}\n])"


def _windows(page: int) -> st.SearchStrategy[int]:
    if page == 16:  # also windows spanning several pages
        return st.one_of(st.integers(1, 6), st.sampled_from([15, 16, 17, 33]))
    return st.integers(1, 6)


@st.composite
def examples(draw: st.DrawFn, kinds: tuple[str, ...], page: int, max_len: int) -> Example:
    # groups: windows per SWA group (distinct when there are two), random order of groups
    windows: list[int] = []
    for kind in kinds:
        if kind == "swa":
            windows.append(draw(_windows(page).filter(lambda w: w not in windows)))
    it = iter(windows)
    groups = [GroupConfig(k, next(it) if k == "swa" else None) for k in kinds]
    groups = list(draw(st.permutations(groups)))

    stems = tuple(
        tuple(draw(st.lists(ALPHABET, min_size=max_len, max_size=max_len))) for _ in range(3)
    )

    @st.composite
    def tokens(draw: st.DrawFn) -> tuple[int, ...]:
        stem = stems[draw(st.integers(0, len(stems) - 1))]
        if page == 1:
            cut = draw(st.integers(0, max_len))
        else:  # mostly page boundaries, sometimes mid-page
            cut = draw(
                st.one_of(
                    st.integers(0, max_len // page).map(lambda n: n * page),
                    st.integers(0, max_len),
                )
            )
        tail = draw(st.lists(ALPHABET, max_size=page * 2 if page > 1 else 4))
        return (stem[:cut] + tuple(tail))[:max_len]

    namespace = st.sampled_from(NAMESPACES)
    has_recurrent = "recurrent" in kinds
    op_kinds = ["insert", "insert", "insert", "match", "lock", "unlock"]
    op_kinds += ["drop_recurrent"] * (2 if has_recurrent else 0)
    op_kinds += ["drop_swa"] * (2 if "swa" in kinds else 0)
    op_kinds += ["drop_full"] * (2 if "full" in kinds else 0)
    op_kinds += ["drop_recurrent", "drop_swa", "drop_full"]  # rarely: maybe an absent kind

    ops: list[Op] = []
    for _ in range(draw(st.integers(1, 30))):
        kind = draw(st.sampled_from(op_kinds))
        toks = draw(tokens())
        ns = draw(namespace)
        raw = draw(st.integers(0, 9)) == 0  # ~10%: raw, possibly invalid arguments
        a = draw(st.integers(0, max_len + page))
        b = draw(st.integers(0, max_len + page))
        states: tuple[int, ...] = ()
        if kind == "insert" and has_recurrent or raw:
            states = tuple(draw(st.lists(st.integers(0, max_len + page), max_size=3)))
        ops.append(Op(kind, toks, ns, a, b, states, raw))
    return Example(tuple(groups), stems, tuple(ops))


# ---------------------------------------------------------------------- model comparison
def tree_content(target: TreeTarget) -> list[set[Key]]:
    """What the tree caches, in the reference's terms: per group, the set of keys
    ``(namespace, prefix)``. A KV position q is its prefix to the end of q's page (two paths
    that diverge inside a page hold different pages), a state at p is ``tokens[:p]``."""
    tree = target.tree
    content: list[set[Key]] = [set() for _ in tree.components]
    for node in tree.iter_nodes():
        prefix: list[int] = []
        for n in node.path_from_root():
            prefix.extend(n.tokens)
        for i, component in enumerate(tree.components):
            if node.data[component.slot] is None:
                continue
            if component.kind == "recurrent":
                content[i].add((node.namespace, tuple(prefix)))
            else:
                for q in range(node.start, node.end):
                    page_end = (q // tree.page_size + 1) * tree.page_size
                    content[i].add((node.namespace, tuple(prefix[:page_end])))
    return content


def _outcome(fn: Callable[[], object]) -> tuple[str, object]:
    try:
        return "ok", fn()
    except CacheUsageError as exc:
        return "error", str(exc)


class Pair:
    """Both models, driven in lockstep."""

    def __init__(self, page: int, groups: Sequence[GroupConfig]) -> None:
        self.page = page
        self.tree = TreeTarget(page, groups)
        self.ref = ReferenceCache(page, groups)
        self.locks: list[tuple[int, int]] = []  # (tree handle, reference handle)

    def compare_content(self, where: str) -> None:
        assert tree_content(self.tree) == self.ref.live, f"content differs {where}"

    def compare_match(self, tokens: Sequence[int], ns: str | None) -> None:
        got = self.tree.match(tokens, ns)
        want = self.ref.match(tokens, ns)
        assert got == want, f"match({list(tokens)}, ns={ns!r}): tree {got} != reference {want}"

    def cached_positions(self, tokens: Sequence[int], ns: str | None) -> list[int]:
        """Page-aligned lengths in (0, matched] of the tree's token path."""
        matched = self.tree.tree.match(list(tokens), ns).matched
        return list(range(self.page, matched + 1, self.page))

    def both(self, name: str, tree_fn: Callable[[], object], ref_fn: Callable[[], object]) -> str:
        t = _outcome(tree_fn)
        r = _outcome(ref_fn)
        assert t[0] == r[0], f"{name}: tree {t} but reference {r}"
        kind = name.split("(")[0]
        event(f"{kind}: {t[0]}")
        if t[0] == "error" and "lock" in str(t[1]) and kind != "lock":
            event(f"{kind}: refused by a lock")
        return t[0]


def _run_op(pair: Pair, op: Op, stems: Sequence[tuple[int, ...]]) -> None:
    page = pair.page
    toks, ns = list(op.tokens), op.namespace
    n = len(toks)
    aligned_n = n - n % page

    def pos(x: int, limit: int) -> int:
        """A page-aligned position in [0, limit] derived from x (x itself when raw)."""
        if op.raw:
            return x
        return (x % (limit // page + 1)) * page

    outcome = "ok"
    if op.kind == "insert":
        states = list(op.states) if op.raw else [pos(s, aligned_n) or page for s in op.states]
        if not op.raw:
            states = [s for s in states if s <= aligned_n]
        outcome = pair.both(
            "insert", lambda: pair.tree.insert(toks, states, ns), lambda: pair.ref.insert(toks, states, ns)
        )
    elif op.kind == "match":
        pass  # compared below
    elif op.kind == "drop_recurrent":
        at = pos(op.a, aligned_n) or page
        if not op.raw and at > n:
            at = 0  # nothing aligned fits: ask for 0 (an error on both sides)
        outcome = pair.both(
            "drop_recurrent",
            lambda: pair.tree.drop_recurrent(toks, at, ns),
            lambda: pair.ref.drop_recurrent(toks, at, ns),
        )
    elif op.kind == "drop_swa":
        start, end = sorted((pos(op.a, aligned_n), pos(op.b, aligned_n)))
        if op.raw:
            start, end = op.a, op.b
        outcome = pair.both(
            "drop_swa",
            lambda: pair.tree.drop_swa(toks, start, end, ns),
            lambda: pair.ref.drop_swa(toks, start, end, ns),
        )
    elif op.kind == "drop_full":
        start = pos(op.a, aligned_n)
        outcome = pair.both(
            "drop_full",
            lambda: pair.tree.drop_full(toks, start, ns),
            lambda: pair.ref.drop_full(toks, start, ns),
        )
    elif op.kind == "lock":
        candidates = pair.cached_positions(toks, ns)
        if op.raw:
            length = op.a
        elif candidates:
            length = candidates[op.a % len(candidates)]
        else:
            return  # nothing cached on this path: no valid lock
        handles: dict[str, int] = {}

        def lock_tree() -> None:
            handles["tree"] = pair.tree.lock(toks, length, ns)

        def lock_ref() -> None:
            handles["ref"] = pair.ref.lock(toks, length, ns)

        outcome = pair.both(f"lock(length={length})", lock_tree, lock_ref)
        if outcome == "ok":
            pair.locks.append((handles["tree"], handles["ref"]))
    elif op.kind == "unlock":
        if not pair.locks:
            return
        th, rh = pair.locks.pop(op.a % len(pair.locks))
        pair.tree.unlock(th)
        pair.ref.unlock(rh)
    else:  # pragma: no cover
        raise AssertionError(op.kind)

    pair.tree.check()
    pair.compare_content(f"after {op!r} ({outcome})")
    pair.compare_match(toks, ns)
    if outcome == "error":  # a refused step: probe more paths, nothing may have changed
        for stem in stems:
            for probe_ns in NAMESPACES:
                pair.compare_match(stem, probe_ns)


def run_example(page: int, example: Example) -> None:
    note(f"page_size={page} groups={example.groups}")
    note(f"stems={[list(s) for s in example.stems]}")
    pair = Pair(page, example.groups)
    for i, op in enumerate(example.ops):
        note(f"step {i}: {op!r}")
        _run_op(pair, op, example.stems)

    # unlock everything, compare on every stem prefix, then clear
    while pair.locks:
        th, rh = pair.locks.pop()
        pair.tree.unlock(th)
        pair.ref.unlock(rh)
        pair.tree.check()
    pair.compare_content("after unlocking everything")
    for stem in example.stems:
        for ns in NAMESPACES:
            for cut in range(0, len(stem) + 1, page):
                pair.compare_match(stem[:cut], ns)
    pair.tree.tree.clear()
    pair.tree.check()
    assert pair.tree.store.pages_in_use == 0
    assert pair.tree.store.slots_in_use == 0
    assert list(pair.tree.tree.iter_nodes()) == []


# ---------------------------------------------------------------------- the tests
def _params() -> list[object]:
    params: list[object] = []
    for page, (max_len, n_examples) in PAGES.items():
        for name, kinds in COMBOS.items():
            marks = [pytest.mark.slow] if page == 16 or name in HEAVY else []
            params.append(
                pytest.param(page, kinds, max_len, n_examples, id=f"p{page}-{name}", marks=marks)
            )
    return params


TOTAL_EXAMPLES = sum(n * len(COMBOS) for _, n in PAGES.values())
assert TOTAL_EXAMPLES >= 2000, TOTAL_EXAMPLES


@pytest.mark.parametrize(("page", "kinds", "max_len", "n_examples"), _params())
def test_tree_matches_reference(
    page: int, kinds: tuple[str, ...], max_len: int, n_examples: int
) -> None:
    @settings(
        max_examples=n_examples,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        database=None,
    )
    @given(example=examples(kinds, page, max_len))
    def run(example: Example) -> None:
        run_example(page, example)

    run()
