"""``hycache verify --spec-decode``: flag errors, the drafted/accepted line, the injected fault."""

from __future__ import annotations

import pytest

from hycache.cli.main import main


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--spec-decode", "ngram"], "expected ngram:K"),
        (["--spec-decode", "medusa:4"], "expected ngram:K or oracle:K"),
        (["--spec-decode", "ngram:0"], "K must be in [1, 64]"),
        (["--inject", "wrong-accept-step"], "needs speculative decoding (--spec-decode)"),
    ],
)
def test_bad_spec_decode_options_exit_2_before_any_model_is_built(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["verify", "--arch", "bamba", *argv]) == 2
    assert message in capsys.readouterr().err


def counts(out: str) -> tuple[int, int]:
    line = out.split("spec-decode: drafted=")[1]
    return int(line.split()[0]), int(line.split("accepted=")[1].split()[0])


def test_prompt_lookup_without_repeated_text_accepts_nothing_and_says_so(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The first 5 chat turns hold no retry turn (the first is the 7th): no text repeats, and
    the tiny random models do not repeat themselves, so every draft is rejected: exit 1."""
    argv = ["verify", "--arch", "nemotron_h", "--workload", "chat", "--requests", "5"]
    assert main([*argv, "--spec-decode", "ngram:4"]) == 1
    out = capsys.readouterr().out
    assert counts(out)[0] > 0 and counts(out)[1] == 0
    assert "FAIL: no draft token was accepted" in out
    rows = [line for line in out.splitlines() if line.startswith("nemotron_h ")]
    assert rows and all(row.rstrip().endswith("PASS") for row in rows)  # no difference


def test_prompt_lookup_accepts_drafts_on_a_retry_turn(capsys: pytest.CaptureFixture[str]) -> None:
    """Turn chat-3.1 re-asks chat-3.0's question (79 tokens): the model largely repeats its
    earlier answer, prompt lookup drafts that answer, and accepted steps are copied back."""
    argv = ["verify", "--arch", "nemotron_h", "--workload", "chat", "--requests", "10"]
    assert main([*argv, "--spec-decode", "ngram:4"]) == 0
    out = capsys.readouterr().out
    drafted, accepted = counts(out)
    assert drafted > accepted > 0 and "PASS: every cached run" in out


def test_verify_reports_drafts_and_catches_a_wrong_accept_step(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["verify", "--arch", "nemotron_h", "--workload", "chat", "--requests", "6"]
    argv += ["--spec-decode", "oracle:4"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    drafted, accepted = counts(out)
    assert drafted > accepted > 0 and "PASS: every cached run" in out
    assert main([*argv, "--inject", "wrong-accept-step"]) == 1
    out = capsys.readouterr().out
    assert "FAIL" in out and "inject wrong-accept-step: fired " in out
    assert int(out.split("inject wrong-accept-step: fired ")[1].split(" times")[0]) > 0
