"""The exception hierarchy of hycache.

Typed errors are for problems a user can cause (bad input, bad configuration, a request that
cannot fit); a rejected call leaves every structure as it was. Broken invariants found by an
integrity check raise ``IntegrityError`` (never ``assert``: ``python -O`` removes asserts).

    HycacheError
    ├── ConfigError            bad configuration: unknown preset/knob, page size vs window, ...
    │   └── SpecError          a model spec / HF config.json that cannot be understood
    ├── InputError             bad data from a file: carries file, line and reason
    │   └── ScenarioError      a malformed conformance scenario
    ├── CacheUsageError        an operation the cache cannot honour as asked (unaligned position,
    │   │                      a state beyond cached KV, touching a locked entry, ...)
    │   └── ArgumentError      an argument of a call has the wrong type or value (names it)
    ├── CapacityError          memory cannot be found even after eviction
    ├── TransportError         a peer instance (disaggregated prefill/decode) died or timed out
    │   └── HandshakeError     two instances that cannot exchange data (names the field)
    └── IntegrityError         an integrity check found a broken invariant (a bug, not misuse)
"""

from __future__ import annotations

from typing import Any


class HycacheError(Exception):
    """Base class of every error hycache raises on purpose. Every one survives pickling (a
    replay in a worker process raises it in the parent unchanged)."""

    def __reduce__(self) -> tuple[Any, ...]:
        return _rebuild, (type(self), self.args, dict(vars(self)))


def _rebuild(cls: type[HycacheError], args: tuple[Any, ...], fields: dict[str, Any]) -> Any:
    """Unpickle an error whose constructor takes other arguments than its message."""
    error = cls.__new__(cls)
    error.args = args
    error.__dict__.update(fields)
    return error


class ConfigError(HycacheError):
    """A configuration value is invalid (unknown preset or knob, inconsistent sizes, ...)."""


class SpecError(ConfigError):
    """A model specification or HF config cannot be turned into a ModelSpec.

    ``field`` names the missing or invalid field when there is one.
    """

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class InputError(HycacheError):
    """Malformed input data; the message names the file, the line (when known) and the reason."""

    def __init__(self, path: str, reason: str, *, line: int | None = None) -> None:
        where = f"{path}:{line}" if line is not None else path
        super().__init__(f"{where}: {reason}")
        self.path = path
        self.line = line
        self.reason = reason


class ScenarioError(InputError):
    """A conformance scenario file that does not follow the documented format."""


class CacheUsageError(HycacheError):
    """The caller asked the cache for something it cannot do as asked."""


class CapacityError(HycacheError):
    """Memory could not be found for a request even after evicting everything evictable."""


class ArgumentError(CacheUsageError):
    """An argument of a call has the wrong type or value; ``argument`` names it."""

    def __init__(self, argument: str, reason: str) -> None:
        super().__init__(f"{argument}: {reason}")
        self.argument = argument
        self.reason = reason


class TransportError(HycacheError):
    """A peer instance of a disaggregated pair went away or did not answer in time."""


class HandshakeError(TransportError):
    """Two instances refuse to pair: ``field`` names what differs (dtype, model, layout, ...)."""

    def __init__(self, field: str, mine: object, theirs: object) -> None:
        super().__init__(
            f"handshake refused: {field} differs (prefill {mine!r}, decode {theirs!r})"
        )
        self.field = field
        self.mine = mine
        self.theirs = theirs


class IntegrityError(HycacheError):
    """An integrity check found a broken invariant: a bug in hycache or in its caller's use of
    internals, never a consequence of bad input through the public API."""
