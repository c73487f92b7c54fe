from __future__ import annotations

from pathlib import Path

import pytest

from pdserve.engine.model.default_model import default_model_path
from pdserve.engine.runtime import Runtime
from tests.tiny_model import write_tiny_model


@pytest.fixture(scope="session")
def tiny_model_path(tmp_path_factory) -> Path:
    return write_tiny_model(tmp_path_factory.mktemp("models") / "tiny.gguf")


@pytest.fixture(scope="session")
def tiny_runtime(tiny_model_path) -> Runtime:
    return Runtime.load(tiny_model_path)


@pytest.fixture(scope="session")
def real_model_path() -> Path:
    return default_model_path()


@pytest.fixture(scope="session")
def real_runtime(real_model_path) -> Runtime:
    return Runtime.load(real_model_path)


@pytest.fixture(scope="session")
def tiny_long_model_path(tmp_path_factory) -> Path:
    """The tiny model with a 4096-token context, for long generations."""
    return write_tiny_model(tmp_path_factory.mktemp("models") / "tiny-long.gguf", context=4096)


@pytest.fixture(scope="session")
def tiny_judge_model_path(tmp_path_factory) -> Path:
    """The tiny model whose completeness check always reads P(yes) = 0.5 (tests/tiny_model.py, even_judge)."""
    return write_tiny_model(tmp_path_factory.mktemp("models") / "tiny-judge.gguf", even_judge=True)


@pytest.fixture(scope="session")
def tiny_judge_runtime(tiny_judge_model_path) -> Runtime:
    return Runtime.load(tiny_judge_model_path)
