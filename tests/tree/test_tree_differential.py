"""Differential fuzzing: the radix tree (TreeTarget) against the brute-force ReferenceCache.

Random sequences of insert / slide (an insert that slides windows, from a random start) /
match / drop_recurrent / drop_swa / drop_full / lock / unlock run on both models with the same
arguments. After every step:

* both raised CacheUsageError or neither did;
* the cached content is identical (every (namespace, prefix) entry of every group), which also
  proves that a refused operation changed nothing on either side;
* ``match`` agrees on (hit, kv_hit) for the step's tokens (and for probes after a refusal);
* ``TreeTarget.check()`` passes (tree + store integrity, id conservation).

At the end of an example every lock is released, the models are compared once more on every
stem prefix, and ``tree.clear()`` must leave the store with no page and no slot in use.

Tokens come from a small alphabet and are cut from a few per-example "stems" plus a short
random tail, so shared prefixes, branches, mid-edge splits and re-inserts are frequent. About
10% of the steps use raw (possibly unaligned or out-of-range) positions, to check that both
models refuse the same things. In half of the examples every insert passes the tree's latest
``match`` of the same tokens as ``after=`` (fresh or stale), exercising that fast path too.

Every parametrization sets ``max_examples`` explicitly; ``HYCACHE_FUZZ_SCALE=N`` multiplies
them all for a longer soak run.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, note, settings
from hypothesis import strategies as st

from hycache.conformance.reference import GroupConfig, Key, ReferenceCache, Slide
from hycache.conformance.tree_target import TreeTarget
from hycache.errors import CacheUsageError
from hycache.tree.base import MatchResult
from hycache.tree.node import Node

ALPHABET = st.integers(0, 3)
NAMESPACES = (None, "a")
NAMESPACE = st.sampled_from([None, None, None, "a"])
RAW = st.integers(0, 9)

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
PAGES: dict[int, tuple[int, int]] = {1: (24, 110), 2: (24, 110), 16: (70, 80)}
# Marked slow (still in the default run): page 16 and the largest combos at pages 1 and 2.
HEAVY = {"FSR", "FSSR"}


@dataclass(frozen=True)
class Op:
    """One step. ``kind`` is insert | slide | match | drop_recurrent | drop_swa | drop_full |
    lock | unlock; the integer fields are interpreted per kind (see ``_run_op``)."""

    kind: str
    tokens: tuple[int, ...]
    namespace: str | None
    a: int = 0
    b: int = 0
    states: tuple[int, ...] = ()
    raw: bool = False  # use a/b as given (may be invalid) instead of deriving valid positions
    tier: int = 0  # the tier an insert or drop acts on, a copy's target
    source: int = 0  # a copy's source tier

    def __repr__(self) -> str:
        extra = f" a={self.a} b={self.b}"
        if self.kind in ("insert", "slide"):
            extra = f" states={self.states}" + (extra if self.kind == "slide" else "")
        raw = " raw" if self.raw else ""
        tier = f" tier={self.tier}" if self.tier else ""
        if self.kind == "copy":
            tier = f" tier={self.tier} source={self.source}"
        return f"{self.kind}({list(self.tokens)}, ns={self.namespace!r}{extra}{raw}{tier})"


class Example:
    """One generated run (a plain class so that hypothesis prints it with ``__repr__``)."""

    def __init__(
        self,
        groups: tuple[GroupConfig, ...],
        stems: tuple[tuple[int, ...], ...],
        ops: tuple[Op, ...],
        insert_after_match: bool,
        tiers: int = 1,
    ) -> None:
        self.groups = groups
        self.stems = stems
        self.ops = ops
        self.insert_after_match = insert_after_match
        self.tiers = tiers

    def __repr__(self) -> str:
        stems = [list(s) for s in self.stems]
        ops = "".join(f"\n  {op!r}," for op in self.ops)
        return (
            f"Example(groups={list(self.groups)}, stems={stems}, "
            f"insert_after_match={self.insert_after_match}, tiers={self.tiers}, ops=[{ops}\n])"
        )


def _windows(page: int) -> st.SearchStrategy[int]:
    if page == 16:  # also windows spanning several pages
        return st.one_of(st.integers(1, 6), st.sampled_from([15, 16, 17, 33]))
    return st.integers(1, 6)


@st.composite
def _op(
    draw: st.DrawFn,
    *,
    stems: tuple[tuple[int, ...], ...],
    max_len: int,
    stem_index: st.SearchStrategy[int],
    cut: st.SearchStrategy[int],
    tail: st.SearchStrategy[tuple[int, ...]],
    op_kind: st.SearchStrategy[str],
    position: st.SearchStrategy[int],
    states_at: st.SearchStrategy[tuple[int, ...]],
    has_recurrent: bool,
    tiers: int = 1,
) -> Op:
    """One step (module level: a composite decorated per example would re-read its source)."""
    kind = draw(op_kind)
    toks = (stems[draw(stem_index)][: draw(cut)] + draw(tail))[:max_len]
    ns = draw(NAMESPACE)
    raw = draw(RAW) == 9  # ~10%: raw, possibly invalid arguments
    a, b = draw(position), draw(position)
    states: tuple[int, ...] = ()
    if (kind in ("insert", "slide") and has_recurrent) or raw:
        states = draw(states_at)
    tier = source = 0
    if tiers > 1:  # drawn only with tiers: single-tier examples stay as they were
        tier, source = draw(st.integers(0, tiers - 1)), draw(st.integers(0, tiers - 1))
    return Op(kind, toks, ns, a, b, states, raw, tier, source)


@st.composite
def examples(
    draw: st.DrawFn, kinds: tuple[str, ...], page: int, max_len: int, tiers: int = 1
) -> Example:
    # groups: windows per SWA group (distinct when there are two), random order of groups
    windows: list[int] = []
    for kind in kinds:
        if kind == "swa":
            windows.append(draw(_windows(page).filter(lambda w: w not in windows)))
    it = iter(windows)
    groups = [GroupConfig(k, next(it) if k == "swa" else None) for k in kinds]
    groups = list(draw(st.permutations(groups)))

    # Stems share prefixes with each other (stem i+1 branches off stem i at a random depth,
    # on or off a page boundary), so their paths split the tree at many depths.
    stems: list[tuple[int, ...]] = []
    for i in range(3):
        keep = draw(st.integers(0, max_len)) if i else 0
        base = stems[-1][:keep] if i else ()
        fresh = draw(st.lists(ALPHABET, min_size=max_len - keep, max_size=max_len - keep))
        stems.append(base + tuple(fresh))
    # A few per-example cut points: with an empty tail the same paths recur (re-inserts,
    # drops and locks on paths cached before); other cuts and tails make fresh branches.
    if page == 1:
        any_cut = st.integers(0, max_len)
    else:  # mostly page boundaries, sometimes mid-page
        any_cut = st.one_of(
            st.integers(0, max_len // page).map(lambda n: n * page), st.integers(0, max_len)
        )
    cuts = draw(st.lists(any_cut, min_size=1, max_size=4))
    tail_size = page * 2 if page > 1 else 4

    # strategies built once per example (building them per op dominated the run time)
    stem_index = st.integers(0, len(stems) - 1)
    cut = st.one_of(st.sampled_from(cuts), any_cut)
    tail = st.one_of(st.just(()), st.lists(ALPHABET, max_size=tail_size).map(tuple))
    has_recurrent = "recurrent" in kinds
    weights = {"insert": 4, "slide": 3, "match": 1, "lock": 2, "unlock": 1}
    if tiers > 1:  # slides need one tier; copies move data between tiers
        del weights["slide"]
        weights["copy"] = 3
    for kind in ("full", "swa", "recurrent"):
        weights[f"drop_{kind}"] = 3 if kind in kinds else 1  # absent kinds: refused on both
    op_kind = st.sampled_from([k for k, w in weights.items() for _ in range(w)])
    position = st.integers(0, max_len + page)
    states_at = st.lists(position, max_size=4).map(tuple)

    op_strategy = _op(
        stems=tuple(stems),
        max_len=max_len,
        stem_index=stem_index,
        cut=cut,
        tail=tail,
        op_kind=op_kind,
        position=position,
        states_at=states_at,
        has_recurrent=has_recurrent,
        tiers=tiers,
    )
    # A list of chunks: about 20 ops on average (a flat list averages far fewer), and the
    # shrinker can still delete single ops or whole chunks.
    chunks = draw(st.lists(st.lists(op_strategy, min_size=1, max_size=8), min_size=1, max_size=8))
    ops = [o for chunk in chunks for o in chunk]
    return Example(tuple(groups), tuple(stems), tuple(ops), draw(st.booleans()), tiers)


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

    def __init__(
        self,
        page: int,
        groups: Sequence[GroupConfig],
        insert_after_match: bool = False,
        tiers: int = 1,
    ) -> None:
        self.page = page
        names = ("device", "host", "storage", "remote")[:tiers]
        self.tiered = tiers > 1
        self.tree = TreeTarget(page, groups, names)
        self.ref = ReferenceCache(page, groups, names)
        self.locks: list[tuple[int, int]] = []  # (tree handle, reference handle)
        # the tree's latest match result per (tokens, namespace), possibly stale by now
        self.last_match: dict[tuple[tuple[int, ...], str | None], MatchResult] = {}
        self.insert_after_match = insert_after_match
        if insert_after_match:
            # Every insert passes the latest match of the same tokens as ``after=`` (the fast
            # path that skips re-walking a freshly matched path). It may be stale: the tree
            # must then notice (structure version) and walk normally.
            tree = self.tree.tree
            plain_insert = tree.insert

            def insert(
                tokens: Sequence[int], namespace: str | None = None, **kw: Any
            ) -> list[Node]:
                kw.setdefault("after", self.last_match.get((tuple(tokens), namespace)))
                return plain_insert(tokens, namespace, **kw)

            tree.insert = insert  # type: ignore[method-assign]

    def compare_content(self, where: str) -> None:
        want = [live for tier in self.ref.tier_live for live in tier]
        assert tree_content(self.tree) == want, f"content differs {where}"

    def compare_match(self, tokens: Sequence[int], ns: str | None) -> None:
        found = self.tree.tree.match(tokens, ns)
        self.last_match[(tuple(tokens), ns)] = found
        got = (found.hit, found.kv_hit)
        want = self.ref.match(tokens, ns)
        assert got == want, f"match({list(tokens)}, ns={ns!r}): tree {got} != reference {want}"
        if self.tiered:
            tree_from = self.tree.sources(tokens, ns)
            ref_from = self.ref.sources(tokens, ns)
            assert tree_from == ref_from, f"sources({list(tokens)}): {tree_from} != {ref_from}"

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
        if pair.insert_after_match and op.b % 2:
            pair.compare_match(toks, ns)  # a fresh ``after`` for this insert
        outcome = pair.both(
            "insert",
            lambda: pair.tree.insert(toks, states, ns, tier=op.tier),
            lambda: pair.ref.insert(toks, states, ns, tier=op.tier),
        )
    elif op.kind == "slide":
        states = list(op.states) if op.raw else [pos(s, aligned_n) or page for s in op.states]
        if not op.raw:
            states = [s for s in states if s <= aligned_n]
        if op.raw:
            slide = Slide(op.a, op.b)
        else:  # half from 0, a third with every page boundary of a prefix a resume point
            start = 0 if op.b % 2 else pos(op.a, aligned_n)
            slide = Slide(start, pos(op.b, aligned_n) if op.b % 3 == 0 else 0)
        outcome = pair.both(
            "slide",
            lambda: pair.tree.insert(toks, states, ns, slide),
            lambda: pair.ref.insert(toks, states, ns, slide),
        )
    elif op.kind == "match":
        pass  # compared below
    elif op.kind == "drop_recurrent":
        at = pos(op.a, aligned_n) or page
        if not op.raw and at > n:
            at = 0  # nothing aligned fits: ask for 0 (an error on both sides)
        outcome = pair.both(
            "drop_recurrent",
            lambda: pair.tree.drop_recurrent(toks, at, ns, op.tier),
            lambda: pair.ref.drop_recurrent(toks, at, ns, op.tier),
        )
    elif op.kind == "drop_swa":
        if op.raw:
            start, end = op.a, op.b
        elif op.b % 2:  # a short tombstone of 1 to 3 pages
            start = pos(op.a, aligned_n)
            end = min(start + (op.b // 2 % 3 + 1) * page, aligned_n)
        else:
            start, end = sorted((pos(op.a, aligned_n), pos(op.b, aligned_n)))
        outcome = pair.both(
            "drop_swa",
            lambda: pair.tree.drop_swa(toks, start, end, ns, op.tier),
            lambda: pair.ref.drop_swa(toks, start, end, ns, op.tier),
        )
    elif op.kind == "drop_full":
        start = pos(op.a, aligned_n)
        outcome = pair.both(
            "drop_full",
            lambda: pair.tree.drop_full(toks, start, ns, op.tier),
            lambda: pair.ref.drop_full(toks, start, ns, op.tier),
        )
    elif op.kind == "copy":
        first = pair.tree.tree.tiers[0]  # half all components, half one group's kind
        kinds = None if op.b % 2 else [first[op.a % len(first)].kind]
        outcome = pair.both(
            "copy",
            lambda: pair.tree.copy(toks, op.tier, op.source, kinds, ns),
            lambda: pair.ref.copy(toks, op.tier, op.source, kinds, ns),
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
    pair = Pair(page, example.groups, example.insert_after_match, example.tiers)
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


SCALE = int(os.environ.get("HYCACHE_FUZZ_SCALE", "1"))
TOTAL_EXAMPLES = sum(n * len(COMBOS) for _, n in PAGES.values())
assert TOTAL_EXAMPLES >= 2000, TOTAL_EXAMPLES


@pytest.mark.parametrize(("page", "kinds", "max_len", "n_examples"), _params())
def test_tree_matches_reference(
    page: int, kinds: tuple[str, ...], max_len: int, n_examples: int
) -> None:
    @settings(
        max_examples=n_examples * SCALE,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        database=None,
    )
    @given(example=examples(kinds, page, max_len))
    def run(example: Example) -> None:
        run_example(page, example)

    run()


# Tiers (DESIGN.md section 4b): inserts and drops on a random tier, copies between tiers, and
# ``from`` / ``state_from`` compared after every step.
TIER_COMBOS = {"FR": COMBOS["FR"], "FSR": COMBOS["FSR"], "R": COMBOS["R"], "S": COMBOS["S"]}


def _tier_params() -> list[object]:
    params: list[object] = []
    for page in (1, 2):
        for name, kinds in TIER_COMBOS.items():
            marks = [pytest.mark.slow] if name == "FSR" else []
            params.append(pytest.param(page, kinds, id=f"tiers-p{page}-{name}", marks=marks))
    return params


@pytest.mark.parametrize(("page", "kinds"), _tier_params())
def test_tiered_tree_matches_reference(page: int, kinds: tuple[str, ...]) -> None:
    @settings(
        max_examples=60 * SCALE,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        database=None,
    )
    @given(example=examples(kinds, page, 20, tiers=3))
    def run(example: Example) -> None:
        run_example(page, example)

    run()
