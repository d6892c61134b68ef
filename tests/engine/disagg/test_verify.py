"""``run_verify`` with ``disagg``: a clean run passes with minimal transfers; each injected
disaggregation fault fires and fails."""

from __future__ import annotations

import pytest

from hycache.engine.disagg.base import DisaggSpec, Side
from hycache.engine.verify_run import run_verify

SPEC = DisaggSpec(Side(16), Side(64))


@pytest.mark.parametrize(
    ("inject", "code"), [(None, 0), ("no-tail-zero", 1), ("full-last-token", 1)]
)
def test_disagg_verify(inject: str | None, code: int) -> None:
    lines: list[str] = []
    outcome = run_verify(
        ["qwen3_next"],
        ["hycache"],
        ["chat"],
        requests=6,
        inject=inject,
        disagg=SPEC,
        echo=lines.append,
    )
    assert outcome.exit_code == code, "\n".join(lines)
    (cell,) = outcome.cells
    assert cell.requests == 6 and not cell.failed
    moved = [line for line in cell.report if " moved " in line]
    assert len(moved) == 6
    if inject is None:
        assert all(" = minimum " in line for line in moved)
        assert cell.reused_tokens > 0
    else:
        assert cell.fired > 0
