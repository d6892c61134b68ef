"""Shared fixtures of the engine tests: tiny checkpoints written once per session."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from hycache.engine.archs import init_model
from hycache.engine.model import LoadedModel, load_model

# tiny models: one thread is faster than two fighting over two cores
torch.set_num_threads(1)


@pytest.fixture(scope="session")
def model_dirs(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    made: dict[str, Path] = {}

    def get(arch: str) -> Path:
        if arch not in made:
            made[arch] = init_model(arch, tmp_path_factory.mktemp(arch), seed=0)
        return made[arch]

    return get


@pytest.fixture(scope="session")
def models(model_dirs: Callable[[str], Path]) -> Callable[[str], LoadedModel]:
    loaded: dict[str, LoadedModel] = {}

    def get(arch: str) -> LoadedModel:
        if arch not in loaded:
            loaded[arch] = load_model(model_dirs(arch))
        return loaded[arch]

    return get


@pytest.fixture(autouse=True)
def _trace_cache_in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Parsed traces go to a per-test directory, never to the user's cache."""
    monkeypatch.setenv("HYCACHE_CACHE_DIR", str(tmp_path / "trace-cache"))
