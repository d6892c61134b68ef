"""A preset knob (``Knob``) and the checks the preset builders apply to knob values: each
raises a ConfigError naming the preset and the knob."""

from __future__ import annotations

import math
from dataclasses import dataclass

from hycache.errors import ConfigError
from hycache.policy.admission import AdmissionPolicy, AlwaysAdmit, SecondSighting

KnobValue = int | float | str | bool | None


@dataclass(frozen=True)
class Knob:
    """One preset setting: its default, allowed values and the upstream flag it mirrors."""

    default: KnobValue
    kind: type
    doc: str
    upstream: str
    choices: tuple[str, ...] = ()
    optional: bool = False


def admission(name: object) -> AdmissionPolicy:
    return SecondSighting() if name == "second_sighting" else AlwaysAdmit()


def positive(preset: str, name: str, value: KnobValue) -> int:
    if not isinstance(value, int) or value < 1:
        raise ConfigError(f"{preset}.{name} must be a positive integer, got {value!r}")
    return value


def optional_int(preset: str, name: str, value: KnobValue) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{preset}.{name} must be an integer, got {value!r}")
    return value


def number(preset: str, name: str, value: KnobValue) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ConfigError(f"{preset}.{name} must be a finite number, got {value!r}")
    return float(value)


def share(preset: str, name: str, value: KnobValue, *, closed: bool = False) -> float:
    """A share in (0, 1] ([0, 1] when ``closed``)."""
    got = number(preset, name, value)
    if not (0 <= got <= 1) or (got == 0 and not closed):
        bounds = "[0, 1]" if closed else "(0, 1]"
        raise ConfigError(f"{preset}.{name} must lie in {bounds}, got {value!r}")
    return got


def budget(value: KnobValue) -> int | None:
    if value is None:
        return None
    if not isinstance(value, int) or value < 1:
        raise ConfigError(f"a prefill token budget must be a positive integer, got {value!r}")
    return value
