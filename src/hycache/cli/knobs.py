"""The one parser of ``--set PRESET.KNOB=VALUE`` preset knob overrides, for every subcommand.

Each item is checked when argparse reads it (``knob_arg`` is a ``type=`` callable): the preset
and knob must exist and the value must coerce with ``hycache.cache.presets.resolve_knobs``;
NaN and infinite numbers are refused. A bad item is an argparse error (exit 2) naming the
option, the knob and the reason. ``knob_overrides`` folds the parsed items into the
``{preset: {knob: value}}`` mapping the simulator and the engine take (a later item wins).
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from hycache.cache.presets import KNOBS, MAIN_PRESETS, KnobValue, resolve_knobs
from hycache.errors import ConfigError

_NON_FINITE = {"nan", "+nan", "-nan", "inf", "+inf", "-inf", "infinity", "+infinity", "-infinity"}


@dataclass(frozen=True)
class KnobSetting:
    """One ``preset.knob=value`` override, its value already coerced to the knob's type."""

    preset: str
    knob: str
    value: KnobValue


def parse_knob(text: str) -> KnobSetting:
    """``"vllm.block_size=32"`` -> ``KnobSetting("vllm", "block_size", 32)``; ConfigError
    naming the item and the reason otherwise."""
    name, sep, raw = text.partition("=")
    preset, dot, knob = name.strip().partition(".")
    if not sep or not dot or not preset or not knob:
        raise ConfigError(f"{text!r}: expected PRESET.KNOB=VALUE, e.g. vllm.block_size=32")
    if preset not in KNOBS:
        raise ConfigError(f"{text!r}: unknown preset {preset!r}; known: {', '.join(KNOBS)}")
    if knob not in KNOBS[preset]:
        known = ", ".join(KNOBS[preset])
        raise ConfigError(f"{text!r}: unknown knob {preset}.{knob}; known: {known}")
    value = raw.strip()
    if value.lower() in _NON_FINITE:
        raise ConfigError(f"{preset}.{knob}={value}: must be a finite value")
    try:
        coerced = resolve_knobs(preset, {knob: value})[knob]
    except ConfigError as exc:  # the presets refuse a bad value (NaN, inf, wrong type, ...)
        raise ConfigError(f"{preset}.{knob}={value}: {exc}") from None
    return KnobSetting(preset, knob, coerced)


def knob_arg(text: str) -> KnobSetting:
    """argparse ``type=`` for ``--set``."""
    try:
        return parse_knob(text)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_knob_option(parser: argparse.ArgumentParser) -> None:
    """Add the repeatable ``--set PRESET.KNOB=VALUE`` option (dest ``knobs``)."""
    parser.add_argument(
        "--set",
        dest="knobs",
        action="append",
        type=knob_arg,
        default=[],
        metavar="PRESET.KNOB=VALUE",
        help="preset knob override, e.g. vllm.block_size=32 (repeatable; docs/presets.md)",
    )


def knob_overrides(settings: Iterable[KnobSetting]) -> dict[str, dict[str, KnobValue]]:
    """``{preset: {knob: value}}`` from parsed settings, a later one overriding an earlier."""
    knobs: dict[str, dict[str, KnobValue]] = {}
    for setting in settings:
        knobs.setdefault(setting.preset, {})[setting.knob] = setting.value
    return knobs


def parse_policies(text: str) -> list[str]:
    """``"vllm,hycache"`` -> ``["vllm", "hycache"]``, ``"all"`` -> the four main presets
    (``MAIN_PRESETS``); ConfigError on an empty list or an unknown preset. Duplicates are
    dropped, order kept."""
    items = [item.strip() for item in text.split(",") if item.strip()]
    if items == ["all"]:
        return list(MAIN_PRESETS)
    if not items:
        raise ConfigError(f"{text!r}: expected P[,Q...] or all; presets: {', '.join(KNOBS)}")
    for item in items:
        if item not in KNOBS:
            raise ConfigError(f"unknown policy {item!r}; known: {', '.join(KNOBS)}")
    return list(dict.fromkeys(items))


def policies_arg(text: str) -> list[str]:
    """argparse ``type=`` for ``--policy``."""
    try:
        return parse_policies(text)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def check_knobs_apply(knobs: dict[str, dict[str, KnobValue]], policies: Sequence[str]) -> None:
    """ConfigError when ``--set`` names a preset that ``--policy`` does not run (it would be
    silently ignored)."""
    chosen = set(policies)
    for preset, values in knobs.items():
        if preset not in chosen:
            names = ", ".join(f"{preset}.{knob}" for knob in values)
            raise ConfigError(
                f"--set {names}: preset {preset!r} is not run (--policy {','.join(policies)})"
            )
