"""Conformance scenarios (DESIGN.md section 4): load, validate, run against a cache.

A scenario file is JSON: ``name``, ``page_size``, ``groups`` and ``steps``; each step is an
``insert``, a ``match`` (with expected ``hit`` and ``kv_hit``) or a ``drop``. An insert with
``"slide": true`` slides windows as a finishing request does: SWA KV no later request can read
is inserted as a tombstone (the rule: :mod:`hycache.components.swa`); ``"slide": {"from": p,
"prefix": q}`` (both optional, default 0) says the request computed its tokens from position
p on and that a later request may resume at any page boundary below q. A scenario may
declare ``tiers`` (DESIGN.md section 4b): inserts and drops then take a ``tier``, a ``copy``
step copies one tier's data on a path to another, and a match may expect ``from`` (FULL KV
tokens per tier) and ``state_from`` (the tier of the state at the hit). Loading checks
the whole file first (unknown keys, types, page alignment), so a malformed scenario is reported
with its file and reason before anything runs.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from hycache.conformance.reference import GroupConfig, Slide
from hycache.errors import CacheUsageError, ScenarioError
from hycache.tree.tiers import TierSources

GROUP_KINDS = ("full", "swa", "recurrent")


@dataclass(frozen=True)
class Insert:
    tokens: tuple[int, ...]
    states_at: tuple[int, ...]
    namespace: str | None
    slide: Slide | None = None  # None: a plain insert
    tier: int = 0


@dataclass(frozen=True)
class Match:
    tokens: tuple[int, ...]
    hit: int
    kv_hit: int
    namespace: str | None
    kv_from: dict[int, int] | None = None  # expected FULL KV tokens per tier; None: unchecked
    state_from: int | None = None
    checks_state_from: bool = False


@dataclass(frozen=True)
class Drop:
    kind: str
    tokens: tuple[int, ...]
    start: int  # "at" for recurrent, range start for swa, "from" for full
    end: int | None  # range end for swa; None otherwise
    namespace: str | None
    tier: int = 0


@dataclass(frozen=True)
class Copy:
    """Copy to tier ``target`` what tier ``source`` holds on ``tokens``' path."""

    tokens: tuple[int, ...]
    target: int
    source: int
    kinds: tuple[str, ...] | None  # None: every component
    namespace: str | None


Step = Insert | Match | Drop | Copy


@dataclass(frozen=True)
class Scenario:
    name: str
    path: str
    page_size: int
    groups: tuple[GroupConfig, ...]
    steps: tuple[Step, ...]
    tiers: tuple[str, ...] = ("device",)


class ScenarioTarget(Protocol):
    """What a scenario drives: the real cache (an adapter) or the reference model."""

    def insert(
        self,
        tokens: Sequence[int],
        states_at: Sequence[int] = (),
        namespace: str | None = None,
        slide: Slide | None = None,
        tier: int = 0,
    ) -> None: ...

    def match(self, tokens: Sequence[int], namespace: str | None = None) -> tuple[int, int]: ...

    def sources(self, tokens: Sequence[int], namespace: str | None = None) -> TierSources: ...

    def copy(
        self,
        tokens: Sequence[int],
        target: int,
        source: int,
        kinds: Sequence[str] | None = None,
        namespace: str | None = None,
    ) -> None: ...

    def drop_recurrent(
        self, tokens: Sequence[int], at: int, namespace: str | None = None, tier: int = 0
    ) -> None: ...

    def drop_swa(
        self,
        tokens: Sequence[int],
        start: int,
        end: int,
        namespace: str | None = None,
        tier: int = 0,
    ) -> None: ...

    def drop_full(
        self, tokens: Sequence[int], start: int, namespace: str | None = None, tier: int = 0
    ) -> None: ...


TargetFactory = Callable[[int, Sequence[GroupConfig], Sequence[str]], ScenarioTarget]


@dataclass(frozen=True)
class Mismatch:
    """A match step whose result differs from the scenario's expectation."""

    scenario: str
    path: str
    step: int
    tokens: tuple[int, ...]
    expected: tuple[int, int]
    actual: tuple[int, int]
    expected_tiers: str = ""  # "from=... state_from=..." when the step checks tiers
    actual_tiers: str = ""

    def describe(self) -> str:
        shown = list(self.tokens) if len(self.tokens) <= 16 else f"{len(self.tokens)} tokens"
        return (
            (
                f"scenario {self.scenario!r} ({self.path}) step {self.step}: match {shown}\n"
                f"  expected hit={self.expected[0]} kv_hit={self.expected[1]} "
                f"{self.expected_tiers}\n"
                f"  actual   hit={self.actual[0]} kv_hit={self.actual[1]} {self.actual_tiers}"
            )
            .replace(" \n", "\n")
            .rstrip()
        )


@dataclass(frozen=True)
class Outcome:
    scenario: Scenario
    matches_checked: int
    mismatch: Mismatch | None

    @property
    def passed(self) -> bool:
        return self.mismatch is None


# ---------------------------------------------------------------------- loading
class _Reader:
    """Validates one scenario's JSON, raising ScenarioError with the file and the reason."""

    def __init__(self, path: str, tiers: tuple[str, ...] = ("device",)) -> None:
        self.path = path
        self.tiers = tiers

    def tier(self, value: Any, where: str) -> int:
        """The index of tier name ``value`` (ScenarioError naming the known tiers)."""
        if not isinstance(value, str) or value not in self.tiers:
            raise self.fail(f"{where}: unknown tier {value!r} (tiers: {list(self.tiers)})")
        return self.tiers.index(value)

    def kinds_list(self, value: Any, where: str, kinds: set[str]) -> tuple[str, ...]:
        if not isinstance(value, list) or not value:
            raise self.fail(f"{where}: expected a non-empty list of component kinds")
        for kind in value:
            if kind not in kinds:
                raise self.fail(f"{where}: {kind!r} is not a group of this scenario")
        return tuple(value)

    def expected_from(self, value: Any, where: str, kinds: set[str]) -> dict[int, int]:
        if "full" not in kinds:
            raise self.fail(f"{where}: 'from' needs a full group")
        if not isinstance(value, dict):
            raise self.fail(f"{where}: expected an object of tier -> tokens")
        found: dict[int, int] = {}
        for name, tokens in value.items():
            count = self.integer(tokens, f"{where}.{name}")
            if count:
                found[self.tier(name, where)] = count
        return found

    def fail(self, reason: str) -> ScenarioError:
        return ScenarioError(self.path, reason)

    def keys(self, obj: dict[str, Any], where: str, required: set[str], allowed: set[str]) -> None:
        unknown = sorted(set(obj) - required - allowed)
        if unknown:
            raise self.fail(f"{where}: unknown key {unknown[0]!r}")
        missing = sorted(required - set(obj))
        if missing:
            raise self.fail(f"{where}: missing key {missing[0]!r}")

    def integer(self, value: Any, where: str, minimum: int = 0) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise self.fail(f"{where}: expected an integer >= {minimum}, got {value!r}")
        return value

    def tokens(self, value: Any, where: str) -> tuple[int, ...]:
        if not isinstance(value, list):
            raise self.fail(f"{where}: expected a list of token ids, got {value!r}")
        return tuple(self.integer(t, f"{where}[{i}]") for i, t in enumerate(value))

    def aligned(self, value: Any, where: str, page: int) -> int:
        position = self.integer(value, where)
        if position % page:
            raise self.fail(f"{where}: position {position} is not a multiple of page_size {page}")
        return position

    def namespace(self, step: dict[str, Any], where: str) -> str | None:
        value = step.get("namespace")
        if value is not None and not isinstance(value, str):
            raise self.fail(f"{where}: namespace must be a string, got {value!r}")
        return value

    def slide(self, value: Any, where: str, page: int) -> Slide | None:
        """``slide``: absent or false (a plain insert), true (slide from 0) or an object with
        optional page-aligned ``from`` and ``prefix``."""
        if value is None or value is False:
            return None
        if value is True:
            return Slide()
        if not isinstance(value, dict):
            raise self.fail(f"{where}.slide: expected true or an object (from, prefix)")
        self.keys(value, f"{where}.slide", set(), {"from", "prefix"})
        return Slide(
            self.aligned(value.get("from", 0), f"{where}.slide.from", page),
            self.aligned(value.get("prefix", 0), f"{where}.slide.prefix", page),
        )

    def group(self, raw: Any, where: str) -> GroupConfig:
        if not isinstance(raw, dict):
            raise self.fail(f"{where}: expected an object")
        kind = raw.get("kind")
        if kind not in GROUP_KINDS:
            raise self.fail(f"{where}: kind must be one of {GROUP_KINDS}, got {kind!r}")
        if kind == "swa":
            self.keys(raw, where, {"kind", "window"}, set())
            return GroupConfig("swa", self.integer(raw["window"], f"{where}.window", 1))
        self.keys(raw, where, {"kind"}, set())
        return GroupConfig(kind)

    def step(self, raw: Any, where: str, page: int, kinds: set[str]) -> Step:
        if not isinstance(raw, dict):
            raise self.fail(f"{where}: expected an object")
        verbs = [v for v in ("insert", "match", "drop", "copy") if v in raw]
        if len(verbs) != 1:
            raise self.fail(f"{where}: needs exactly one of insert, match, drop, copy")
        ns = self.namespace(raw, where)
        tiered = len(self.tiers) > 1
        tier = self.tier(raw["tier"], f"{where}.tier") if "tier" in raw else 0
        if verbs[0] == "copy":
            self.keys(raw, where, {"copy", "from_tier", "tokens"}, {"components", "namespace"})
            target = self.tier(raw["copy"], f"{where}.copy")
            source = self.tier(raw["from_tier"], f"{where}.from_tier")
            if target == source:
                raise self.fail(f"{where}: copy onto the tier it comes from")
            chosen = None
            if "components" in raw:
                chosen = self.kinds_list(raw["components"], f"{where}.components", kinds)
            return Copy(self.tokens(raw["tokens"], f"{where}.tokens"), target, source, chosen, ns)
        if verbs[0] == "insert":
            self.keys(raw, where, {"insert"}, {"states_at", "namespace", "slide", "tier"})
            if tiered and raw.get("slide") not in (None, False):
                raise self.fail(f"{where}.slide: not supported in a scenario with tiers")
            tokens = self.tokens(raw["insert"], f"{where}.insert")
            states = raw.get("states_at", [])
            if not isinstance(states, list):
                raise self.fail(f"{where}.states_at: expected a list")
            cached = len(tokens) - len(tokens) % page
            checked = []
            for i, p in enumerate(states):
                p = self.aligned(p, f"{where}.states_at[{i}]", page)
                if not 0 < p <= cached:
                    raise self.fail(f"{where}.states_at[{i}]: {p} is outside (0, {cached}]")
                checked.append(p)
            if checked and "recurrent" not in kinds:
                raise self.fail(f"{where}.states_at: the scenario has no recurrent group")
            slide = self.slide(raw.get("slide"), where, page)
            return Insert(tokens, tuple(checked), ns, slide, tier)
        if verbs[0] == "match":
            self.keys(raw, where, {"match", "hit", "kv_hit"}, {"namespace", "from", "state_from"})
            if "tier" in raw:
                raise self.fail(f"{where}: unknown key 'tier'")
            kv_from = None
            if "from" in raw:
                kv_from = self.expected_from(raw["from"], f"{where}.from", kinds)
            state_from = None
            if raw.get("state_from") is not None:
                if "recurrent" not in kinds:
                    raise self.fail(f"{where}.state_from: the scenario has no recurrent group")
                state_from = self.tier(raw["state_from"], f"{where}.state_from")
            return Match(
                self.tokens(raw["match"], f"{where}.match"),
                self.integer(raw["hit"], f"{where}.hit"),
                self.integer(raw["kv_hit"], f"{where}.kv_hit"),
                ns,
                kv_from,
                state_from,
                "state_from" in raw,
            )
        kind = raw["drop"]
        if kind not in kinds:
            raise self.fail(f"{where}.drop: {kind!r} is not a group of this scenario")
        position_key = {"recurrent": "at", "swa": "range", "full": "from"}[kind]
        self.keys(raw, where, {"drop", "tokens", position_key}, {"namespace", "tier"})
        tokens = self.tokens(raw["tokens"], f"{where}.tokens")
        if kind == "swa":
            bounds = raw["range"]
            if not isinstance(bounds, list) or len(bounds) != 2:
                raise self.fail(f"{where}.range: expected [start, end]")
            start = self.aligned(bounds[0], f"{where}.range[0]", page)
            end = self.aligned(bounds[1], f"{where}.range[1]", page)
            if end < start or end > len(tokens):
                raise self.fail(f"{where}.range: [{start}, {end}) is not within the tokens")
            return Drop(kind, tokens, start, end, ns, tier)
        start = self.aligned(raw[position_key], f"{where}.{position_key}", page)
        if start > len(tokens) or (kind == "recurrent" and start == 0):
            raise self.fail(f"{where}.{position_key}: {start} is not a position of the tokens")
        return Drop(kind, tokens, start, None, ns, tier)


def load_scenario(path: str | Path) -> Scenario:
    """Read and validate one scenario file. Raises ScenarioError naming file and reason."""
    name = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ScenarioError(name, f"cannot read: {exc.strerror or exc}") from exc
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        reason = f"bad JSON: {exc.msg} (column {exc.colno})"
        raise ScenarioError(name, reason, line=exc.lineno) from None
    reader = _Reader(name)
    if not isinstance(raw, dict):
        raise reader.fail("top level: expected an object")
    reader.keys(raw, "top level", {"name", "page_size", "groups", "steps"}, {"tiers"})
    if "tiers" in raw:
        tiers = raw["tiers"]
        if (
            not isinstance(tiers, list)
            or not tiers
            or not all(isinstance(t, str) and t for t in tiers)
            or len(set(tiers)) != len(tiers)
        ):
            raise reader.fail("tiers: expected a non-empty list of distinct tier names")
        reader = _Reader(name, tuple(tiers))
    if not isinstance(raw["name"], str):
        raise reader.fail("name: expected a string")
    page = reader.integer(raw["page_size"], "page_size", 1)
    if not isinstance(raw["groups"], list) or not raw["groups"]:
        raise reader.fail("groups: expected a non-empty list")
    groups = tuple(reader.group(g, f"groups[{i}]") for i, g in enumerate(raw["groups"]))
    if not isinstance(raw["steps"], list):
        raise reader.fail("steps: expected a list")
    kinds = {g.kind for g in groups}
    steps = tuple(reader.step(s, f"steps[{i}]", page, kinds) for i, s in enumerate(raw["steps"]))
    return Scenario(raw["name"], name, page, groups, steps, reader.tiers)


# ---------------------------------------------------------------------- running
def _tier_text(scenario: Scenario, kv_from: dict[int, int] | None, state: object) -> str:
    """``from={...} state_from=...`` with tier names (parts the step does not check left out)."""
    parts = []
    if kv_from is not None:
        shown = {scenario.tiers[t]: n for t, n in sorted(kv_from.items())}
        parts.append(f"from={shown}")
    if state is not _UNCHECKED:
        parts.append(f"state_from={None if state is None else scenario.tiers[int(str(state))]}")
    return " ".join(parts)


_UNCHECKED = object()


def _check_match(
    scenario: Scenario, target: ScenarioTarget, index: int, step: Match
) -> Mismatch | None:
    actual = target.match(step.tokens, step.namespace)
    expected_text = actual_text = ""
    same = actual == (step.hit, step.kv_hit)
    if step.kv_from is not None or step.checks_state_from:
        sources = target.sources(step.tokens, step.namespace)
        got_from = sources.kv_from if step.kv_from is not None else None
        got_state: object = sources.state_from if step.checks_state_from else _UNCHECKED
        want_state: object = step.state_from if step.checks_state_from else _UNCHECKED
        same = same and got_from == step.kv_from and got_state == want_state
        expected_text = _tier_text(scenario, step.kv_from, want_state)
        actual_text = _tier_text(scenario, got_from, got_state)
    if same:
        return None
    return Mismatch(
        scenario.name,
        scenario.path,
        index,
        step.tokens,
        (step.hit, step.kv_hit),
        actual,
        expected_text,
        actual_text,
    )


def run_scenario(scenario: Scenario, factory: TargetFactory) -> Outcome:
    """Run every step on a fresh target; stop at the first mismatching match.

    A step the target refuses (CacheUsageError) is re-raised as ScenarioError (malformed)."""
    target = factory(scenario.page_size, scenario.groups, scenario.tiers)
    checked = 0
    for index, step in enumerate(scenario.steps):
        try:
            if isinstance(step, Insert):
                target.insert(step.tokens, step.states_at, step.namespace, step.slide, step.tier)
            elif isinstance(step, Match):
                checked += 1
                mismatch = _check_match(scenario, target, index, step)
                if mismatch is not None:
                    return Outcome(scenario, checked, mismatch)
            elif isinstance(step, Copy):
                target.copy(step.tokens, step.target, step.source, step.kinds, step.namespace)
            elif step.kind == "recurrent":
                target.drop_recurrent(step.tokens, step.start, step.namespace, step.tier)
            elif step.kind == "swa":
                end = step.start if step.end is None else step.end
                target.drop_swa(step.tokens, step.start, end, step.namespace, step.tier)
            else:
                target.drop_full(step.tokens, step.start, step.namespace, step.tier)
        except CacheUsageError as exc:
            raise ScenarioError(scenario.path, f"steps[{index}]: {exc}") from exc
    return Outcome(scenario, checked, None)
