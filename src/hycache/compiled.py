"""Support for the optional compiled build (``make fast``, setup.py); no-ops in the pure one.

- ``mypyc_attr``: the contract classes users subclass in Python (a component, a checkpoint,
  eviction, admission or movement policy) carry ``@mypyc_attr(allow_interpreted_subclasses=
  True)``, so compiled they accept the same Python subclasses. mypyc reads the decorator when
  it compiles; without mypy installed this stand-in is used.
- ``own_abc_caches``: a class mypyc compiles does not get its own ABC caches (``_abc_impl``)
  and would share its nearest ancestor's, so one ``isinstance`` answering False for one class
  would answer False for another (a negative cache keyed only by the class tested). Each
  contract root calls it on itself and, from ``__init_subclass__``, on every subclass.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TypeVar

__all__ = ["mypyc_attr", "own_abc_caches"]

_Class = TypeVar("_Class")

try:
    from mypy_extensions import mypyc_attr
except ImportError:  # mypy (which brings mypy_extensions) is only needed to compile

    def mypyc_attr(*_: str, **__: object) -> Callable[[_Class], _Class]:
        return lambda cls: cls


_abc_init: Callable[[type], None] = importlib.import_module("_abc")._abc_init


def own_abc_caches(cls: type) -> None:
    """Give ``cls`` ABC caches of its own unless it has them (every class in the pure build)."""
    if "_abc_impl" not in vars(cls):
        _abc_init(cls)
