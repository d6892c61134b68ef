"""init-model writes real checkpoints; loading measures the cache layout and the spec."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from hycache.engine.archs import ARCHS, VERIFIED_ARCHS, init_model, tiny_config_dict
from hycache.engine.model import LoadedModel, load_model
from hycache.errors import ConfigError, SpecError

EXPECTED_KINDS = {
    "qwen3_next": {"full", "recurrent"},
    "qwen3_5": {"full", "recurrent"},
    "kimi_linear": {"full", "recurrent"},
    "nemotron_h": {"full", "recurrent"},
    "bamba": {"full", "recurrent"},
    "gemma3": {"full", "swa"},
}


@pytest.mark.parametrize("arch", VERIFIED_ARCHS)
def test_tiny_checkpoint_loads_through_transformers(
    arch: str, models: Callable[[str], LoadedModel], model_dirs: Callable[[str], Path]
) -> None:
    directory = model_dirs(arch)
    assert (directory / "config.json").is_file()
    assert (directory / "model.safetensors").is_file()
    model = models(arch)
    assert {g.kind for g in model.spec.groups} == EXPECTED_KINDS[arch]
    # the config's spec already describes exactly what the model caches
    assert model.notes == ()
    assert type(model.model).__name__.endswith("ForCausalLM")


def test_kimi_config_carries_linear_attn_config(model_dirs: Callable[[str], Path]) -> None:
    saved = json.loads((model_dirs("kimi_linear") / "config.json").read_text())
    lac = saved["linear_attn_config"]
    assert lac["full_attn_layers"] == [4] and lac["kda_layers"] == [1, 2, 3]


def test_init_is_deterministic(tmp_path: Path) -> None:
    a = init_model("qwen3_5", tmp_path / "a", seed=3)
    b = init_model("qwen3_5", tmp_path / "b", seed=3)
    c = init_model("qwen3_5", tmp_path / "c", seed=4)
    weights = [(d / "model.safetensors").read_bytes() for d in (a, b, c)]
    assert weights[0] == weights[1] != weights[2]


def test_every_listed_arch_has_a_tiny_config() -> None:
    for arch in ARCHS:
        assert tiny_config_dict(arch, layers=4, hidden=64)


def test_bad_arguments_are_typed_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"unsupported architecture 'mamba9'.*qwen3_next"):
        tiny_config_dict("mamba9")
    with pytest.raises(ConfigError, match=r"--hidden"):
        tiny_config_dict("bamba", hidden=40)
    with pytest.raises(ConfigError, match="--layers"):
        tiny_config_dict("nemotron_h", layers=2)


def test_bad_directories_name_what_is_missing(
    tmp_path: Path, model_dirs: Callable[[str], Path]
) -> None:
    with pytest.raises(ConfigError, match="no such model directory"):
        load_model(tmp_path / "nowhere")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ConfigError, match=r"missing config\.json"):
        load_model(empty)
    no_weights = tmp_path / "no_weights"
    no_weights.mkdir()
    shutil.copy(model_dirs("bamba") / "config.json", no_weights / "config.json")
    with pytest.raises(ConfigError, match=r"missing model\.safetensors"):
        load_model(no_weights)
    alien = tmp_path / "alien"
    shutil.copytree(model_dirs("bamba"), alien)
    config = json.loads((alien / "config.json").read_text())
    config["model_type"] = "llama"
    (alien / "config.json").write_text(json.dumps(config))
    with pytest.raises(SpecError, match="unsupported model_type 'llama'"):
        load_model(alien)
    broken = tmp_path / "broken"
    shutil.copytree(model_dirs("bamba"), broken)
    config = json.loads((broken / "config.json").read_text())
    del config["mamba_d_state"]
    (broken / "config.json").write_text(json.dumps(config))
    with pytest.raises(SpecError, match="mamba_d_state"):
        load_model(broken)


def test_unsupported_dtype(model_dirs: Callable[[str], Path]) -> None:
    with pytest.raises(ConfigError, match="dtype"):
        load_model(model_dirs("bamba"), dtype="int8")
