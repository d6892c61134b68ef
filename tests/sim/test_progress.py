"""``Progress``: a tqdm bar on a terminal or when forced, silent counting otherwise."""

from __future__ import annotations

import io

from hycache.sim.progress import Progress


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_hidden_off_a_terminal_but_still_counts() -> None:
    stream = io.StringIO()
    bar = Progress(10, "vllm serial", stream=stream)
    assert not bar.enabled
    bar.advance(3)
    bar.note("x")
    bar.close()
    assert bar.done == 3 and stream.getvalue() == ""


def test_shown_on_a_terminal_with_label_and_counts() -> None:
    stream = _Terminal()
    bar = Progress(4, "hycache engine", stream=stream)
    assert bar.enabled
    for _ in range(4):
        bar.advance()
    bar.close()
    text = stream.getvalue()
    assert "hycache engine" in text and "4/4" in text and "req" in text
    bar.close()  # closing twice is harmless


def test_forced_without_a_terminal_and_without_a_total() -> None:
    stream = io.StringIO()
    bar = Progress(None, "trace", enabled=True, stream=stream, unit="cell")
    bar.advance(7)
    bar.close()
    assert "trace" in stream.getvalue() and "7cell" in stream.getvalue()
    assert not Progress(5, "x", enabled=False, stream=_Terminal()).enabled
