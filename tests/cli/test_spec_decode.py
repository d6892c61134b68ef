"""``hycache verify --spec-decode``: flag errors, the drafted/accepted line, the injected fault."""

from __future__ import annotations

import pytest

from hycache.cli.main import main


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--spec-decode", "ngram"], "expected ngram:K"),
        (["--spec-decode", "medusa:4"], "expected ngram:K"),
        (["--spec-decode", "ngram:0"], "K must be in [1, 64]"),
        (["--inject", "wrong-accept-step"], "needs speculative decoding (--spec-decode)"),
    ],
)
def test_bad_spec_decode_options_exit_2_before_any_model_is_built(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["verify", "--arch", "bamba", *argv]) == 2
    assert message in capsys.readouterr().err


def test_verify_reports_drafts_and_catches_a_wrong_accept_step(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["verify", "--arch", "nemotron_h", "--workload", "chat", "--requests", "6"]
    argv += ["--spec-decode", "ngram:4"]
    main(argv)
    out = capsys.readouterr().out
    assert "spec-decode: drafted=" in out and "max |delta|" in out
    drafted = int(out.split("spec-decode: drafted=")[1].split()[0])
    assert drafted > 0
    assert main([*argv, "--inject", "wrong-accept-step"]) == 1
    out = capsys.readouterr().out
    assert "FAIL" in out and "inject wrong-accept-step: fired " in out
    assert int(out.split("inject wrong-accept-step: fired ")[1].split(" times")[0]) > 0
