"""`--set PRESET.KNOB=VALUE`: one parser for every subcommand; bad values exit 2 at parse time."""

from __future__ import annotations

import pytest

from hycache.cli.knobs import KnobSetting, knob_overrides, parse_knob, parse_policies
from hycache.cli.main import main
from hycache.errors import ConfigError

MODEL = "qwen3-next-80b-a3b"


def test_values_are_coerced_to_the_knob_type() -> None:
    assert parse_knob("vllm.block_size=32") == KnobSetting("vllm", "block_size", 32)
    assert parse_knob("marconi.alpha=0.5") == KnobSetting("marconi", "alpha", 0.5)
    assert parse_knob("vllm.retention_interval=none").value is None
    settings = [parse_knob("vllm.block_size=32"), parse_knob("vllm.block_size=64")]
    assert knob_overrides(settings) == {"vllm": {"block_size": 64}}


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("marconi.alpha=nan", "marconi.alpha=nan: must be a finite value"),
        ("marconi.alpha=inf", "marconi.alpha=inf: must be a finite value"),
        ("marconi.alpha=-Infinity", "must be a finite value"),
        ("marconi.alpha=1e999", "marconi.alpha=1e999: marconi.alpha must be finite"),
        ("vllm.block_size=nan", "vllm.block_size=nan: must be a finite value"),
        ("vllm.block_size=1.5", "vllm.block_size"),
        ("vllm.block_size=-1", "vllm.block_size must be >= 0"),
        ("vllm.bogus=1", "unknown knob vllm.bogus"),
        ("lru.size=1", "unknown preset 'lru'"),
        ("vllm=1", "expected PRESET.KNOB=VALUE"),
        ("vllm.block_size", "expected PRESET.KNOB=VALUE"),
    ],
)
def test_bad_knobs_name_the_knob(text: str, reason: str) -> None:
    with pytest.raises(ConfigError, match=reason.replace(".", r"\.")):
        parse_knob(text)


def test_policies() -> None:
    assert parse_policies("vllm, hycache,vllm") == ["vllm", "hycache"]
    assert parse_policies("all") == ["vllm", "sglang", "marconi", "hycache"]
    for bad in ("", " , ", "lru"):
        with pytest.raises(ConfigError):
            parse_policies(bad)


@pytest.mark.parametrize(
    "argv",
    [
        ["simulate", "--workload", "chat", "--model", MODEL, "--capacity", "1GB"],
        ["compare", "--workload", "chat", "--model", MODEL],
        ["verify", "--arch", "bamba", "--policy", "marconi"],
    ],
)
def test_every_subcommand_refuses_nan_at_parse_time(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*argv, "--set", "marconi.alpha=nan"]) == 2
    err = capsys.readouterr().err
    assert "argument --set: marconi.alpha=nan: must be a finite value" in err
