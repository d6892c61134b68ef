"""The error hierarchy: every error survives pickling (worker processes raise it unchanged)."""

from __future__ import annotations

import inspect
import pickle

import pytest

from hycache import errors
from hycache.errors import (
    ArgumentError,
    HandshakeError,
    HycacheError,
    InputError,
    ScenarioError,
    SpecError,
)

SAMPLES: list[HycacheError] = [
    SpecError("no layers", field="num_hidden_layers"),
    InputError("trace.jsonl", "not JSON", line=7),
    ScenarioError("s.json", "no steps"),
    ArgumentError("prompt", "must not be empty"),
    HandshakeError("dtype", "bf16", "fp8"),
]


def _every_error_class() -> list[type[HycacheError]]:
    return [
        cls
        for _name, cls in inspect.getmembers(errors, inspect.isclass)
        if issubclass(cls, HycacheError)
    ]


@pytest.mark.parametrize("error", SAMPLES, ids=lambda e: type(e).__name__)
def test_errors_with_fields_pickle_whole(error: HycacheError) -> None:
    back = pickle.loads(pickle.dumps(error))
    assert type(back) is type(error)
    assert str(back) == str(error)
    assert vars(back) == vars(error)


def test_every_error_class_pickles() -> None:
    with_fields = {type(e) for e in SAMPLES}
    for cls in _every_error_class():
        if cls in with_fields:
            continue
        error = cls("something went wrong")
        back = pickle.loads(pickle.dumps(error))
        assert type(back) is cls and str(back) == "something went wrong"
    assert len(_every_error_class()) == 11  # the hierarchy in hycache.errors
