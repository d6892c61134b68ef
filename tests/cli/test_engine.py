"""``hycache init-model`` / ``hycache verify``: exit codes, output, injected faults caught."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from hycache.cli.main import main
from hycache.engine.model import LoadedModel
from hycache.engine.verify import verify_cell


def run(argv: Sequence[str]) -> int:
    """The ``hycache`` command line, as the console script runs it."""
    return main(list(argv))


def test_registering_does_not_import_torch() -> None:
    code = (
        "import argparse, sys\n"
        "from hycache.cli.engine import register\n"
        "p = argparse.ArgumentParser(); register(p.add_subparsers())\n"
        "p.parse_args(['verify', '--arch', 'bamba'])\n"
        "assert 'torch' not in sys.modules and 'transformers' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_init_model_writes_a_checkpoint(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "tiny"
    argv = ["init-model", "--arch", "bamba", "--out", str(out), "--layers", "3", "--seed", "2"]
    assert run(argv) == 0
    assert (out / "config.json").is_file() and (out / "model.safetensors").is_file()
    assert "bamba" in capsys.readouterr().out


def test_init_model_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["init-model", "--arch", "llama", "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("hycache: error: unsupported architecture 'llama'")
    assert "qwen3_next" in err
    target = tmp_path / "file"
    target.write_text("")
    assert run(["init-model", "--arch", "gemma3", "--out", str(target)]) == 2


def test_verify_passes_and_reports_reuse(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["verify", "--arch", "qwen3_next,gemma3", "--policy", "hycache,sglang"]
    assert run([*argv, "--workload", "chat", "--requests", "8"]) == 0
    out = capsys.readouterr().out
    assert "reused tok" in out and "PASS: every cached run matches its cold run" in out
    reused = int(out.split(" prompt tokens reused")[0].rsplit(" ", 1)[1])
    assert reused > 0
    for arch in ("qwen3_next", "gemma3"):
        assert f"== {arch} " in out


def test_verify_a_checkpoint_directory(
    model_dirs: Callable[[str], Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """``--model`` verifies a checkpoint the user has (here: one written by init-model)."""
    argv = ["verify", "--arch", "mine", "--model", str(model_dirs("kimi_linear"))]
    assert run([*argv, "--policy", "marconi", "--requests", "6"]) == 0
    out = capsys.readouterr().out
    assert "mine:" in out and "PASS" in out


def test_verify_scaled_simulator_workload(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["verify", "--arch", "gemma3", "--policy", "sglang", "--workload", "sim:docqa"]
    assert run([*argv, "--requests", "6"]) == 0
    assert "sim:docqa" in capsys.readouterr().out


def test_verify_input_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["verify", "--arch", "gpt9"]) == 2
    assert "unsupported architecture 'gpt9'" in capsys.readouterr().err
    assert run(["verify", "--arch", "bamba", "--policy", "lru"]) == 2
    assert "unknown policy 'lru'" in capsys.readouterr().err
    assert run(["verify", "--arch", "bamba", "--workload", "poker", "--requests", "2"]) == 2
    assert "unknown engine workload 'poker'" in capsys.readouterr().err
    assert run(["verify", "--arch", "bamba", "--model", str(tmp_path)]) == 2
    assert "missing config.json" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--capacity", "lots"], "argument --capacity/--device-capacity: size 'lots'"),
        (["--capacity", "10%"], "a percentage of the footprint is not available here"),
        (["--capacity", "nan"], "must be a finite number"),
        (["--tolerance", "nan"], "argument --tolerance: must be a finite number"),
        (["--tolerance=-1"], "argument --tolerance: must be >= 0"),
        (["--requests", "0"], "argument --requests: must be >= 1"),
        (["--threads", "0"], "argument --threads: must be >= 1"),
        (["--policy", "lru"], "unknown policy 'lru'"),
        (["--knob", "vllm.block_size=32"], "unrecognized arguments: --knob"),
        (["--set", "vllm.block_size=32"], "preset 'vllm' is not run (--policy hycache)"),
        (["--model", "somewhere", "--layers", "2"], "--layers shapes the tiny model"),
        (["--workload", "sim:poker"], "unknown workload 'poker'"),
        (["--disagg", "16"], "expected P:D page sizes"),
        (["--disagg", "16:x"], "is not a positive integer"),
        (["--disagg", "nope@16:64"], "unknown preset 'nope'"),
        (["--inject", "no-tail-zero"], "--inject no-tail-zero needs --disagg"),
        (["--disagg", "16:64", "--inject", "stale-tail"], "cannot run with --disagg"),
    ],
)
def test_verify_bad_options_exit_2_before_any_model_is_built(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(["verify", "--arch", "bamba", *argv]) == 2
    assert message in capsys.readouterr().err


def test_a_fault_that_never_fires_exits_3(capsys: pytest.CaptureFixture[str]) -> None:
    """sglang (no_buffer) keeps late-snapshot's wrong states, but no hit in this short chat
    reads one."""
    argv = ["verify", "--policy", "sglang", "--workload", "chat", "--requests", "8"]
    argv += ["--set", "sglang.strategy=no_buffer"]
    assert run([*argv, "--inject", "late-snapshot"]) == 3
    out = capsys.readouterr().out
    assert "inject late-snapshot: fired 0 times" in out and "fault not exercised" in out
    assert "PASS" not in out.split("\n\n")[-1]


INJECTS = [
    # (fault, arch, policy, workload): where each one is caught
    ("late-snapshot", "qwen3_next", "hycache", "branching"),
    ("late-snapshot", "bamba", "marconi", "chat"),
    ("off-grid", "qwen3_next", "vllm", "docqa"),
    ("off-grid", "nemotron_h", "hycache", "branching"),
    ("stale-tail", "gemma3", "sglang", "chat"),
    ("stale-tail", "qwen3_next", "marconi", "chat"),
]


@pytest.mark.parametrize(("inject", "arch", "policy", "workload"), INJECTS)
def test_injected_faults_fail_verify(
    inject: str, arch: str, policy: str, workload: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["verify", "--arch", arch, "--policy", policy, "--workload", workload]
    assert run([*argv, "--requests", "16", "--inject", inject]) == 1
    out = capsys.readouterr().out
    assert "FAIL" in out and f"fault injected: {inject}" in out
    fired = int(out.split(f"inject {inject}: fired ")[1].split(" times")[0])
    assert fired > 0


@pytest.mark.parametrize(("inject", "arch", "policy", "workload"), INJECTS)
def test_numbers_alone_catch_injected_faults(
    inject: str,
    arch: str,
    policy: str,
    workload: str,
    models: Callable[[str], LoadedModel],
) -> None:
    """Without the owner-tag checks the logits comparison still catches every fault."""
    cell = verify_cell(
        models(arch),
        arch,
        policy,
        workload,
        requests=16,
        seed=0,
        inject=inject,
        check_owners=False,
    )
    assert not cell.violations
    assert cell.max_delta > 1e-3 and not cell.passed
    assert cell.fired > 0 and cell.stored > 0


def test_same_cells_pass_without_the_fault(models: Callable[[str], LoadedModel]) -> None:
    for _inject, arch, policy, workload in INJECTS:
        cell = verify_cell(models(arch), arch, policy, workload, requests=16, seed=0)
        assert cell.passed and cell.reused_tokens > 0, (arch, policy, cell.details)
        assert cell.stored == cell.fired == 0
